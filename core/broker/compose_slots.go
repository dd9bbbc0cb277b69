package broker

import (
	"context"
	"runtime"
	"slices"
	"sync"

	"github.com/converge-run/converge/core/store/pipeline"
)

// DefaultComposeSlots is how many composes one broker runs at once.
//
// A compose is the heaviest task there is: its worker returns the whole
// composition (a bom: 1,000 children with their specs and edges) and the
// broker writes it in one transaction — a thousand inserts, their index
// entries, labels and edges, tens of milliseconds of database time. The
// kind's cap (max_inflight) bounds a composite's tasks cluster-wide, but a
// composite usually has no cap, so 100 roots applied at once became 100
// compositions held in memory and 100 transactions queued in Postgres
// while the leaves they had already created waited behind them (the first
// leaf of a 100k run started 9 s in; 1,000 roots held a 1M run for minutes).
// Two slots keep a compose writing while the next one's worker computes,
// and leave the rest of the machine to the leaves.
const DefaultComposeSlots = 2

// DefaultRollupSlots is how many tasks of rollup kinds one broker runs at
// once, composes aside (they hold compose slots), when RollupSlots is not
// set: two per core the process may use (GOMAXPROCS), at least 4 and at
// most 16. A rollup reads the composite's whole subtree and sends it to the
// worker as one request — for a bom, 1,000 child summaries — and holds that
// until the stage returns. It is CPU work (the database's read, the
// message, the worker's fold), so slots beyond a couple per core only hold
// more subtrees in memory at once. A 1M run's roots become ready in bursts
// of dozens a second. Unbounded, an earlier design's rollups (about 300
// within a few seconds) took converge's RSS from 56 to 153 MB; sixteen slots
// on two cores took the peak to 69–70 MB, four to 63–65 MB, at the same rate
// and tail (docs/benchmarks-history.md, "The 1M fall-off, found" and
// "Rollup slots: two per core").
func DefaultRollupSlots() int { return rollupSlotsFor(runtime.GOMAXPROCS(0)) }

// rollupSlotsFor is DefaultRollupSlots for procs cores.
func rollupSlotsFor(procs int) int { return min(max(2*procs, 4), 16) }

// rollupBounds gives a rollup kind's rollups room of their own: when its
// pair has no room worth a claim, the broker still claims the pair's
// rollups, up to twice the rollup slots less those in flight. A composite's
// composes are all pended when its roots are applied, and claimed as the
// pair's room allows they fill it and wait in the broker for its two
// compose slots; the pair claimed again only once a quarter of its limit was
// free, in its own room and in the worker's free slots (which the leaf
// kinds take as fast as they free). A root whose leaves had all finished
// while composes ran waited up to two minutes for its rollup to be claimed,
// with the claim taking rollups first.
type rollupBounds struct {
	kinds       kindSource
	rollupSlots int
}

// bound is p's rollup room; ok is false for a pair whose kind has no
// rollup, or that is not a reconcile.
func (r rollupBounds) bound(p pairKey) (int, bool) {
	if p.tt != pipeline.TaskReconcile || r.rollupSlots <= 0 {
		return 0, false
	}
	kind, ok := r.kinds.Kind(p.kv)
	if !ok {
		return 0, false
	}
	if _, rolls := kind.Manifest.Rollup(); !rolls {
		return 0, false
	}
	return 2 * r.rollupSlots, true
}

// pairCaps is the in-flight ceiling of each pair on one broker. A leaf
// kind's pair (no composer, no rollup) holds leafPairFactor times base: its
// tasks make up the claims, the stream's batches and the drain's, and at
// base those were no bigger than what was in flight (at 100k one or two leaf
// kinds have work at a time; twice the depth cut a leaf's CPU by a seventh
// in each process). A composite kind's pair holds base: its composes wait
// for the compose slots once claimed, and more of them claimed only wait
// longer. The deeper leaf pairs rely on the drain-lag bound
// (dispatcher.drainBehind): without it the extra depth only lengthened the
// outbox backlog that a 1M run's rollups waited behind.
type pairCaps struct {
	base  int
	kinds kindSource // nil: every pair holds base
}

// leafPairFactor is how many times base a leaf kind's pair may hold.
const leafPairFactor = 2

// of is p's ceiling.
func (c pairCaps) of(p pairKey) int {
	if c.kinds == nil {
		return c.base
	}
	kind, ok := c.kinds.Kind(p.kv)
	if !ok {
		return c.base
	}
	if _, composes := kind.Manifest.Composer(); composes {
		return c.base
	}
	if _, rolls := kind.Manifest.Rollup(); rolls {
		return c.base
	}
	return leafPairFactor * c.base
}

// taskSlots bounds the tasks of one sort in flight on one broker (the
// composes, the rollups): a task takes a slot before its deadline starts and
// gives it back when it ends. Other tasks never wait on it. A task that finds
// no slot free waits in a queue as data, holding no goroutine: a 1M run's
// composite pair keeps about a hundred composes claimed and waiting for two
// compose slots while composes run, and a goroutine each held their grown
// stacks (7 MB of stacks in that phase, against 3 MB after it).
type taskSlots struct {
	n     int
	mu    sync.Mutex
	free  int
	queue []*queuedTask
}

// queuedTask is a task waiting for a slot. stop unregisters its context's
// give-up; false means the give-up has run or is running.
type queuedTask struct {
	start func(release func(), queued bool)
	stop  func() bool
}

// newTaskSlots makes n slots (def when n <= 0).
func newTaskSlots(n, def int) *taskSlots {
	if n <= 0 {
		n = def
	}
	return &taskSlots{n: n, free: n}
}

// take hands start a slot and the function that gives it back: at once,
// on the caller's goroutine (queued false), when one is free; else, when a
// task gives one back, on that task's goroutine (queued true; start must
// then hand its task to a goroutine of its own and return). When ctx ends
// first, start gets a nil release: the task gives up without a slot. A nil
// *taskSlots bounds nothing.
func (s *taskSlots) take(ctx context.Context, start func(release func(), queued bool)) {
	if s == nil {
		start(func() {}, false)
		return
	}
	if ctx.Err() != nil {
		start(nil, false)
		return
	}
	s.mu.Lock()
	if s.free > 0 {
		s.free--
		s.mu.Unlock()
		start(s.release, false)
		return
	}
	w := &queuedTask{start: start}
	s.queue = append(s.queue, w)
	// Registered under the lock, so release never sees a waiter without
	// its stop; the give-up runs on a goroutine of its own and takes the
	// lock after this returns.
	w.stop = context.AfterFunc(ctx, func() {
		s.mu.Lock()
		if i := slices.Index(s.queue, w); i >= 0 {
			s.queue = slices.Delete(s.queue, i, i+1)
		}
		s.mu.Unlock()
		w.start(nil, true)
	})
	s.mu.Unlock()
}

// release gives a slot back: to the longest-waiting task, else to the pool.
func (s *taskSlots) release() {
	s.mu.Lock()
	for len(s.queue) > 0 {
		w := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		if !w.stop() {
			continue // its context ended: the give-up hands it a nil release
		}
		s.mu.Unlock()
		w.start(s.release, true)
		return
	}
	s.free++
	s.mu.Unlock()
}

// inUse is how many slots are taken.
func (s *taskSlots) inUse() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n - s.free
}
