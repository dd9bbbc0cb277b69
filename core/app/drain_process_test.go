package app_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
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

// A broker process stopped (SIGTERM) after its only worker has gone gives
// its claimed tasks back when its drain begins, instead of holding them for
// the whole SHUTDOWN_DRAIN budget waiting for a worker that is not coming:
// it exits in a fraction of the budget, and a successor re-claims and runs
// the tasks at once, not after the reaper's stale-lease window.
//
// The worker takes two tasks at a time and dies running two: their stages,
// waiting for the worker to reconnect and redeliver, are given back, and so
// is any task the broker claimed ahead for the worker's slots (a sweep can
// claim again before the worker has taken the first batch).
func TestProcess_ADrainingBrokerGivesBackTasksNoWorkerWillTake(t *testing.T) {
	t.Parallel()
	const (
		n      = 6
		budget = 60 * time.Second
	)
	db := pgtest.URL(t)
	port := freePort(t)
	// Leases outlive the test (the reaper cannot be what frees them), and
	// the drain budget is far longer than the test waits for the exit (so is
	// the 30 s redelivery window the vanished worker's stages wait in).
	env := []string{"HELPER_STALE_AFTER=5m", "SHUTDOWN_DRAIN=" + budget.String()}
	first := spawnServer(t, db, config.RoleAll, port, port, env...)
	st := store.New(pgtest.PoolFor(t, db), nil)
	applyManifest(t, st, leafKind)

	marker := filepath.Join(t.TempDir(), "got-task")
	doomed := spawn(t, "CONVERGE_HELPER=worker", fmt.Sprintf("HELPER_BROKER_URL=http://127.0.0.1:%d", port),
		"HELPER_MARKER="+marker, "HELPER_WORKER_TOKEN="+apptest.WorkerToken, "HELPER_MAX_PARALLEL=2")
	ids := make([]resource.Resource, n)
	for i := range n {
		ids[i] = applyResource(t, st, "leaf", "given-back-"+strconv.Itoa(i), `{}`)
	}
	gates := func() map[store.WaitGate]int {
		got := map[store.WaitGate]int{}
		for _, r := range ids {
			waits, err := st.Explain(context.Background(), r.ID, 0)
			require.NoError(t, err)
			if len(waits) > 0 {
				got[waits[0].Gate]++
			}
		}
		return got
	}
	apptest.WaitFor(t, 90*time.Second, "the worker runs two tasks", func() bool {
		_, err := os.Stat(marker)
		return err == nil && gates()[store.GateClaimed] >= 2
	})

	doomed.kill(t)
	stopped := time.Now()
	first.term(t)
	took := time.Since(stopped)
	t.Logf("worker SIGKILLed, broker SIGTERMed: the broker exited in %s of its %s drain budget", took, budget)
	require.Less(t, took, budget/2, "the broker held its claimed tasks for its drain budget")
	require.Equal(t, map[store.WaitGate]int{store.GateNoWorker: n}, gates(),
		"every task was given back (none left claimed by the broker that exited)")

	// A successor broker and a working worker: the given-back tasks are
	// claimed again and run, each once.
	spawnServer(t, db, config.RoleAll, port, port, env...)
	var calls leafCalls
	apptest.StartWorker(t, fmt.Sprintf("http://127.0.0.1:%d", port), worker.Options{}, calls.provider())
	for _, r := range ids {
		apptest.WaitPhase(t, st, "leaf", r.Name, resource.PhaseReady, 90*time.Second)
	}
	calls.requireEachOnce(t, n)
}

// A broker draining on SIGTERM keeps its liveness lock checked until it
// deregisters. Peers take a lock session idle for 3 s for a dead member's
// (reap_unlocked_cluster_members) and free its leases; had the checks
// stopped with the engine, a task still running in the drain would be
// claimed and run again by a peer 3 s into it. Here the task runs on for
// twice that rule, the draining member stays registered and its task is
// run once, by its own worker, whose result lands.
func TestProcess_ADrainingBrokerKeepsItsLeasesUntilItsTasksFinish(t *testing.T) {
	t.Parallel()
	const idleRule = 3 * time.Second // reap_unlocked_cluster_members
	db := pgtest.URL(t)
	pool := pgtest.PoolFor(t, db)
	st := store.New(pool, nil)
	applyManifest(t, st, leafKind)

	type run struct{ worker, broker string }
	var (
		mu   sync.Mutex
		runs []run
	)
	runsSoFar := func() []run {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(runs)
	}
	provider := func(name string, hold <-chan struct{}) worker.Provider {
		return apptest.NewProvider("leaf", func(ctx context.Context, r worker.Request) (worker.Outcome, error) {
			if r.Stage == worker.StageWork {
				c, _ := worker.ClaimFrom(ctx)
				mu.Lock()
				runs = append(runs, run{name, c.Broker})
				mu.Unlock()
				select {
				case <-hold:
				case <-ctx.Done():
					return worker.Outcome{}, ctx.Err()
				}
			}
			return leafWork(ctx, r)
		})
	}

	// Leases outlive the test: the reaper's stale-lease pass cannot be what
	// frees them, nor can the drain budget run out.
	env := []string{"HELPER_STALE_AFTER=5m", "SHUTDOWN_DRAIN=2m"}
	pa, pb := freePort(t), freePort(t)
	draining := spawnServer(t, db, config.RoleAll, pa, pa, env...)
	var memberA string
	apptest.WaitFor(t, 30*time.Second, "A registered", func() bool {
		return pool.QueryRow(context.Background(), `SELECT member_id FROM cluster_members`).Scan(&memberA) == nil
	})
	release := make(chan struct{})
	apptest.StartWorker(t, fmt.Sprintf("http://127.0.0.1:%d", pa), worker.Options{}, provider("worker-on-A", release))
	applyResource(t, st, "leaf", "long", `{}`)
	apptest.WaitFor(t, 90*time.Second, "A's worker runs the task", func() bool { return len(runsSoFar()) == 1 })

	spawnServer(t, db, config.RoleAll, pb, pb, env...)
	apptest.StartWorker(t, fmt.Sprintf("http://127.0.0.1:%d", pb), worker.Options{}, provider("worker-on-B", nil))

	require.NoError(t, draining.cmd.Process.Signal(syscall.SIGTERM))
	until := time.Now().Add(2 * idleRule)
	for time.Now().Before(until) {
		var registered, tombstoned bool
		require.NoError(t, pool.QueryRow(context.Background(), `
SELECT EXISTS (SELECT 1 FROM cluster_members WHERE member_id = $1),
       EXISTS (SELECT 1 FROM cluster_member_tombstones WHERE member_id = $1)`, memberA).Scan(&registered, &tombstoned))
		require.True(t, registered && !tombstoned, "the draining member was taken for dead (registered %v, tombstoned %v)",
			registered, tombstoned)
		require.Len(t, runsSoFar(), 1, "the task was run again while its first run was in the drain")
		select {
		case <-draining.done:
			t.Fatal("the broker exited before its task finished")
		case <-time.After(100 * time.Millisecond):
		}
	}

	close(release)
	select {
	case <-draining.done:
	case <-time.After(60 * time.Second):
		t.Fatal("the broker did not exit once its task finished")
	}
	apptest.WaitPhase(t, st, "leaf", "long", resource.PhaseReady, 30*time.Second)
	require.Equal(t, []run{{"worker-on-A", memberA}}, runsSoFar(), "run once, by the draining broker's worker")
}
