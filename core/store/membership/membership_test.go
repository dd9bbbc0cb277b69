package membership_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/membership"
	"github.com/converge-run/converge/db/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var ctx = context.Background()

// countNotifies counts the cluster_changed wakes do commits: it listens
// before do runs (a wake is delivered only to sessions listening when its
// transaction commits, so earlier ones never count) and until none arrives
// for d. The wakes are not gated or coalesced in time
// (cluster_members_changed), so no window has to pass before do.
func countNotifies(t *testing.T, pool *pgxpool.Pool, d time.Duration, do func()) int {
	t.Helper()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `LISTEN cluster_changed`)
	require.NoError(t, err)
	do()
	n := 0
	for {
		wctx, cancel := context.WithTimeout(ctx, d)
		_, err := conn.Conn().WaitForNotification(wctx)
		cancel()
		if err != nil {
			return n
		}
		n++
	}
}

func TestUpsert_StampsTheDatabaseClockAndRoundTrips(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := membership.New(pool)
	started := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	m := membership.Member{
		ID: "broker-7f9c", Role: membership.RoleBroker, Kinds: []string{"vpc", "route"},
		Shards: &shard.Range{Lo: 64, Hi: 128}, Config: json.RawMessage(`{"drain": "45s"}`),
		Version: "v1.2.3", Host: "node-a", PID: 4242, InFlight: 17, Workers: 5, StartedAt: started,
	}
	var dbNow time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT now()`).Scan(&dbNow))
	beat, err := s.Upsert(ctx, m)
	require.NoError(t, err)
	require.WithinDuration(t, dbNow, beat, 5*time.Second, "last_heartbeat is the database's now()")

	got, err := s.List(ctx)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.JSONEq(t, `{"drain": "45s"}`, string(got[0].Config))
	got[0].Config, m.Config = nil, nil
	require.True(t, got[0].StartedAt.Equal(started))
	got[0].StartedAt, m.StartedAt = started, started
	m.LastHeartbeat = got[0].LastHeartbeat
	require.False(t, got[0].ReadAt.Before(got[0].LastHeartbeat), "read by the database clock, after the beat")
	m.ReadAt = got[0].ReadAt
	require.Equal(t, m, got[0])

	m.InFlight, m.Workers, m.Shards = 3, 2, nil
	_, err = s.Heartbeat(ctx, m)
	require.NoError(t, err)
	got, err = s.List(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, got[0].InFlight, "a beat carries the live in-flight count")
	require.Equal(t, 2, got[0].Workers, "and the workers the broker serves")
	require.Nil(t, got[0].Shards)
	require.False(t, got[0].LastHeartbeat.Before(beat))
}

func TestHeartbeat_OnlyJoinsAndLeavesWakeTheTopologyWatchers(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := membership.New(pool)
	m := membership.Member{ID: "control-a", Role: membership.RoleControl}
	const quiet = 300 * time.Millisecond

	cases := []struct {
		reason string
		do     func()
		want   int
	}{
		{reason: "the first upsert is a join", do: func() { _, err := s.Upsert(ctx, m); require.NoError(t, err) }, want: 1},
		{reason: "a heartbeat upsert is not a topology change", do: func() {
			_, err := s.Heartbeat(ctx, m)
			require.NoError(t, err)
		}, want: 0},
		{reason: "a deregister is a leave", do: func() {
			ok, err := s.Deregister(ctx, m.ID)
			require.NoError(t, err)
			require.True(t, ok)
		}, want: 1},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, countNotifies(t, pool, quiet, tc.do), tc.reason)
	}
	ok, err := s.Deregister(ctx, m.ID)
	require.NoError(t, err)
	require.False(t, ok, "already gone")
}

func TestGCStale_RemovesOnlyRowsPastTheTTL(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := membership.New(pool)
	for _, id := range []string{"fresh", "notready", "crashed"} {
		_, err := s.Upsert(ctx, membership.Member{ID: id, Role: membership.RoleBroker})
		require.NoError(t, err)
	}
	_, err := pool.Exec(ctx, `UPDATE cluster_members SET last_heartbeat = now() - interval '1 minute' WHERE member_id = 'notready';
	                          UPDATE cluster_members SET last_heartbeat = now() - interval '6 minutes' WHERE member_id = 'crashed'`)
	require.NoError(t, err)
	n, err := s.GCStale(ctx, membership.DefaultGCTTL)
	require.NoError(t, err)
	require.Equal(t, 1, n, "a NotReady member stays visible; only a crashed one past the TTL goes")
	list, err := s.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)

	require.Zero(t, countNotifies(t, pool, 200*time.Millisecond, func() {
		n, err := s.GCStale(ctx, membership.DefaultGCTTL)
		require.NoError(t, err)
		require.Zero(t, n)
	}), "an idle GC tick wakes nobody")
}

// A beat that changes the served kinds wakes the peers (they route stages by
// the kinds a row advertises); a beat that changes nothing else does not.
// Members that come back together after an outage re-register within
// milliseconds of each other: each join must wake the peers, or a peer that
// re-tiled on the first join keeps a view without the later ones until its
// next poll (shards nobody claims meanwhile).
func TestUpsert_EveryJoinOfABurstWakesThePeers(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := membership.New(pool)
	n := countNotifies(t, pool, 500*time.Millisecond, func() {
		for _, id := range []string{"broker-a", "broker-b", "broker-c"} {
			_, err := s.Upsert(ctx, membership.Member{ID: id, Role: membership.RoleBroker})
			require.NoError(t, err)
		}
	})
	require.Equal(t, 3, n, "three joins, three wakes")
}

func TestUpsert_ABeatThatChangesTheServedKindsWakesThePeers(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := membership.New(pool)
	beat := func(kinds ...string) {
		t.Helper()
		_, err := s.Upsert(ctx, membership.Member{ID: "broker-k", Role: membership.RoleBroker, Kinds: kinds})
		require.NoError(t, err)
	}
	require.Positive(t, countNotifies(t, pool, 500*time.Millisecond, func() { beat() }), "a join wakes the peers")
	require.Zero(t, countNotifies(t, pool, 500*time.Millisecond, func() { beat() }), "a plain beat does not")
	require.Positive(t, countNotifies(t, pool, 500*time.Millisecond, func() { beat("vpc/v1") }), "a worker's kind arrived")
	require.Zero(t, countNotifies(t, pool, 500*time.Millisecond, func() { beat("vpc/v1") }), "the same kinds again")
	require.Positive(t, countNotifies(t, pool, 500*time.Millisecond, func() { beat() }), "the kind's last worker left")
}

// Peers spread the workers by the numbers the rows report: a beat that
// changes a broker's number of workers wakes them, one that keeps it does
// not, and a number below zero is refused.
func TestUpsert_ABeatThatChangesTheNumberOfWorkersWakesThePeers(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := membership.New(pool)
	beat := func(workers int) error {
		_, err := s.Upsert(ctx, membership.Member{ID: "broker-w", Role: membership.RoleBroker, Kinds: []string{"vpc/v1"},
			Workers: workers})
		return err
	}
	require.Positive(t, countNotifies(t, pool, 500*time.Millisecond, func() { require.NoError(t, beat(1)) }), "a join wakes the peers")
	require.Zero(t, countNotifies(t, pool, 500*time.Millisecond, func() { require.NoError(t, beat(1)) }), "a plain beat does not")
	require.Positive(t, countNotifies(t, pool, 500*time.Millisecond, func() { require.NoError(t, beat(2)) }), "a second worker arrived")
	require.Positive(t, countNotifies(t, pool, 500*time.Millisecond, func() { require.NoError(t, beat(0)) }), "both left")
	err := beat(-1)
	require.ErrorContains(t, err, "cluster_members_workers_check")
	live, err := s.List(ctx)
	require.NoError(t, err)
	require.Zero(t, live[0].Workers, "the refused beat wrote nothing")
}

// A member back after losing its liveness lock (a database restart) whose
// row stayed fires no insert trigger: its rejoin beat wakes the peers, whose
// liveness rule counted it out meanwhile.
func TestUpsert_ARejoinWakesThePeersThoughTheRowStayed(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := membership.New(pool)
	beat := func(rejoin bool) {
		t.Helper()
		_, err := s.Upsert(ctx, membership.Member{ID: "broker-r", Role: membership.RoleBroker, Rejoin: rejoin})
		require.NoError(t, err)
	}
	require.Positive(t, countNotifies(t, pool, 500*time.Millisecond, func() { beat(false) }), "a join wakes the peers")
	require.Zero(t, countNotifies(t, pool, 500*time.Millisecond, func() { beat(false) }), "a plain beat does not")
	require.Equal(t, 1, countNotifies(t, pool, 500*time.Millisecond, func() { beat(true) }), "a rejoin does")
	require.Zero(t, countNotifies(t, pool, 500*time.Millisecond, func() { beat(false) }), "and the beat after it does not")
}

// A member whose beats lapsed past the liveness window while its lock stayed
// held (beats failing or held up, the lock session alive) was counted out by
// its peers as surely as one that lost its lock; the beat that lands after
// the lapse wakes them, and a beat inside the window does not.
func TestUpsert_ABeatAfterALapseWakesThePeers(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := membership.New(pool)
	beat := func() {
		t.Helper()
		_, err := s.Upsert(ctx, membership.Member{ID: "broker-l", Role: membership.RoleBroker, Liveness: 30 * time.Second})
		require.NoError(t, err)
	}
	lapse := func(ago string) {
		t.Helper()
		_, err := pool.Exec(ctx, `UPDATE cluster_members SET last_heartbeat = now() - $1::interval WHERE member_id = 'broker-l'`, ago)
		require.NoError(t, err)
	}
	beat()
	lapse("29 seconds")
	require.Zero(t, countNotifies(t, pool, 500*time.Millisecond, beat), "a late beat inside the window is a plain beat")
	lapse("31 seconds")
	require.Equal(t, 1, countNotifies(t, pool, 500*time.Millisecond, beat), "a beat after the window lapsed is a return")
	require.Zero(t, countNotifies(t, pool, 500*time.Millisecond, beat), "and the beat after it is plain again")
}
