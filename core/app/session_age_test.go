package app_test

import (
	"bytes"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app"
	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/worker"
)

// lineCounter counts the log lines that contain a phrase.
type lineCounter struct {
	phrase []byte
	mu     sync.Mutex
	n      int
}

func (c *lineCounter) Write(p []byte) (int, error) {
	if bytes.Contains(p, c.phrase) {
		c.mu.Lock()
		c.n++
		c.mu.Unlock()
	}
	return len(p), nil
}

func (c *lineCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// countingProxy forwards TCP connections to target and counts them: the
// connections a worker opens to its broker.
func countingProxy(t *testing.T, target string) (string, *atomic.Int32) {
	t.Helper()
	b := &balancer{}
	b.add(target)
	return b.serve(t), &b.conns
}

// With a short maximum session age, the broker ends the worker's session
// again and again while resources keep coming: the Go SDK takes each end
// as planned (logged at INFO, not as a lost stream) and reconnects on a new
// connection (through a Service, it may reach another broker), and every
// resource is reconciled, exactly once.
func TestSessionMaxAge_AWorkerReconnectsAndNothingIsLostOrRunTwice(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{Config: func(c *config.Config) { c.ShutdownDrain = 10 * time.Second },
		Tune: func(p *app.Process, d *app.Duties) {
			fastLeases(p, d)
			if p.Broker != nil {
				p.Broker.SessionMaxAge = 300 * time.Millisecond
			}
		}})
	p := s.Process
	applyManifest(t, p.Store, leafKind)
	planned := &lineCounter{phrase: []byte("broker ended the session")}
	lost := &lineCounter{phrase: []byte("broker stream lost")}
	broker, err := url.Parse(apptest.BrokerURL(p))
	require.NoError(t, err)
	via, conns := countingProxy(t, broker.Host)
	var calls leafCalls
	apptest.StartWorker(t, "http://"+via, worker.Options{Logger: zerolog.New(zerolog.MultiLevelWriter(planned, lost))},
		calls.provider())

	const n = 30
	for i := range n { // spread over several session ages
		applyResource(t, p.Store, "leaf", "aged-"+strconv.Itoa(i), `{}`)
		time.Sleep(50 * time.Millisecond) //nolint:forbidigo // pacing the load over time, not waiting for a result
	}
	for i := range n {
		apptest.WaitPhase(t, p.Store, "leaf", "aged-"+strconv.Itoa(i), resource.PhaseReady, 60*time.Second)
	}
	apptest.WaitFor(t, 30*time.Second, "the session to end on its age at least twice", func() bool { return planned.count() >= 2 })
	require.Zero(t, lost.count(), "a planned end is not logged as a lost stream")
	// The first connection, and one more for each planned end but perhaps
	// the last (its reconnect may still be on its way).
	ends := planned.count()
	require.GreaterOrEqual(t, int(conns.Load()), ends,
		"each session after a planned end runs on a new connection, not the HTTP/2 connection to the same broker")
	calls.requireEachOnce(t, n)
}
