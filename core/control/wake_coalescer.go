package control

import (
	"context"
	"time"

	"github.com/converge-run/converge/core/engine"
)

// wakeCoalescer turns bursts of requests into calls of send at most one per
// gap, with a guaranteed trailing edge: every Request is followed by a send
// that starts after it. Request never blocks; a request made while a send
// runs or during the gap after it is folded into the next send.
type wakeCoalescer struct {
	send    func(ctx context.Context)
	gap     time.Duration
	clock   engine.Clock
	pending chan struct{}
}

func newWakeCoalescer(gap time.Duration, clock engine.Clock, send func(ctx context.Context)) *wakeCoalescer {
	return &wakeCoalescer{send: send, gap: gap, clock: clock, pending: make(chan struct{}, 1)}
}

// Request asks for a send after now.
func (c *wakeCoalescer) Request() {
	select {
	case c.pending <- struct{}{}:
	default: // a send is already owed: it starts after this request
	}
}

// Run sends until ctx ends. A request still pending then is dropped (the
// process is stopping; the dispatchers' failsafe poll covers it).
func (c *wakeCoalescer) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.pending:
		}
		c.send(ctx)
		select {
		case <-ctx.Done():
			return
		case <-c.clock.After(c.gap):
		}
	}
}
