package app_test

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/db/pgtest"
)

// A broker stopped with SIGTERM stops claiming at once, and its peers take
// its shards at once too, not after its drain: with a task holding the
// drain open, the peer owns every shard within one heartbeat (10 s here) of
// the signal — in practice within a second — and runs new work in the
// leaving broker's range, where the leaving member's row used to count as
// live until its last beat aged past the 30 s liveness window (20-40 s
// after the signal), or until it deregistered at the end of its drain.
func TestProcess_ASIGTERMedBrokersShardsReTileToItsPeersAtOnce(t *testing.T) {
	t.Parallel()
	const within = 10 * time.Second // one heartbeat
	db := pgtest.URL(t)
	pool := pgtest.PoolFor(t, db)
	st := store.New(pool, nil)
	applyManifest(t, st, leafKind)

	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	holding := apptest.NewProvider("leaf", func(ctx context.Context, r worker.Request) (worker.Outcome, error) {
		if r.Stage == worker.StageWork {
			select {
			case <-release:
			case <-ctx.Done():
				return worker.Outcome{}, ctx.Err()
			}
		}
		return leafWork(ctx, r)
	})
	env := []string{"MEMBER_HEARTBEAT_EVERY=10s", "SHUTDOWN_DRAIN=2m", "HELPER_STALE_AFTER=5m"}
	pa, pb := freePort(t), freePort(t)
	leaving := spawnServer(t, db, config.RoleAll, pa, pa, env...)
	apptest.StartWorker(t, fmt.Sprintf("http://127.0.0.1:%d", pa), worker.Options{}, holding)
	applyResource(t, st, "leaf", "held", `{}`)
	apptest.WaitFor(t, 90*time.Second, "the leaving broker's worker holds a task", func() bool {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT count(*) FROM work_queue WHERE worker_id IS NOT NULL`).Scan(&n))
		return n == 1
	})

	spawnServer(t, db, config.RoleAll, pb, pb, env...)
	var calls leafCalls
	apptest.StartWorker(t, fmt.Sprintf("http://127.0.0.1:%d", pb), worker.Options{}, calls.provider())
	apptest.WaitFor(t, 30*time.Second, "the two brokers split the shards", func() bool {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT count(*) FROM cluster_members WHERE shard_hi - shard_lo = 128`).Scan(&n))
		return n == 2
	})

	require.NoError(t, leaving.cmd.Process.Signal(syscall.SIGTERM))
	signalled := time.Now()
	apptest.WaitFor(t, within, "the staying member owns every shard", func() bool {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT count(*) FROM cluster_members WHERE shard_lo = 0 AND shard_hi = 256`).Scan(&n))
		return n == 1
	})
	const fresh = 8 // some fall in the leaving broker's former range
	for i := range fresh {
		applyResource(t, st, "leaf", "after-"+strconv.Itoa(i), `{}`)
	}
	for i := range fresh {
		apptest.WaitPhase(t, st, "leaf", "after-"+strconv.Itoa(i), resource.PhaseReady, within)
	}
	t.Logf("new work ran on the peer %s after the SIGTERM", time.Since(signalled))
	select {
	case <-leaving.done:
		t.Fatal("the leaving broker exited: its drain no longer held it, so the test proves nothing")
	default:
	}
	calls.requireEachOnce(t, fresh)
}
