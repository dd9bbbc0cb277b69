package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app"
	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/config"
)

// A control pod deletes the events past EVENT_RETENTION and keeps the
// rest: an event written two hours ago goes under a one-hour retention, the
// apply's own event stays.
func TestProcess_EventsPastTheirRetentionAreDeleted(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{
		Config: func(c *config.Config) { c.EventRetention = time.Hour },
		Tune: func(p *app.Process, d *app.Duties) {
			fastLeases(p, d)
			d.Events.Every = 100 * time.Millisecond
		},
	})
	ctx := context.Background()
	applyManifest(t, s.Store, leafKind)
	r := applyResource(t, s.Store, "leaf", "logged", `{}`)
	db := s.Process.Primary
	count := func(sql string) int {
		var n int
		require.NoError(t, db.QueryRow(ctx, sql, r.ID).Scan(&n))
		return n
	}
	young := count(`SELECT count(*)::int FROM resource_events WHERE resource_id = $1`)
	require.Positive(t, young, "the apply wrote an event")
	_, err := db.Exec(ctx, `INSERT INTO resource_events (resource_id, type, reason, created_at)
SELECT $1, 'Normal', 'Old', now() - interval '2 hours' FROM generate_series(1, 3)`, r.ID)
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		var old int
		err := db.QueryRow(ctx, `SELECT count(*)::int FROM resource_events WHERE resource_id = $1 AND reason = 'Old'`, r.ID).Scan(&old)
		return err == nil && old == 0
	}, 30*time.Second, 50*time.Millisecond, "the expired events are deleted")
	require.Equal(t, young, count(`SELECT count(*)::int FROM resource_events WHERE resource_id = $1 AND reason <> 'Old'`),
		"the events inside the retention stay")
}
