package app_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app"
	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
)

// A poison pill whose worker process dies on it every time (os.Exit mid-stage)
// is bounded by the kind's max_transient_attempts like a transient failure:
// each lost worker counts as an attempt, and at the bound the resource is
// FAILED with a DeadLettered condition saying the worker was lost, instead of
// being re-dispatched forever. The supervisor loop below restarts the worker
// like systemd or a Deployment would; a healthy resource on the same worker
// still converges.
func TestProcess_AWorkerThatCrashesOnAResourceIsDeadLettered(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{Tune: func(p *app.Process, d *app.Duties) {
		fastLeases(p, d)
		if p.Broker != nil {
			p.Broker.RedeliveryWait = 30 * time.Second // a worker reconnecting ends the wait, not this
		}
	}})
	p := s.Process
	ctx := context.Background()
	applyManifest(t, p.Store, leafKind)
	const limit = 3
	n := limit
	_, err := p.Store.UpdateKindConfig(ctx, "leaf", "v1", store.KindConfigPatch{MaxTransientAttempts: &n})
	require.NoError(t, err)

	stop := make(chan struct{})
	supervised := make(chan int, 1)
	go func() { // restart the crashing worker whenever it exits
		starts := 0
		defer func() { supervised <- starts }()
		for {
			c := spawn(t, "CONVERGE_HELPER=crasher", "HELPER_BROKER_URL="+apptest.BrokerURL(p), "HELPER_POISON=poison",
				"HELPER_WORKER_TOKEN="+apptest.WorkerToken)
			starts++
			select {
			case <-c.done:
			case <-stop:
				return
			}
		}
	}()
	poison := applyResource(t, p.Store, "leaf", "poison", `{}`)
	apptest.WaitPhase(t, p.Store, "leaf", "poison", resource.PhaseFailed, 120*time.Second)
	applyResource(t, p.Store, "leaf", "healthy", `{}`)
	apptest.WaitPhase(t, p.Store, "leaf", "healthy", resource.PhaseReady, 60*time.Second)
	close(stop)
	starts := <-supervised
	t.Logf("poison pill dead-lettered after %d worker starts", starts)
	require.Equal(t, limit+1, starts, "the worker crashed max_transient_attempts times, and the last start lives on")

	conds, err := p.Store.Conditions(ctx, poison.ID)
	require.NoError(t, err)
	var synced *resource.Condition
	for i := range conds {
		if conds[i].Type == "Synced" {
			synced = &conds[i]
		}
	}
	require.NotNil(t, synced, "a Synced condition: %+v", conds)
	require.Equal(t, "DeadLettered", synced.Reason)
	require.True(t, strings.HasPrefix(synced.Message, "dead-lettered after 3 transient failures in a row (max_transient_attempts 3): worker lost"),
		synced.Message)
	require.Contains(t, synced.Message, "3 times in a row")
	page, err := p.Store.ListEvents(ctx, poison.ID, 100, "")
	require.NoError(t, err)
	reasons := []string{}
	for _, ev := range page.Items {
		reasons = append(reasons, ev.Reason)
	}
	require.Contains(t, reasons, "DeadLettered")
}
