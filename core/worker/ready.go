package worker

import (
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// readyWait is how long the session waits for a provider's Ready to
// answer. Ready runs aside from the session (readyCheck): one that has not
// answered within it counts as unready until it does, and the session goes
// on sending results, heartbeats and readiness meanwhile.
const readyWait = 100 * time.Millisecond

// readyCheck calls one provider's Ready on a goroutine of its own, one
// call at a time. Ready ran on the session's loop: one that blocked (a
// health check against a dependency that hangs) stopped the session
// sending anything, results and heartbeats included, until it returned.
type readyCheck struct {
	p   Provider
	log zerolog.Logger

	mu   sync.Mutex
	call chan struct{} // closed when the call under way returns; nil: none
	last bool          // the last call's answer
	hung bool          // a call outlived readyWait (logged)
}

// ready starts a call of Ready unless one is under way and waits up to
// readyWait for its answer. A call still under way after that (begun by an
// earlier look, or this one) reads as unready.
func (c *readyCheck) ready() bool {
	c.mu.Lock()
	if c.call != nil {
		c.mu.Unlock()
		return false // still not answered: well past readyWait
	}
	call := make(chan struct{})
	c.call = call
	c.mu.Unlock()
	go func() {
		defer close(call)
		ok := safeReady(c.p)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.last, c.call = ok, nil
		if c.hung {
			c.hung = false
			kv := c.p.Kind()
			c.log.Info().Str("kind", kv.Kind).Str("version", kv.Version).Bool("ready", ok).Msg("provider's Ready answered again")
		}
	}()
	timer := time.NewTimer(readyWait)
	defer timer.Stop()
	select {
	case <-call:
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.last
	case <-timer.C:
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.call != call { // it answered just now
		return c.last
	}
	if !c.hung {
		c.hung = true
		kv := c.p.Kind()
		c.log.Warn().Str("kind", kv.Kind).Str("version", kv.Version).Dur("waited", readyWait).
			Msg("provider's Ready did not return; its kind counts as unready until it does")
	}
	return false
}
