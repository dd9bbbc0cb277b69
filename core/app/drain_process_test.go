package app_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
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
