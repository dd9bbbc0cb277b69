package app_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/membership"
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

	staying := spawnServer(t, db, config.RoleAll, pb, pb, env...)
	// Whatever fails from here on, the log shows the cluster as it stood
	// then (the processes are still up: this cleanup runs before theirs).
	var signalled time.Time
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("at the failure, %s after the SIGTERM (zero: not sent), the leaving process %s, the staying one %s; the cluster: %s",
				sinceOrZero(signalled), exited(leaving), exited(staying), clusterView(pool))
		}
	})
	var calls leafCalls
	apptest.StartWorker(t, fmt.Sprintf("http://127.0.0.1:%d", pb), worker.Options{}, calls.provider())
	apptest.WaitForShowing(t, 30*time.Second, "the two brokers split the shards", func() bool {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT count(*) FROM cluster_members WHERE shard_hi - shard_lo = 128`).Scan(&n))
		return n == 2
	}, showCluster(pool))

	require.NoError(t, leaving.cmd.Process.Signal(syscall.SIGTERM))
	signalled = time.Now()
	apptest.WaitForShowing(t, within, "the staying member owns every shard", func() bool {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT count(*) FROM cluster_members WHERE shard_lo = 0 AND shard_hi = 256`).Scan(&n))
		return n == 1
	}, showCluster(pool))
	t.Logf("the staying member owned every shard %s after the SIGTERM", time.Since(signalled))
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

// showCluster describes the cluster for a failed wait.
func showCluster(pool *pgxpool.Pool) func() string {
	return func() string { return "the cluster: " + clusterView(pool) }
}

// clusterView is every cluster_members row: its range, leave or drain mark,
// the age of its last beat and whether its liveness lock is held.
func clusterView(pool *pgxpool.Pool) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var rows []string
	err := pool.QueryRow(ctx, `
SELECT coalesce(array_agg(format('%s [%s,%s) control=%s beat %ss ago lock %s', m.member_id,
         coalesce(m.shard_lo::text, '-'), coalesce(m.shard_hi::text, '-'), coalesce(m.control, '-'),
         round(extract(epoch FROM clock_timestamp() - m.last_heartbeat)::numeric, 2),
         CASE WHEN m.lock_key IS NULL THEN 'none'
              WHEN EXISTS (SELECT 1 FROM pg_locks l
                            WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
                              AND l.classid = $1::oid AND l.objid = m.lock_key::oid
                              AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))
              THEN 'held' ELSE 'gone' END) ORDER BY m.member_id), '{}')
  FROM cluster_members m`, membership.LockClass).Scan(&rows)
	if err != nil {
		return fmt.Sprintf("(unreadable: %v)", err)
	}
	if len(rows) == 0 {
		return "no members"
	}
	return strings.Join(rows, "; ")
}

func sinceOrZero(at time.Time) time.Duration {
	if at.IsZero() {
		return 0
	}
	return time.Since(at)
}

// exited says whether a helper process has exited.
func exited(c *child) string {
	select {
	case <-c.done:
		return "had exited"
	default:
		return "was running"
	}
}
