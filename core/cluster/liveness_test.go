package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
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

// lockedPod is a pod wired as core/app wires a process: a liveness lock
// taken before the first beat, gating the reporter and the resharder, and a
// dead-member probe.
type lockedPod struct {
	*pod
	lock *cluster.LivenessLock
}

// slowBeat keeps heartbeats far from lapsing during these tests, so only the
// lock can make a member drop out quickly.
const slowBeat = 10 * time.Second

func startLockedPod(t *testing.T, ctx context.Context, pool *pgxpool.Pool, l *notify.Listener, role string, n int) *lockedPod {
	t.Helper()
	return startLockedPodGated(t, ctx, pool, l, role, n, nil, nil)
}

// reaperFn is a cluster.Reaper.
type reaperFn func(ctx context.Context) ([]string, error)

func (f reaperFn) ReapUnlocked(ctx context.Context) ([]string, error) { return f(ctx) }

// startLockedPodGated is startLockedPod whose lock acquisitions after the
// first each wait for gate, and whose dead-member probe fails while down
// reports true (the database unreachable); either may be nil.
func startLockedPodGated(t *testing.T, ctx context.Context, pool *pgxpool.Pool, l *notify.Listener, role string, n int,
	gate func(), down *atomic.Bool) *lockedPod {
	t.Helper()
	reg := membership.New(pool)
	p := &pod{id: fmt.Sprintf("%s-%d", role, n), role: role, shards: cluster.NewShardSet(shard.Range{}), done: make(chan struct{})}
	taken := false
	lock := &cluster.LivenessLock{Log: zerolog.Nop(), Acquire: func(ctx context.Context, key int32) (cluster.LockSession, error) {
		if taken && gate != nil {
			gate()
		}
		taken = true
		return membership.AcquireSessionLock(ctx, pool, p.id, key)
	}}
	lock.TestSignals.Init()
	require.NoError(t, lock.Take(ctx))
	p.reporter = &cluster.Reporter{Registry: reg, ID: p.id, Role: role, Every: slowBeat, Shards: p.shards, Lock: lock, Log: zerolog.Nop()}
	w := &cluster.TopologyWatcher{Listener: l, Poll: slowBeat, Log: zerolog.Nop(),
		Reactors: []cluster.Reactor{&cluster.Resharder{Registry: reg, MemberID: p.id, Shards: p.shards,
			Liveness: 3 * slowBeat, Held: lock.Held, OnChange: p.reporter.Kick, Log: zerolog.Nop()}}}
	lock.OnLost = func() { p.shards.Set(shard.Range{}) }
	lock.OnHeld = func() { p.reporter.Kick(); w.Kick() }
	probe := &cluster.DeadMemberProbe{Registry: reaperFn(func(ctx context.Context) ([]string, error) {
		if down != nil && down.Load() {
			return nil, errors.New("dial tcp: connect: connection refused")
		}
		return reg.ReapUnlocked(ctx)
	}), Held: lock.Settled, Log: zerolog.Nop()}
	pctx, cancel := context.WithCancel(ctx)
	p.cancel = cancel
	go func() {
		defer close(p.done)
		go func() { _ = w.Run(pctx) }()
		go func() { _ = lock.Run(pctx) }()
		go func() { _ = probe.Run(pctx) }()
		_ = p.reporter.Run(pctx)
	}()
	t.Cleanup(lock.Release)
	return &lockedPod{pod: p, lock: lock}
}

func pods(lp ...*lockedPod) []*pod {
	out := make([]*pod, 0, len(lp))
	for _, p := range lp {
		out = append(out, p.pod)
	}
	return out
}

func TestLivenessLock_ACrashedMemberIsReTiledAwayInAboutASecond(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := pgtest.Pool(t)
	l := notify.NewListener(pool, zerolog.Nop())
	go func() { _ = l.Run(ctx) }()
	var brokers []*lockedPod
	for i := range 3 {
		brokers = append(brokers, startLockedPod(t, ctx, pool, l, membership.RoleBroker, i))
	}
	require.Eventually(t, func() bool { return tiles(pods(brokers...)) }, 20*time.Second, 10*time.Millisecond)

	// A crash: the process stops and its backend goes; nothing deregisters,
	// and the heartbeat (10 s beat, 30 s window) is nowhere near lapsing.
	crashed := brokers[1]
	crashed.cancel()
	<-crashed.done
	crashed.lock.Release()
	at := time.Now()
	require.Eventually(t, func() bool { return tiles(pods(brokers[0], brokers[2])) }, 10*time.Second, 5*time.Millisecond,
		"the survivors take the crashed member's shards")
	took := time.Since(at)
	t.Logf("re-tiled %s after the crash", took)
	require.Less(t, took, 3*time.Second, "detected by its lock, not its heartbeat")
	members, err := membership.New(pool).List(ctx)
	require.NoError(t, err)
	require.Len(t, members, 2, "a peer removed the crashed member's row")
}

// A database restart ends every member's lock at once, and the members take
// them back one by one: the first back must not reap the others as dead
// while they reconnect (a removal frees their leases, so the tasks they run
// are re-claimed elsewhere, and every member re-tiles twice). Here one
// member's lock comes back 2 s after the others', four ticks of their
// dead-member probes.
func TestLivenessLock_AfterADatabaseRestartNoMemberIsReapedWhileItRetakesItsLock(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := pgtest.Pool(t)
	l := notify.NewListener(pool, zerolog.Nop())
	go func() { _ = l.Run(ctx) }()
	fast, slow := make(chan struct{}), make(chan struct{})
	var down atomic.Bool
	brokers := []*lockedPod{
		startLockedPodGated(t, ctx, pool, l, membership.RoleBroker, 0, func() { <-fast }, &down),
		startLockedPodGated(t, ctx, pool, l, membership.RoleBroker, 1, func() { <-fast }, &down),
		startLockedPodGated(t, ctx, pool, l, membership.RoleBroker, 2, func() { <-slow }, &down),
	}
	require.Eventually(t, func() bool { return tiles(pods(brokers...)) }, 20*time.Second, 10*time.Millisecond)

	// The restart, as the members see it: every lock session ends at once,
	// and the database answers no probe until it is back.
	down.Store(true)
	var restartAt time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&restartAt))
	_, err := pool.Exec(ctx, `
SELECT pg_terminate_backend(pid) FROM pg_locks
 WHERE locktype = 'advisory' AND classid = $1::oid AND objsubid = 2 AND database = (
       SELECT oid FROM pg_database WHERE datname = current_database())`, membership.LockClass)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return !brokers[0].lock.Held() && !brokers[1].lock.Held() && !brokers[2].lock.Held()
	}, 10*time.Second, 10*time.Millisecond, "every member notices its lock is gone")
	down.Store(false)
	close(fast)
	require.Eventually(t, func() bool { return brokers[0].lock.Held() && brokers[1].lock.Held() }, 10*time.Second,
		10*time.Millisecond, "the first two take their locks back")
	time.Sleep(2 * time.Second) // the slow member's reconnect: the fault itself, not a wait for a condition
	close(slow)
	require.Eventually(t, func() bool { return tiles(pods(brokers...)) }, 10*time.Second, 10*time.Millisecond,
		"all three tile again")
	// Removals since the restart only: its subject (under -race and
	// -count=4, one run in about ten had every member removed at once just
	// before the restart, a matter of its own).
	var reaped []string
	require.NoError(t, pool.QueryRow(ctx, `
SELECT coalesce(array_agg(member_id || ' at ' || removed_at::text), '{}')
  FROM cluster_member_tombstones WHERE removed_at >= $1`, restartAt).Scan(&reaped))
	require.Empty(t, reaped, "no member was removed as dead after the restart at %s", restartAt.UTC().Format(time.RFC3339Nano))
}

func TestLivenessLock_AMemberThatLosesItsLockStopsClaimingAndRejoins(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := pgtest.Pool(t)
	l := notify.NewListener(pool, zerolog.Nop())
	go func() { _ = l.Run(ctx) }()
	a := startLockedPod(t, ctx, pool, l, membership.RoleControl, 0)
	b := startLockedPod(t, ctx, pool, l, membership.RoleControl, 1)
	require.Eventually(t, func() bool { return tiles(pods(a, b)) }, 20*time.Second, 10*time.Millisecond)

	// The lock's backend is terminated (an operator, a failover, a proxy
	// reset): b must give up its range, then take the lock again, re-register
	// and get its half back.
	_, err := pool.Exec(ctx, `
SELECT pg_terminate_backend(pid) FROM pg_locks
 WHERE locktype = 'advisory' AND classid = $1::oid AND objid = $2::oid AND objsubid = 2`, membership.LockClass, b.lock.Key())
	require.NoError(t, err)
	held, ok := b.lock.TestSignals.Held.WaitFor(5 * time.Second)
	require.True(t, ok, "the loss was noticed")
	require.False(t, held)
	require.True(t, b.shards.Span().Empty(), "no range while the lock is not held")
	require.Eventually(t, func() bool { return b.lock.Held() }, 10*time.Second, 10*time.Millisecond, "the lock is taken again")
	require.Eventually(t, func() bool { return tiles(pods(a, b)) }, 10*time.Second, 10*time.Millisecond,
		"the member re-registered and the role tiles over both again")
}
