package main

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/examples/apply"
)

type result struct {
	took, maxGap time.Duration
	complete     bool
	stranded     int
	// doubled counts claims with more than one result applied (the
	// invariant), reapplied children with results of two claims applied (a
	// re-execution: at least once; a root's compose and rollups are always
	// several claims, so roots are left out).
	doubled, reapplied int
	// logRate is the most log lines per second one converge process wrote
	// over the wave.
	logRate float64
}

func (r result) ok() bool {
	return r.complete && r.stranded == 0 && r.maxGap <= 5*time.Second && r.doubled == 0
}

func (r result) verdict() string {
	return fmt.Sprintf("completion=%t progress=%t stranded=%d applied-twice=%d logs=%.1f/s (children re-applied under a second claim: %d)",
		r.complete, r.maxGap <= 5*time.Second, r.stranded, r.doubled, r.logRate, r.reapplied)
}

// ready is the number of Ready resources, roots and children (the phase
// counts: the folded totals plus the pending deltas).
func (s *suite) ready(ctx context.Context) (int, error) {
	counts, err := s.store.PhaseCounts(ctx, "")
	if err != nil {
		return 0, err
	}
	for _, c := range counts {
		if c.Phase == resource.PhaseReady {
			return int(c.Count), nil
		}
	}
	return 0, nil
}

// notReady are the phases a settled wave leaves nothing in.
var notReady = slices.DeleteFunc(slices.Clone(resource.AllPhases), func(p resource.Phase) bool {
	return p == resource.PhaseReady
})

// wave applies n roots, injects the fault once a third of the wave's
// resources (roots and the children they compose) have settled, and waits
// for all of them.
func (s *suite) wave(ctx context.Context, w, n int, sc scenario) (result, error) {
	start := time.Now()
	s.mark(fmt.Sprintf("wave %d (%s) started", w, sc.key))
	logsBefore := s.logLines()
	size, err := applyRoots(ctx, apply.StoreApplier{Store: s.store, Actor: "chaos"}, w, n)
	if err != nil {
		return result{}, err
	}
	s.applied += size
	s.roots += n
	res, f := s.await(ctx, start, size, sc)
	if f != nil {
		<-f.done // the fault's own step (a drain) ends before the next wave
		if f.err != nil {
			return res, fmt.Errorf("inject: %w", f.err)
		}
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	page, err := s.store.ListResources(ctx, store.ListOptions{Phases: notReady, Limit: 500})
	if err != nil {
		return res, err
	}
	res.stranded = len(page.Items)
	for name, after := range s.logLines() {
		res.logRate = max(res.logRate, float64(after-logsBefore[name])/res.took.Seconds())
	}
	if res.doubled, res.reapplied, err = s.store.AppliedTwice(ctx); err != nil {
		return res, err
	}
	res.reapplied = max(res.reapplied-s.roots, 0)
	return res, nil
}

// fault is an injection running in its own goroutine.
type fault struct {
	done chan struct{} // closed when inject returned
	err  error
	at   atomic.Int64 // UnixNano when inject returned
}

func startFault(inject func() error, returned func()) *fault {
	f := &fault{done: make(chan struct{})}
	go func() {
		f.err = inject()
		f.at.Store(time.Now().UnixNano())
		returned()
		close(f.done)
	}()
	return f
}

// await polls the Ready count until the wave's n resources are Ready (or 3
// minutes pass), starting the fault at a third, and measures the longest
// window without progress. It returns the fault (nil if it never started).
func (s *suite) await(ctx context.Context, start time.Time, n int, sc scenario) (result, *fault) {
	target := s.applied
	var res result
	var injected *fault
	pr := newProgress(time.Now())
	dumped := false
	deadline := start.Add(3 * time.Minute)
	var quietUntil time.Time // the fault's own outage: no progress expected
	third := false
	for time.Now().Before(deadline) {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		got, err := s.ready(rctx)
		cancel()
		if err != nil { // the suite's own reads fail while Postgres restarts or is frozen
			got = max(pr.last, 0)
		}
		if injected != nil && sc.outageIsInject {
			quietUntil = time.Now() // down until inject returns…
			if at := injected.at.Load(); at != 0 {
				quietUntil = time.Unix(0, at) // …and from then on, progress is due
			}
		}
		if gap := pr.observe(time.Now(), got, quietUntil); gap > 3*time.Second && !dumped {
			dumped = true
			// Bounded: on a frozen database the dump's reads wait too.
			dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			s.dumpQueue(dctx)
			cancel()
		}
		res.maxGap = pr.maxGap
		if !third && got-(target-n) >= n/3 {
			third = true // marked in every wave: a fault-free wave's rest is the yardstick of a faulted one's
			s.mark("a third settled")
		}
		if injected == nil && sc.inject != nil && got-(target-n) >= n/3 {
			s.mark("fault " + sc.key + " injected")
			injected = startFault(sc.inject, func() { s.mark("fault " + sc.key + " returned") })
			quietUntil = time.Now().Add(sc.outage)
		}
		if got >= target {
			res.took, res.complete = time.Since(start), true
			s.mark("wave converged")
			return res, injected
		}
		select {
		case <-ctx.Done():
			return res, injected
		case <-time.After(100 * time.Millisecond):
		}
	}
	res.took = time.Since(start)
	return res, injected
}

// dumpQueue prints what the queue holds while a wave stalls: its rows by
// claimer, with their lease and heartbeat ages (a lease nobody heartbeats is
// one its broker lost track of).
func (s *suite) dumpQueue(ctx context.Context) {
	holders, err := s.store.QueueHolders(ctx)
	if err != nil {
		fmt.Println("  stall: queue dump:", err)
		return
	}
	fmt.Printf("  stall at %s:\n", time.Now().UTC().Format("15:04:05.000"))
	if counts, err := s.store.PhaseCounts(ctx, ""); err == nil {
		fmt.Printf("    resources by phase: %v (of %d applied)\n", counts, s.applied)
	}
	for _, h := range holders {
		holder := h.WorkerID
		if holder == "" {
			holder = "(unleased)"
		}
		fmt.Printf("    %s: %d rows, oldest lease %.1fs, newest heartbeat %.1fs ago, %d with a result in the outbox, "+
			"%d retried after a failure, %d backing off (longest %.1fs more)\n",
			holder, h.Rows, h.OldestLease.Seconds(), h.NewestBeat.Seconds(), h.WithResult, h.Retried, h.BackingOff,
			h.LongestBackoff.Seconds())
	}
}

// progress measures the longest window without progress: a change of the
// Ready count, polled.
type progress struct {
	last   int // the count the last poll read (-1 before the first)
	lastAt time.Time
	maxGap time.Duration
}

func newProgress(now time.Time) *progress { return &progress{last: -1, lastAt: now} }

// observe records a poll at now that read got, no progress being due
// before quietUntil (the fault's own outage), and returns the window
// without progress so far (0 inside the outage, and once the count moved).
// The window is measured before the count's move is taken in: a poll that
// sees progress closes the window it ends, however long ago the poll
// before it was.
func (p *progress) observe(now time.Time, got int, quietUntil time.Time) time.Duration {
	var gap time.Duration
	if !now.Before(quietUntil) {
		gap = now.Sub(maxTime(p.lastAt, quietUntil))
		p.maxGap = max(p.maxGap, gap)
	}
	if got != p.last {
		p.last, p.lastAt = got, now
		return 0
	}
	return gap
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
