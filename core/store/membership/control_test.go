package membership_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/membership"
	"github.com/converge-run/converge/db/pgtest"
)

func TestRequestControl_DrainLeavesTheTilingAndKillWins(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := membership.New(pool)
	for _, id := range []string{"b-1", "b-2"} {
		_, err := s.Upsert(ctx, membership.Member{ID: id, Role: membership.RoleBroker})
		require.NoError(t, err)
	}
	span, err := s.AssignShards(ctx, "b-1", 256, time.Minute)
	require.NoError(t, err)
	require.Equal(t, 128, span.Hi, "two live brokers split the shards")

	_, err = s.RequestControl(ctx, "nope", membership.ActionDrain, "admin:ops")
	require.ErrorIs(t, err, store.ErrNotFound)
	require.Contains(t, err.Error(), `"nope"`)
	_, err = s.RequestControl(ctx, "b-2", membership.Action("reboot"), "admin:ops")
	require.ErrorIs(t, err, membership.ErrUnknownAction)
	r, err := s.PendingRequest(ctx, "b-2")
	require.NoError(t, err)
	require.False(t, r.Pending(), "a refused request writes nothing")

	var m membership.Member
	n := countNotifies(t, pool, 500*time.Millisecond, func() {
		m, err = s.RequestControl(ctx, "b-2", membership.ActionDrain, "admin:ops")
		require.NoError(t, err)
	})
	require.Positive(t, n, "a request wakes every member")
	require.Equal(t, membership.ActionDrain, m.Request.Action)
	require.Equal(t, "admin:ops", m.Request.By)
	require.NotNil(t, m.Request.At)
	require.Nil(t, m.Shards, "a draining member's span is cleared")

	live, err := s.ListLive(ctx, time.Minute)
	require.NoError(t, err)
	require.Len(t, live, 1, "a draining member is not live")
	require.Equal(t, "b-1", live[0].ID)
	span, err = s.AssignShards(ctx, "b-1", 256, time.Minute)
	require.NoError(t, err)
	require.Equal(t, [2]int{0, 256}, [2]int{span.Lo, span.Hi}, "the other broker takes every shard")
	span, err = s.AssignShards(ctx, "b-2", 256, time.Minute)
	require.NoError(t, err)
	require.True(t, span.Empty(), "the draining broker owns nothing")

	_, err = s.Upsert(ctx, membership.Member{ID: "b-2", Role: membership.RoleBroker})
	require.NoError(t, err)
	r, err = s.PendingRequest(ctx, "b-2")
	require.NoError(t, err)
	require.Equal(t, membership.ActionDrain, r.Action, "a heartbeat keeps the request")

	m, err = s.RequestControl(ctx, "b-2", membership.ActionKill, "admin:oncall")
	require.NoError(t, err)
	require.Equal(t, membership.ActionKill, m.Request.Action, "a kill overrides a drain")
	m, err = s.RequestControl(ctx, "b-2", membership.ActionDrain, "admin:late")
	require.NoError(t, err)
	require.Equal(t, membership.ActionKill, m.Request.Action, "a drain never downgrades a kill")
	require.Equal(t, "admin:oncall", m.Request.By)

	all, err := s.List(ctx)
	require.NoError(t, err)
	require.Len(t, all, 2)
	require.Equal(t, membership.ActionKill, all[1].Request.Action, "List carries the request")
	r, err = s.PendingRequest(ctx, "gone")
	require.NoError(t, err)
	require.False(t, r.Pending())
}

// A member whose liveness lock session drops for a moment (a proxy reset, a
// failover) is removed by a peer's dead-member probe and re-inserts its row
// once it holds the lock again. A drain or kill an admin recorded on the row
// before the probe removed it must come back with the row: the admin was told
// it was recorded, and the member may not have read it before the blip.
func TestRequestControl_SurvivesTheProbeRemovingTheRowDuringALockBlip(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		reason string
		action membership.Action
	}{
		"drain": {reason: "a drain the member never read is still asked of it", action: membership.ActionDrain},
		"kill":  {reason: "a kill the member never read is still asked of it", action: membership.ActionKill},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			s := membership.New(pool)
			const key = 41
			m := membership.Member{ID: "b-blip", Role: membership.RoleBroker, LockKey: key}
			lock, err := membership.AcquireSessionLock(ctx, pool, m.ID, key)
			require.NoError(t, err)
			_, err = s.Upsert(ctx, m)
			require.NoError(t, err)
			asked, err := s.RequestControl(ctx, m.ID, tc.action, "admin:ops")
			require.NoError(t, err)

			lock.Close() // the blip: the lock's backend goes, and with it the lock
			require.Eventually(t, func() bool {
				ids, err := s.ReapUnlocked(ctx, 0)
				require.NoError(t, err)
				return len(ids) == 1
			}, 10*time.Second, 10*time.Millisecond, "a peer's probe removes the row")
			r, err := s.PendingRequest(ctx, m.ID)
			require.NoError(t, err)
			require.False(t, r.Pending(), "the row is gone meanwhile")

			require.Eventually(t, func() bool {
				again, err := membership.AcquireSessionLock(ctx, pool, m.ID, key)
				if err != nil {
					require.ErrorIs(t, err, membership.ErrLockHeld)
					return false
				}
				t.Cleanup(again.Close)
				return true
			}, 10*time.Second, 20*time.Millisecond, "the member takes its lock again")
			m.Rejoin = true
			_, err = s.Upsert(ctx, m) // the rejoin beat re-inserts the row
			require.NoError(t, err)

			r, err = s.PendingRequest(ctx, m.ID)
			require.NoError(t, err)
			require.Equal(t, tc.action, r.Action, tc.reason)
			require.Equal(t, "admin:ops", r.By)
			require.NotNil(t, r.At)
			require.True(t, r.At.Equal(*asked.Request.At), "the request keeps its time")
			live, err := s.ListLive(ctx, time.Minute)
			require.NoError(t, err)
			require.Empty(t, live, "a member with a request is not live after its return either")
		})
	}
}

// A member silent past the GC's TTL (its beats failed for minutes while its
// process lived on) is removed by the member GC and re-inserts its row on its
// next successful beat. A drain or kill an admin recorded on the row before
// the GC must come back with the row, as it does after the dead-member
// probe's removal; a row without a request leaves no tombstone (the probe
// frees the leases of a tombstoned id, which the GC leaves to the stale-lease
// reaper).
func TestRequestControl_SurvivesTheGCRemovingASilentMembersRow(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		reason string
		action membership.Action
	}{
		"drain": {reason: "a drain the member never read is still asked of it", action: membership.ActionDrain},
		"kill":  {reason: "a kill the member never read is still asked of it", action: membership.ActionKill},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			s := membership.New(pool)
			m := membership.Member{ID: "b-silent", Role: membership.RoleBroker}
			for _, id := range []string{m.ID, "b-quiet"} {
				_, err := s.Upsert(ctx, membership.Member{ID: id, Role: membership.RoleBroker})
				require.NoError(t, err)
			}
			asked, err := s.RequestControl(ctx, m.ID, tc.action, "admin:ops")
			require.NoError(t, err)
			_, err = pool.Exec(ctx, `UPDATE cluster_members SET last_heartbeat = now() - interval '6 minutes'`)
			require.NoError(t, err)

			n, err := s.GCStale(ctx, membership.DefaultGCTTL)
			require.NoError(t, err)
			require.Equal(t, 2, n, "both silent rows go")
			r, err := s.PendingRequest(ctx, m.ID)
			require.NoError(t, err)
			require.False(t, r.Pending(), "the row is gone meanwhile")
			var tombstones []string
			rows, err := pool.Query(ctx, `SELECT member_id FROM cluster_member_tombstones ORDER BY member_id`)
			require.NoError(t, err)
			for rows.Next() {
				var id string
				require.NoError(t, rows.Scan(&id))
				tombstones = append(tombstones, id)
			}
			require.NoError(t, rows.Err())
			require.Equal(t, []string{m.ID}, tombstones, "only the row with a request is tombstoned")

			_, err = s.Upsert(ctx, m) // the member's next beat re-inserts the row
			require.NoError(t, err)
			r, err = s.PendingRequest(ctx, m.ID)
			require.NoError(t, err)
			require.Equal(t, tc.action, r.Action, tc.reason)
			require.Equal(t, "admin:ops", r.By)
			require.NotNil(t, r.At)
			require.True(t, r.At.Equal(*asked.Request.At), "the request keeps its time")
			r, err = s.PendingRequest(ctx, "b-quiet")
			require.NoError(t, err)
			require.False(t, r.Pending())
		})
	}
}

// The function set is applied before the migrations, so the GC runs over the
// schema before 00020 (tombstones without the request columns) until the
// migration lands: it still removes the silent rows.
func TestGCStale_WorksOverTheSchemaBeforeTombstonesKeptRequests(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := membership.New(pool)
	_, err := pool.Exec(ctx, `
ALTER TABLE cluster_member_tombstones DROP COLUMN control, DROP COLUMN control_by, DROP COLUMN control_at;
INSERT INTO cluster_members (member_id, role, control, last_heartbeat)
VALUES ('gone', 'broker', 'drain', now() - interval '6 minutes')`)
	require.NoError(t, err)
	n, err := s.GCStale(ctx, membership.DefaultGCTTL)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// A member shutting down marks itself leaving: it drops out of the tiling
// with a wake, but an admin's request already on the row keeps its actor,
// and a row that is gone is not an error.
func TestLeave_MarksTheMemberDrainingUnlessARequestIsThere(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := membership.New(pool)
	for _, id := range []string{"b-1", "b-2", "b-3"} {
		_, err := s.Upsert(ctx, membership.Member{ID: id, Role: membership.RoleBroker})
		require.NoError(t, err)
	}
	var marked bool
	var err error
	n := countNotifies(t, pool, 500*time.Millisecond, func() {
		marked, err = s.Leave(ctx, "b-3")
		require.NoError(t, err)
	})
	require.True(t, marked)
	require.Positive(t, n, "leaving wakes every member")
	r, err := s.PendingRequest(ctx, "b-3")
	require.NoError(t, err)
	require.Equal(t, membership.Request{Action: membership.ActionDrain, By: membership.ActorSelf, At: r.At}, r)
	span, err := s.AssignShards(ctx, "b-1", 256, time.Minute)
	require.NoError(t, err)
	require.Equal(t, 128, span.Len(), "the two staying brokers split the shards")

	_, err = s.RequestControl(ctx, "b-2", membership.ActionKill, "admin:oncall")
	require.NoError(t, err)
	marked, err = s.Leave(ctx, "b-2")
	require.NoError(t, err)
	require.False(t, marked)
	r, err = s.PendingRequest(ctx, "b-2")
	require.NoError(t, err)
	require.Equal(t, membership.ActionKill, r.Action, "an admin's request is kept")
	require.Equal(t, "admin:oncall", r.By)

	marked, err = s.Leave(ctx, "gone")
	require.NoError(t, err)
	require.False(t, marked)
}
