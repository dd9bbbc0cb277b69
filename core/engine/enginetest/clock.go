// Package enginetest holds test doubles for the engine's seams: a fake
// engine.Clock that a test advances by hand, so a service's ticks happen
// when the test says and never by wall time.
package enginetest

import (
	"sync"
	"time"
)

// Clock is a manual engine.Clock. After registers a waiter that fires when
// Advance moves the clock past its deadline; WaitForWaiters lets a test
// know that a service is parked on its next tick before advancing.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
	changed chan struct{}
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

// NewClock returns a clock that reads start.
func NewClock(start time.Time) *Clock {
	return &Clock{now: start, changed: make(chan struct{})}
}

// Now implements engine.Clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After implements engine.Clock: the channel fires once the clock has been
// advanced by d (at once for d <= 0).
func (c *Clock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, waiter{at: c.now.Add(d), ch: ch})
	c.broadcast()
	return ch
}

// Advance moves the clock by d and fires every waiter whose deadline passed.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(c.now) {
			kept = append(kept, w)
			continue
		}
		w.ch <- c.now
	}
	c.waiters = kept
	c.broadcast()
}

// Waiters is the number of pending After channels.
func (c *Clock) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// WaitForWaiters blocks until at least n After channels are pending or
// timeout passes (wall time), and reports whether they are.
func (c *Clock) WaitForWaiters(n int, timeout time.Duration) bool {
	deadline := time.After(timeout)
	for {
		c.mu.Lock()
		have, changed := len(c.waiters), c.changed
		c.mu.Unlock()
		if have >= n {
			return true
		}
		select {
		case <-changed:
		case <-deadline:
			return false
		}
	}
}

// broadcast wakes WaitForWaiters; c.mu is held.
func (c *Clock) broadcast() {
	close(c.changed)
	c.changed = make(chan struct{})
}
