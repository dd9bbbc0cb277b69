package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
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
	pool, err := pgxpool.New(ctx, s.DatabaseURL)
	require.NoError(t, err)
	defer pool.Close()
	count := func(sql string) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, sql, r.ID).Scan(&n))
		return n
	}
	young := count(`SELECT count(*)::int FROM resource_events WHERE resource_id = $1`)
	require.Positive(t, young, "the apply wrote an event")
	_, err = pool.Exec(ctx, `INSERT INTO resource_events (resource_id, type, reason, created_at)
SELECT $1, 'Normal', 'Old', now() - interval '2 hours' FROM generate_series(1, 3)`, r.ID)
	require.NoError(t, err)

	deadline := time.Now().Add(30 * time.Second)
	for count(`SELECT count(*)::int FROM resource_events WHERE resource_id = $1 AND reason = 'Old'`) > 0 {
		require.True(t, time.Now().Before(deadline), "the expired events are still there after 30s")
		time.Sleep(50 * time.Millisecond)
	}
	require.Equal(t, young, count(`SELECT count(*)::int FROM resource_events WHERE resource_id = $1 AND reason <> 'Old'`),
		"the events inside the retention stay")
}
