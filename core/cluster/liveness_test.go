package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
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
	"github.com/converge-run/converge/core/testlog"
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
type reaperFn func(ctx context.Context, selfKey int32) ([]string, error)

func (f reaperFn) ReapUnlocked(ctx context.Context, selfKey int32) ([]string, error) {
	return f(ctx, selfKey)
}

// startLockedPodGated is startLockedPod whose lock acquisitions after the
// first each wait for gate to close, and whose dead-member probe fails while
// down reports true (the database unreachable); either may be nil. The
// pod's done closes once all its services have returned, and the lock is
// released only then, as core/app does: a session is one connection, and
// Release closing it under a running check is a data race.
func startLockedPodGated(t *testing.T, ctx context.Context, pool *pgxpool.Pool, l *notify.Listener, role string, n int,
	gate <-chan struct{}, down *atomic.Bool) *lockedPod {
	t.Helper()
	reg := membership.New(pool)
	p := &pod{id: fmt.Sprintf("%s-%d", role, n), role: role, shards: cluster.NewShardSet(shard.Range{}), done: make(chan struct{})}
	taken := false
	lock := &cluster.LivenessLock{Log: zerolog.Nop(), Acquire: func(ctx context.Context, key int32) (cluster.LockSession, error) {
		if taken && gate != nil {
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
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
	// As core/app: the return is announced (Rejoin wakes the peers), since
	// the row stayed and its beat alone wakes no one.
	lock.OnHeld = func() { p.reporter.Rejoin(); w.Kick() }
	probe := &cluster.DeadMemberProbe{Registry: reaperFn(func(ctx context.Context, selfKey int32) ([]string, error) {
		if down != nil && down.Load() {
			return nil, errors.New("dial tcp: connect: connection refused")
		}
		return reg.ReapUnlocked(ctx, selfKey)
	}), Held: lock.Settled, Key: lock.Key, Log: zerolog.Nop()}
	pctx, cancel := context.WithCancel(ctx)
	p.cancel = cancel
	var wg sync.WaitGroup
	for _, run := range []func(context.Context) error{w.Run, lock.Run, probe.Run, p.reporter.Run} {
		wg.Add(1)
		go func() { defer wg.Done(); _ = run(pctx) }()
	}
	go func() { wg.Wait(); close(p.done) }()
	t.Cleanup(func() { cancel(); <-p.done; lock.Release() })
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
	ctx, pool, l := clusterDB(t)
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
	// The survivors can re-tile before the row goes: tiling counts only
	// members whose lock is held, and any wake (the crashed member's last
	// beat among them) re-tiles them; the row goes at a peer's next probe.
	require.Eventually(t, func() bool {
		members, err := membership.New(pool).List(ctx)
		require.NoError(t, err)
		return len(members) == 2
	}, 3*time.Second, 5*time.Millisecond, "a peer removes the crashed member's row")
}

// A database restart ends every member's lock at once, and the members take
// them back one by one: the first back must not reap the others as dead
// while they reconnect (a removal frees their leases, so the tasks they run
// are re-claimed elsewhere, and every member re-tiles twice). Here one
// member's lock comes back 2 s after the others', four ticks of their
// dead-member probes.
func TestLivenessLock_AfterADatabaseRestartNoMemberIsReapedWhileItRetakesItsLock(t *testing.T) {
	t.Parallel()
	ctx, pool, l := clusterDB(t)
	fast, slow := make(chan struct{}), make(chan struct{})
	var down atomic.Bool
	brokers := []*lockedPod{
		startLockedPodGated(t, ctx, pool, l, membership.RoleBroker, 0, fast, &down),
		startLockedPodGated(t, ctx, pool, l, membership.RoleBroker, 1, fast, &down),
		startLockedPodGated(t, ctx, pool, l, membership.RoleBroker, 2, slow, &down),
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
	// No member was removed at all, including by a probe that was already
	// on its way to the database when the locks ended (it passed its own
	// check, then found every lock gone, its own too:
	// TestDeadMemberProbe_AProbeInFlightWhenEveryLockEndsRemovesNoOne).
	var reaped []string
	require.NoError(t, pool.QueryRow(ctx, `
SELECT coalesce(array_agg(member_id || ' at ' || removed_at::text), '{}') FROM cluster_member_tombstones`).Scan(&reaped))
	require.Empty(t, reaped, "no member was removed as dead (the locks ended at %s)", restartAt.UTC().Format(time.RFC3339Nano))
}

func TestLivenessLock_AMemberThatLosesItsLockStopsClaimingAndRejoins(t *testing.T) {
	t.Parallel()
	ctx, pool, l := clusterDB(t)
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

// A dead-member probe that passed its own check (Settled: its lock held)
// can reach the database after that lock, and every peer's, ended at once: a
// restart or failover the member has not noticed yet (its next lock check is
// up to 250 ms away, a hung one takes a second), or an operator's reset of
// the lock sessions. Every lock is gone then, its own too, and the probe
// must remove no one: its peers are reconnecting as it is, not dead.
func TestDeadMemberProbe_AProbeInFlightWhenEveryLockEndsRemovesNoOne(t *testing.T) {
	t.Parallel()
	ctx, pool, l := clusterDB(t)
	back := make(chan struct{}) // the locks are re-taken once it closes
	var quiet atomic.Bool       // the pods' own probes stand aside: the one under test is below
	quiet.Store(true)
	var brokers []*lockedPod
	for i := range 3 {
		brokers = append(brokers, startLockedPodGated(t, ctx, pool, l, membership.RoleBroker, i, back, &quiet))
	}
	require.Eventually(t, func() bool { return tiles(pods(brokers...)) }, 20*time.Second, 10*time.Millisecond)

	self := brokers[0]
	reg := membership.New(pool)
	entered, release := make(chan struct{}), make(chan struct{})
	type outcome struct {
		ids []string
		err error
	}
	result := make(chan outcome, 1)
	var once sync.Once
	probe := &cluster.DeadMemberProbe{Every: 10 * time.Millisecond, Held: self.lock.Settled, Key: self.lock.Key, Log: zerolog.Nop(),
		Registry: reaperFn(func(ctx context.Context, selfKey int32) ([]string, error) {
			first := false
			once.Do(func() { first = true })
			if !first {
				<-ctx.Done()
				return nil, ctx.Err()
			}
			close(entered)
			select { // in flight: past its own check, not yet at the database
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			ids, err := reg.ReapUnlocked(ctx, selfKey)
			result <- outcome{ids, err}
			return ids, err
		})}
	pctx, pcancel := context.WithCancel(ctx)
	probeDone := make(chan struct{})
	go func() { defer close(probeDone); _ = probe.Run(pctx) }()
	defer func() { pcancel(); <-probeDone }()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the probe never ran")
	}

	// Every lock session ends; the probe reaches the database once the
	// locks are gone from pg_locks.
	_, err := pool.Exec(ctx, `
SELECT pg_terminate_backend(pid) FROM pg_locks
 WHERE locktype = 'advisory' AND classid = $1::oid AND objsubid = 2 AND database = (
       SELECT oid FROM pg_database WHERE datname = current_database())`, membership.LockClass)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `
SELECT count(*) FROM pg_locks
 WHERE locktype = 'advisory' AND classid = $1::oid AND objsubid = 2 AND database = (
       SELECT oid FROM pg_database WHERE datname = current_database())`, membership.LockClass).Scan(&n))
		return n == 0
	}, 10*time.Second, 10*time.Millisecond, "the lock sessions are gone")
	close(release)
	var got outcome
	select {
	case got = <-result:
	case <-time.After(10 * time.Second):
		t.Fatal("the probe never returned")
	}
	require.NoError(t, got.err)
	require.Empty(t, got.ids, "a probe whose own lock is gone removed its peers as dead")
	members, err := reg.List(ctx)
	require.NoError(t, err)
	require.Len(t, members, 3, "every member keeps its row")

	close(back)
	quiet.Store(false)
	require.Eventually(t, func() bool { return tiles(pods(brokers...)) }, 10*time.Second, 10*time.Millisecond,
		"all three tile again")
}

// The removal's WARN names both members apart: member_id is the member
// that logs, as on every other line a member writes, and the member it
// removed is removed_member_id (it was member_id, which read as the logger).
func TestDeadMemberProbe_ARemovalNamesTheLoggingMemberAndTheRemovedOne(t *testing.T) {
	t.Parallel()
	var logs testlog.Buffer
	var once sync.Once
	probe := &cluster.DeadMemberProbe{ID: "m-self", Every: time.Millisecond, Log: zerolog.New(&logs),
		Registry: reaperFn(func(context.Context, int32) ([]string, error) {
			var ids []string
			once.Do(func() { ids = []string{"m-crashed"} })
			return ids, nil
		})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = probe.Run(ctx) }()
	defer func() { cancel(); <-done }()
	require.Eventually(t, func() bool { return logs.Count("liveness lock is gone") > 0 }, 10*time.Second, time.Millisecond,
		"the removal is logged")
	var line struct {
		Level   string `json:"level"`
		Member  string `json:"member_id"`
		Removed string `json:"removed_member_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(logs.Lines()[0]), &line), logs.String())
	require.Equal(t, "warn", line.Level)
	require.Equal(t, "m-self", line.Member, "member_id is the member that logs")
	require.Equal(t, "m-crashed", line.Removed, "removed_member_id is the member removed")
}
