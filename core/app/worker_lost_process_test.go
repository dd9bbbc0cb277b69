package app_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app"
	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/worker"
)

// A SIGKILLed worker's in-flight stages are re-dispatched at once to the
// other ready worker serving the kind: nothing waits out the redelivery
// window (5 minutes here), and the disappearance is recorded as no task's
// failure.
func TestProcess_AKilledWorkersStagesMoveToAnotherWorkerAtOnce(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{Config: func(c *config.Config) { c.ShutdownDrain = 10 * time.Second },
		Tune: func(p *app.Process, d *app.Duties) {
			fastLeases(p, d)
			if p.Broker != nil {
				p.Broker.RedeliveryWait = 5 * time.Minute
			}
		}})
	p := s.Process
	applyManifest(t, p.Store, leafKind)
	marker := filepath.Join(t.TempDir(), "got-task")
	doomed := spawn(t, "CONVERGE_HELPER=worker", "HELPER_BROKER_URL="+apptest.BrokerURL(p), "HELPER_MARKER="+marker,
		"HELPER_WORKER_TOKEN="+apptest.WorkerToken)
	const n = 20
	for i := range n {
		applyResource(t, p.Store, "leaf", "lost-"+strconv.Itoa(i), `{}`)
	}
	apptest.WaitFor(t, 90*time.Second, "the doomed worker holds the tasks", func() bool {
		_, err := os.Stat(marker)
		return err == nil && p.Broker.InFlight() == n
	})

	var calls leafCalls
	apptest.StartWorker(t, apptest.BrokerURL(p), worker.Options{}, calls.provider())
	doomed.kill(t)
	killed := time.Now()
	var ids []resource.Resource
	for i := range n {
		ids = append(ids, apptest.WaitPhase(t, p.Store, "leaf", "lost-"+strconv.Itoa(i), resource.PhaseReady, 60*time.Second))
	}
	took := time.Since(killed)
	t.Logf("worker SIGKILL → %d stages re-dispatched and Ready: %s", n, took)
	require.Less(t, took, 5*time.Second, "re-dispatched at once, not after the redelivery window")
	for _, r := range ids {
		page, err := p.Store.ListEvents(context.Background(), r.ID, 100, "")
		require.NoError(t, err)
		for _, ev := range page.Items {
			require.NotEqual(t, "ReconcileFailed", ev.Reason, "%s: a worker's disappearance is no task failure: %s", r.Name, ev.Message)
		}
	}
	require.Len(t, calls.byName(), n)
}
