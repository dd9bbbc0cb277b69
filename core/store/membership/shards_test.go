package membership_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/membership"
	"github.com/converge-run/converge/db/pgtest"
)

func TestAssignShards_LiveMembersTileTheShardSpaceDisjointly(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := membership.New(pool)
	for n := 1; n <= 7; n++ {
		t.Run(fmt.Sprintf("%dLive", n), func(t *testing.T) {
			_, err := pool.Exec(ctx, `DELETE FROM cluster_members`)
			require.NoError(t, err)
			var live []string
			for i := range n {
				id := fmt.Sprintf("broker-%02d", i)
				live = append(live, id)
				_, err := s.Upsert(ctx, membership.Member{ID: id, Role: membership.RoleBroker})
				require.NoError(t, err)
			}
			// Two crashed members (rows linger, heartbeats lapsed) sort among the live ones.
			for _, id := range []string{"broker-00a", "broker-99"} {
				_, err := s.Upsert(ctx, membership.Member{ID: id, Role: membership.RoleBroker})
				require.NoError(t, err)
				_, err = pool.Exec(ctx, `UPDATE cluster_members SET last_heartbeat = now() - interval '31 seconds' WHERE member_id = $1`, id)
				require.NoError(t, err)
				span, err := s.AssignShards(ctx, id, membership.DefaultTotalShards, membership.DefaultLiveness)
				require.NoError(t, err)
				require.True(t, span.Empty(), "a stale member owns nothing")
			}

			owner := make([]string, membership.DefaultTotalShards)
			next := 0
			for _, id := range live {
				span, err := s.AssignShards(ctx, id, membership.DefaultTotalShards, membership.DefaultLiveness)
				require.NoError(t, err)
				require.False(t, span.Empty(), "%s owns shards", id)
				require.Equal(t, next, span.Lo, "%s's range starts where the previous one ended: contiguous, no gap", id)
				for sh := span.Lo; sh < span.Hi; sh++ {
					require.Empty(t, owner[sh], "shard %d owned twice", sh)
					owner[sh] = id
				}
				size := span.Hi - span.Lo
				require.InDelta(t, 256.0/float64(n), float64(size), 1, "balanced")
				next = span.Hi
			}
			require.Equal(t, membership.DefaultTotalShards, next, "the live members cover [0,256)")
		})
	}
}

func TestAssignShards_RolesTileIndependently(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := membership.New(pool)
	for _, m := range []membership.Member{
		{ID: "a", Role: membership.RoleControl}, {ID: "b", Role: membership.RoleBroker},
		{ID: "c", Role: membership.RoleBroker}, {ID: "d", Role: membership.RoleControl},
		{ID: "e", Role: membership.RoleBroker},
	} {
		_, err := s.Upsert(ctx, m)
		require.NoError(t, err)
	}
	want := map[string]shard.Range{
		"a": {Lo: 0, Hi: 128}, "d": {Lo: 128, Hi: 256}, // control: 2 members
		"b": {Lo: 0, Hi: 85}, "c": {Lo: 85, Hi: 170}, "e": {Lo: 170, Hi: 256}, // broker: 3 members
	}
	for id, w := range want {
		got, err := s.AssignShards(ctx, id, membership.DefaultTotalShards, membership.DefaultLiveness)
		require.NoError(t, err)
		require.Equal(t, w, got, id)
	}
	got, err := s.AssignShards(ctx, "nobody", membership.DefaultTotalShards, membership.DefaultLiveness)
	require.NoError(t, err)
	require.True(t, got.Empty(), "an unknown member owns nothing")
}

func TestAssignShards_MoreMembersThanShardsLeavesSomeEmpty(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := membership.New(pool)
	for i := range 5 {
		_, err := s.Upsert(ctx, membership.Member{ID: fmt.Sprintf("m%d", i), Role: membership.RoleAll})
		require.NoError(t, err)
	}
	covered, empty := 0, 0
	for i := range 5 {
		span, err := s.AssignShards(ctx, fmt.Sprintf("m%d", i), 3, time.Minute)
		require.NoError(t, err)
		if span.Empty() {
			empty++
		}
		covered += span.Hi - span.Lo
	}
	require.Equal(t, 3, covered)
	require.Equal(t, 2, empty)
}
