package live_test

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/live"
	"github.com/converge-run/converge/core/store/membership"
	"github.com/converge-run/converge/core/store/notify"
	"github.com/converge-run/converge/db/pgtest"
)

// A member's READY is judged by the database clock, as its heartbeat is
// stamped and as tiling and routing judge it: an API pod whose own clock
// runs a minute off shows a member that just beat as READY, and one whose
// beat lapsed as NOT_READY, whichever way its clock is off.
func TestListMembers_ReadinessIsJudgedByTheDatabaseClock(t *testing.T) {
	t.Parallel()
	db := pgtest.Pool(t)
	ctx := context.Background()
	reg := membership.New(db)
	_, err := reg.Upsert(ctx, membership.Member{ID: "beating", Role: membership.RoleBroker})
	require.NoError(t, err)
	_, err = reg.Upsert(ctx, membership.Member{ID: "lapsed", Role: membership.RoleBroker})
	require.NoError(t, err)
	_, err = db.Exec(ctx, `UPDATE cluster_members SET last_heartbeat = now() - interval '40 seconds' WHERE member_id = 'lapsed'`)
	require.NoError(t, err)
	for name, skew := range map[string]time.Duration{"ahead": time.Minute, "behind": -time.Minute} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := live.NewHub(notify.NewListener(db, zerolog.Nop()), db, zerolog.Nop(), live.WithOptions(live.Options{
				Liveness: 30 * time.Second, Clock: func() time.Time { return time.Now().Add(skew) }}))
			ms, err := h.ListMembers(ctx)
			require.NoError(t, err)
			ready := map[string]bool{}
			for _, m := range ms {
				ready[m.ID] = m.Ready
			}
			require.Equal(t, map[string]bool{"beating": true, "lapsed": false}, ready)
		})
	}
}
