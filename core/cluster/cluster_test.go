package cluster_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/cluster"
	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/membership"
	"github.com/converge-run/converge/core/store/notify"
	"github.com/converge-run/converge/db/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// pod is one simulated process: reporter + topology watcher + resharder.
type pod struct {
	id       string
	role     string
	shards   *cluster.ShardSet
	reporter *cluster.Reporter
	cancel   context.CancelFunc
	done     chan struct{}
}

const (
	beat     = time.Second
	liveness = 3 * beat
)

// clusterDB is a test's database, a listener on it, and a context for the
// test's services that ends when the test does.
func clusterDB(t *testing.T) (context.Context, *pgxpool.Pool, *notify.Listener) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pool := pgtest.Pool(t)
	t.Cleanup(cancel) // before the pool closes (cleanups run last first)
	l := notify.NewListener(pool, zerolog.Nop())
	go func() { _ = l.Run(ctx) }()
	return ctx, pool, l
}

func startPod(t *testing.T, ctx context.Context, reg *membership.Store, l *notify.Listener, role string, n int) *pod {
	t.Helper()
	return startPodPaced(t, ctx, reg, l, role, n, beat, liveness)
}

// startPodPaced starts a pod whose topology watcher polls every poll and
// judges the members' beats by window.
func startPodPaced(t *testing.T, ctx context.Context, reg *membership.Store, l *notify.Listener, role string, n int,
	poll, window time.Duration) *pod {
	t.Helper()
	p := &pod{id: fmt.Sprintf("%s-%d", role, n), role: role, shards: cluster.NewShardSet(shard.Range{}), done: make(chan struct{})}
	p.reporter = &cluster.Reporter{Registry: reg, ID: p.id, Role: role, Every: beat, Shards: p.shards, Log: zerolog.Nop()}
	w := &cluster.TopologyWatcher{Listener: l, Poll: poll, Log: zerolog.Nop(),
		Reactors: []cluster.Reactor{&cluster.Resharder{Registry: reg, MemberID: p.id, Shards: p.shards, Liveness: window, Log: zerolog.Nop()}}}
	pctx, cancel := context.WithCancel(ctx)
	p.cancel = cancel
	go func() {
		defer close(p.done)
		go func() { _ = w.Run(pctx) }()
		_ = p.reporter.Run(pctx)
	}()
	return p
}

// tiles reports whether the pods' spans tile [0,256) disjointly.
func tiles(pods []*pod) bool {
	spans := make([]shard.Range, 0, len(pods))
	for _, p := range pods {
		spans = append(spans, p.shards.Span())
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].Lo < spans[j].Lo })
	next := 0
	for _, s := range spans {
		if s.Empty() || s.Lo != next {
			return false
		}
		next = s.Hi
	}
	return next == 256
}

func TestCluster_RolesTileAndRetileOnACrash(t *testing.T) {
	t.Parallel()
	ctx, pool, l := clusterDB(t)
	reg := membership.New(pool)

	var brokers, controls []*pod
	for i := range 3 {
		brokers = append(brokers, startPod(t, ctx, reg, l, membership.RoleBroker, i))
	}
	for i := range 2 {
		controls = append(controls, startPod(t, ctx, reg, l, membership.RoleControl, i))
	}
	require.Eventually(t, func() bool { return tiles(brokers) && tiles(controls) }, 10*time.Second, 10*time.Millisecond,
		"each role tiles [0,256) on its own")

	// Crash: stop beating, keep the row → re-tile once the heartbeat lapses.
	crashed := controls[1]
	crashed.cancel()
	<-crashed.done
	require.Eventually(t, func() bool { return tiles(controls[:1]) }, 10*time.Second, 10*time.Millisecond,
		"a crashed member drops out within the liveness window")
	require.True(t, tiles(brokers), "the other role is untouched")
}

// A graceful leave (the row deleted) and a join (a row inserted) re-tile
// the role on their own cluster_changed: with the failsafe poll and the
// liveness window an hour away, nothing else could.
func TestCluster_ALeaveAndAJoinRetileOnTheirWake(t *testing.T) {
	t.Parallel()
	const never = time.Hour
	ctx, pool, l := clusterDB(t)
	reg := membership.New(pool)
	select {
	case <-l.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("listener not ready")
	}
	var brokers []*pod
	for i := range 3 {
		brokers = append(brokers, startPodPaced(t, ctx, reg, l, membership.RoleBroker, i, never, never))
	}
	require.Eventually(t, func() bool { return tiles(brokers) }, 10*time.Second, 10*time.Millisecond, "three brokers tile [0,256)")

	leaver := brokers[2]
	leaver.cancel()
	<-leaver.done
	leaver.reporter.Deregister()
	require.Eventually(t, func() bool { return tiles(brokers[:2]) }, 10*time.Second, 5*time.Millisecond,
		"a graceful leave re-tiles on its wake")

	brokers = append(brokers[:2], startPodPaced(t, ctx, reg, l, membership.RoleBroker, 3, never, never))
	require.Eventually(t, func() bool { return tiles(brokers) }, 10*time.Second, 5*time.Millisecond,
		"a join re-tiles on its wake")
}
