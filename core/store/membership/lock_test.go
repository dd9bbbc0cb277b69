package membership_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/store/membership"
	"github.com/converge-run/converge/db/pgpool"
	"github.com/converge-run/converge/db/pgtest"
)

func TestSessionLock_AKeyIsHeldByOneSessionAndRecordedOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := membership.New(pool)
	l, err := membership.AcquireSessionLock(ctx, pool, "a", 7)
	require.NoError(t, err)
	defer l.Close()
	require.NoError(t, l.Ping(ctx, time.Second))
	_, err = membership.AcquireSessionLock(ctx, pool, "b", 7)
	require.ErrorIs(t, err, membership.ErrLockHeld, "a held key is refused")

	_, err = s.Upsert(ctx, membership.Member{ID: "a", Role: membership.RoleBroker, LockKey: 7})
	require.NoError(t, err)
	l.Close()
	_, err = membership.AcquireSessionLock(ctx, pool, "b", 7)
	require.ErrorIs(t, err, membership.ErrLockHeld, "a key another member's row records is refused even when free")
	// The closed session's backend ends asynchronously: until it has, its
	// lock is still held, so the member's own re-take is retried until the
	// old session is gone (a broken re-take never succeeds).
	require.Eventually(t, func() bool {
		again, err := membership.AcquireSessionLock(ctx, pool, "a", 7)
		if err != nil {
			require.ErrorIs(t, err, membership.ErrLockHeld)
			return false
		}
		again.Close()
		return true
	}, 10*time.Second, 20*time.Millisecond, "the member itself re-takes its own key")
}

func TestReapUnlocked_RemovesOnlyMembersWhoseLockIsGone(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := membership.New(pool)
	alive, err := membership.AcquireSessionLock(ctx, pool, "alive", 11)
	require.NoError(t, err)
	defer alive.Close()
	crashed, err := membership.AcquireSessionLock(ctx, pool, "crashed", 12)
	require.NoError(t, err)
	for _, m := range []membership.Member{
		{ID: "alive", Role: membership.RoleBroker, LockKey: 11},
		{ID: "crashed", Role: membership.RoleBroker, LockKey: 12},
		{ID: "old-binary", Role: membership.RoleBroker},
	} {
		_, err := s.Upsert(ctx, m)
		require.NoError(t, err)
	}
	require.NoError(t, alive.Ping(ctx, time.Second)) // a live owner pings its session
	ids, err := s.ReapUnlocked(ctx, 0)
	require.NoError(t, err)
	require.Empty(t, ids, "every lock is held")
	span, err := s.AssignShards(ctx, "alive", membership.DefaultTotalShards, membership.DefaultLiveness)
	require.NoError(t, err)
	require.Equal(t, 85, span.Hi-span.Lo, "three live members")

	crashed.Close() // the backend ends (asynchronously): the lock goes with it
	require.Eventually(t, func() bool {
		span, err = s.AssignShards(ctx, "alive", membership.DefaultTotalShards, membership.DefaultLiveness)
		require.NoError(t, err)
		return span.Hi-span.Lo == 128
	}, 10*time.Second, 5*time.Millisecond, "a member whose lock is gone is not live, before anyone reaps it")
	live, err := s.ListLive(ctx, membership.DefaultLiveness)
	require.NoError(t, err)
	require.Len(t, live, 2, "routing agrees with tiling")

	n := countNotifies(t, pool, 300*time.Millisecond, func() {
		require.NoError(t, alive.Ping(ctx, time.Second))
		ids, err = s.ReapUnlocked(ctx, 11) // the live member's probe
		require.NoError(t, err)
	})
	require.Equal(t, []string{"crashed"}, ids)
	require.Equal(t, 1, n, "the removal wakes the topology watchers")
	all, err := s.List(ctx)
	require.NoError(t, err)
	require.Len(t, all, 2, "the live member and the lock-less one stay")
}

// A caller whose own lock the database does not show held removes no one:
// its lock ended after its last check, with every peer's (a restart or
// failover it has not noticed yet), and the peers are reconnecting, not
// dead. A caller that holds no lock (0) judges as before.
func TestReapUnlocked_RemovesNoOneWhileTheCallersOwnLockIsGone(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := membership.New(pool)
	for _, m := range []membership.Member{
		{ID: "self", Role: membership.RoleBroker, LockKey: 31},
		{ID: "peer", Role: membership.RoleBroker, LockKey: 32},
	} {
		_, err := s.Upsert(ctx, m) // both locks ended a moment ago
		require.NoError(t, err)
	}
	ids, err := s.ReapUnlocked(ctx, 31)
	require.NoError(t, err)
	require.Empty(t, ids, "the caller's own lock is gone: it judges no one")
	all, err := s.List(ctx)
	require.NoError(t, err)
	require.Len(t, all, 2)

	self, err := membership.AcquireSessionLock(ctx, pool, "self", 31)
	require.NoError(t, err)
	defer self.Close()
	ids, err = s.ReapUnlocked(ctx, 31)
	require.NoError(t, err)
	require.Equal(t, []string{"peer"}, ids, "with its own lock held, the caller removes the peer whose lock is gone")
}

func TestReapUnlocked_IsScopedToItsDatabase(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	other := pgtest.Pool(t)
	s := membership.New(pool)
	// The same key held in another database of the cluster does not keep
	// this database's member alive.
	l, err := membership.AcquireSessionLock(ctx, other, "x", 21)
	require.NoError(t, err)
	defer l.Close()
	_, err = s.Upsert(ctx, membership.Member{ID: "x", Role: membership.RoleControl, LockKey: 21})
	require.NoError(t, err)
	ids, err := s.ReapUnlocked(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"x"}, ids)
}

// A lock session that stops answering its owner (a partition behind a proxy
// that keeps the TCP connection open: the server's keepalives see nothing)
// sits idle; past 3 s it no longer counts, and the probe ends it.
func TestReapUnlocked_AnIdleLockSessionIsACutOffMember(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := membership.New(pool)
	// Taken before the cut-off session's last statement: its idle time is
	// at most the time since then (a loaded machine spends a while on the
	// statements below).
	pinged := time.Now()
	cut, err := membership.AcquireSessionLock(ctx, pool, "cut-off", 31)
	require.NoError(t, err)
	defer cut.Close()
	alive, err := membership.AcquireSessionLock(ctx, pool, "alive", 32)
	require.NoError(t, err)
	defer alive.Close()
	for _, m := range []membership.Member{{ID: "cut-off", Role: membership.RoleBroker, LockKey: 31},
		{ID: "alive", Role: membership.RoleBroker, LockKey: 32}} {
		_, err := s.Upsert(ctx, m)
		require.NoError(t, err)
	}
	var ids []string
	require.Eventually(t, func() bool {
		require.NoError(t, alive.Ping(ctx, time.Second)) // the live member keeps pinging
		got, err := s.ReapUnlocked(ctx, 0)
		require.NoError(t, err)
		ids = append(ids, got...)
		return len(ids) > 0
	}, 20*time.Second, 250*time.Millisecond)
	require.Equal(t, []string{"cut-off"}, ids)
	require.Greater(t, time.Since(pinged), 3*time.Second, "not before its session sat idle for 3 s")
	require.Error(t, cut.Ping(ctx, time.Second), "its session was terminated")
}

// The function set is applied before the migrations, so the probe runs over
// the schema before 00020 (tombstones without the request columns) until the
// migration lands: it still removes the member and records its tombstone.
func TestReapUnlocked_WorksOverTheSchemaBeforeTombstonesKeptRequests(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := membership.New(pool)
	// The row as an older binary writes it; its lock is not held.
	_, err := pool.Exec(ctx, `
ALTER TABLE cluster_member_tombstones DROP COLUMN control, DROP COLUMN control_by, DROP COLUMN control_at;
INSERT INTO cluster_members (member_id, role, lock_key, control) VALUES ('gone', 'broker', 51, 'drain')`)
	require.NoError(t, err)
	ids, err := s.ReapUnlocked(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"gone"}, ids)
	var tombstoned bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM cluster_member_tombstones WHERE member_id = 'gone')`).
		Scan(&tombstoned))
	require.True(t, tombstoned)
}

// A member cut off behind something that keeps its connections open (a
// proxy, a NAT box) leaves its sessions' open transactions holding their
// locks until the cut heals: the peers that took its shards over would wait
// behind them (a control's drain, held by the cut-off control's drain
// transaction, stalled the chaos suite's control-partition wave for the
// whole 8 s partition). Removing the member ends its sessions still in a
// transaction; other sessions' transactions are left alone.
func TestReapUnlocked_EndsTheRemovedMembersOpenTransactions(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	pool := pgtest.PoolFor(t, url)
	s := membership.New(pool)
	cfg, err := pgpool.Config(url, 4)
	require.NoError(t, err)
	pgpool.NameSessions(cfg, "cut-off")
	member, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer member.Close()

	lock, err := membership.AcquireSessionLock(ctx, member, "cut-off", 41)
	require.NoError(t, err)
	_, err = s.Upsert(ctx, membership.Member{ID: "cut-off", Role: membership.RoleControl, LockKey: 41})
	require.NoError(t, err)
	// The member's transaction in flight when it was cut off, and a peer's.
	stuck, err := member.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = stuck.Rollback(ctx) }()
	_, err = stuck.Exec(ctx, `SELECT pg_advisory_xact_lock(7, 7)`)
	require.NoError(t, err)
	peers, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = peers.Rollback(ctx) }()
	_, err = peers.Exec(ctx, `SELECT pg_advisory_xact_lock(8, 8)`)
	require.NoError(t, err)

	lock.Close() // its lock goes (as a peer's probe ends an idle lock session)
	var ids []string
	require.Eventually(t, func() bool {
		got, err := s.ReapUnlocked(ctx, 0)
		require.NoError(t, err)
		ids = append(ids, got...)
		return len(ids) > 0
	}, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, []string{"cut-off"}, ids)

	require.Eventually(t, func() bool {
		var free bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(7, 7)`).Scan(&free))
		return free
	}, 10*time.Second, 50*time.Millisecond, "the removed member's transaction ended, and its locks with it")
	require.Error(t, stuck.Commit(ctx), "its session was terminated")
	_, err = peers.Exec(ctx, `SELECT 1`)
	require.NoError(t, err, "a session of another name keeps its transaction")
	require.NoError(t, peers.Commit(ctx))
}
