package broker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// lockCheckedGauge is the workers gauge, counting the sets made while the
// registry's lock was free: such a set carries a count read earlier, and a
// connect or disconnect in between makes it stale.
type lockCheckedGauge struct {
	prometheus.Gauge
	reg      *registry
	unlocked atomic.Int64
}

func (g *lockCheckedGauge) Set(v float64) {
	if g.reg.mu.TryLock() {
		g.reg.mu.Unlock()
		g.unlocked.Add(1)
	}
	g.Gauge.Set(v)
}

// TestWorkersGauge_IsSetUnderTheRegistryLock: converge_workers_connected
// is set with the registry's count while the registry's lock is held, so
// the last set follows the last connect or disconnect. Set after the lock
// was released, a session's count could land after a later session's
// (A reads 1 as it leaves, B leaves and sets 0, A sets 1), and the gauge
// stayed wrong until the next connect. Sessions connect and disconnect
// concurrently through the real handler; every set must be made under the
// lock, and the gauge ends at 0.
func TestWorkersGauge_IsSetUnderTheRegistryLock(t *testing.T) {
	t.Parallel()
	b := setupHandler(t)
	g := &lockCheckedGauge{Gauge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "workers"}), reg: b.svc.reg}
	b.svc.metrics.Workers = g
	c := b.clients()["Connect"]
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 5 {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				stream := c.WorkStream(ctx)
				err := stream.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Subscribe{
					Subscribe: &workerv1.Subscribe{WorkerId: fmt.Sprintf("w%d-%d", i, j), Kinds: readiness("vpc")}}})
				if err == nil {
					_, err = stream.Receive()
				}
				_ = stream.CloseRequest()
				_ = stream.CloseResponse()
				cancel()
				if err != nil {
					t.Errorf("session w%d-%d: %v", i, j, err)
				}
			}
		})
	}
	wg.Wait()
	require.Eventually(t, func() bool { return b.svc.reg.count() == 0 }, 10*time.Second, time.Millisecond)
	require.Zero(t, g.unlocked.Load(), "sets of the workers gauge made outside the registry's lock")
	require.Zero(t, testutil.ToFloat64(g.Gauge), "the gauge after every session ended")
}
