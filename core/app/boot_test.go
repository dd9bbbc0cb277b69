package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app"
	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/db/migrate"
	"github.com/converge-run/converge/db/pgtest"
)

// TestBoot_WaitsOutAnotherPodsMigrationPastTheConnectBudget: a pod that
// boots while another pod migrates waits for the migration lock as long as
// the runner allows (migrate.LockWait), not only as long as boot allows for
// connecting (app.ConnectTimeout); the migration itself is bounded by
// nothing but shutdown. Boot used to run the lock wait and the migrations
// under its 2-minute connect budget: a waiting pod failed after 2 minutes,
// and a migration running longer (a large index built CONCURRENTLY) was
// cancelled on every pod that tried it.
func TestBoot_WaitsOutAnotherPodsMigrationPastTheConnectBudget(t *testing.T) {
	t.Parallel()
	require.Less(t, app.ConnectTimeout+30*time.Second, migrate.LockWait, "the test holds the lock past the connect budget, within the lock wait")
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	holder, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer holder.Close(ctx)
	_, err = holder.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrate.LockID)
	require.NoError(t, err, "another pod's migrate run holds the lock")

	cfg := config.Defaults()
	cfg.DatabaseURL, cfg.ListenAddr, cfg.HealthAddr = url, "127.0.0.1:0", "127.0.0.1:0"
	require.NoError(t, cfg.Validate())
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	started := make(chan *app.Process, 1)
	done := make(chan error, 1)
	go func() {
		done <- app.Run(runCtx, cfg, apptest.Logger(t), app.Options{OnStart: func(p *app.Process) { started <- p }})
	}()
	select {
	case err := <-done:
		t.Fatalf("boot gave up while another pod's migration held the lock: %v", err)
	case <-started:
		t.Fatal("the process started without the migration lock")
	case <-time.After(app.ConnectTimeout + 20*time.Second):
	}

	_, err = holder.Exec(ctx, `SELECT pg_advisory_unlock($1)`, migrate.LockID)
	require.NoError(t, err)
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("boot failed once the lock was released: %v", err)
	case <-time.After(apptest.BootWithin):
		t.Fatalf("not ready within %s of the lock's release", apptest.BootWithin)
	}
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(apptest.StopWithin):
		t.Fatalf("did not stop within %s", apptest.StopWithin)
	}
}
