package cluster_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

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

func startPod(t *testing.T, ctx context.Context, reg *membership.Store, l *notify.Listener, role string, n int) *pod {
	t.Helper()
	p := &pod{id: fmt.Sprintf("%s-%d", role, n), role: role, shards: cluster.NewShardSet(shard.Range{}), done: make(chan struct{})}
	p.reporter = &cluster.Reporter{Registry: reg, ID: p.id, Role: role, Every: beat, Shards: p.shards, Log: zerolog.Nop()}
	w := &cluster.TopologyWatcher{Listener: l, Poll: beat, Log: zerolog.Nop(),
		Reactors: []cluster.Reactor{&cluster.Resharder{Registry: reg, MemberID: p.id, Shards: p.shards, Liveness: liveness, Log: zerolog.Nop()}}}
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

func TestCluster_RolesTileAndRetileOnLeaveAndCrash(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := pgtest.Pool(t)
	reg := membership.New(pool)
	l := notify.NewListener(pool, zerolog.Nop())
	go func() { _ = l.Run(ctx) }()

	var brokers, controls []*pod
	for i := range 3 {
		brokers = append(brokers, startPod(t, ctx, reg, l, membership.RoleBroker, i))
	}
	for i := range 2 {
		controls = append(controls, startPod(t, ctx, reg, l, membership.RoleControl, i))
	}
	require.Eventually(t, func() bool { return tiles(brokers) && tiles(controls) }, 10*time.Second, 10*time.Millisecond,
		"each role tiles [0,256) on its own")

	// Graceful leave: stop beating, delete the row → re-tile on the NOTIFY.
	leaver := brokers[2]
	leaver.cancel()
	<-leaver.done
	leaver.reporter.Deregister()
	left := time.Now()
	require.Eventually(t, func() bool { return tiles(brokers[:2]) }, 5*time.Second, 5*time.Millisecond)
	require.Less(t, time.Since(left), liveness+2*beat, "a graceful leave re-tiles without waiting out the liveness window")

	// Crash: stop beating, keep the row → re-tile once the heartbeat lapses.
	crashed := controls[1]
	crashed.cancel()
	<-crashed.done
	require.Eventually(t, func() bool { return tiles(controls[:1]) }, 10*time.Second, 10*time.Millisecond,
		"a crashed member drops out within the liveness window")
	require.True(t, tiles(brokers[:2]), "the other role is untouched")
}
