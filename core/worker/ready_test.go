package worker_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/worker"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// hangingReady is a provider whose Ready blocks, once hang is set, until
// the test releases it.
type hangingReady struct {
	*fakeProvider
	hang    atomic.Bool
	entered chan struct{} // hears of each Ready call that blocks
	release chan struct{}
	once    sync.Once
}

func (p *hangingReady) Ready() bool {
	if p.hang.Load() {
		select {
		case p.entered <- struct{}{}:
		default:
		}
		<-p.release
	}
	return p.fakeProvider.Ready()
}

func readinessOf(ready bool) func(*workerv1.WorkStreamRequest) bool {
	return func(m *workerv1.WorkStreamRequest) bool {
		ks := m.GetReadiness().GetKinds()
		return len(ks) == 1 && ks[0].GetReady() == ready
	}
}

// TestServe_ABlockingReadyDoesNotStallTheSession: a provider's Ready that
// blocks (a health check against a dependency that hangs) is run aside from
// the session: results, heartbeats and readiness reports go on, and the
// kind counts as unready until Ready answers again. It ran on the session's
// loop, which waited for it: a finished task's result was never sent.
func TestServe_ABlockingReadyDoesNotStallTheSession(t *testing.T) {
	t.Parallel()
	b := newScriptBroker(t)
	b.acks = true
	p := &hangingReady{
		fakeProvider: newProvider("vpc", func(context.Context, worker.Request) (worker.Outcome, error) {
			return worker.Outcome{Status: json.RawMessage(`{"ok":true}`)}, nil
		}),
		entered: make(chan struct{}, 1), release: make(chan struct{}),
	}
	t.Cleanup(func() { p.once.Do(func() { close(p.release) }) })
	startWorker(t, b, worker.Options{}, p)
	sub := b.next(t, "subscribe", isSubscribe).GetSubscribe()
	require.True(t, sub.GetKinds()[0].GetReady())

	p.hang.Store(true)
	<-p.entered
	b.next(t, "the kind reported unready while its Ready does not answer", readinessOf(false))
	b.send(task("t1", "vpc", 1, 0))
	b.next(t, "the result, while Ready blocks", carries("t1"))
	b.ack("t1")

	p.hang.Store(false)
	p.once.Do(func() { close(p.release) })
	b.next(t, "the kind ready again once Ready answers", readinessOf(true))
}
