package broker

import (
	"sync"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store/pipeline"
)

// pairKey is one (kind, version, task type) the dispatcher claims.
type pairKey struct {
	kv manifest.KindVersion
	tt pipeline.TaskType
}

// inflight is the broker's table of claimed tasks: the dispatcher adds a
// claim's tasks and forgets each when it finishes, the heartbeater keeps
// their leases alive, the drain waits for it to empty, and membership
// reports its size.
type inflight struct {
	mu sync.Mutex
	// running maps each claimed task in flight to its lease: what the drain
	// needs to release it (the task itself is its goroutine's), and how
	// many runs of it are in flight. A run that gives its lease back
	// releases it before it ends, so a sweep in between can claim the task
	// again: the key stays until its last run ends.
	running map[pipeline.TaskKey]runningLease
	perPair map[pairKey]int
	// perPairRollups counts, of perPair, the rollups: their own room when
	// the pair's is full (rollupBounds).
	perPairRollups map[pairKey]int
	// relayed counts, per pair, the stages peers relayed to this broker's
	// workers (RelayStage) that are still running: they take the same
	// worker slots as this broker's own tasks, so they count against its
	// per-pair cap (pair), though they are no claim of its own.
	relayed map[pairKey]int
	// adopted are leases of tasks workers resumed here from another
	// broker's session, by the session that reported them (adopt.go):
	// heartbeated with the claims, but no claim of this broker's.
	adopted map[pipeline.TaskKey]*session
	// done receives (coalesced) whenever a task or a reactor delivery
	// finishes: a slot freed, worth a claim.
	done chan struct{}
}

// runningLease is a task's lease in flight and its runs.
type runningLease struct {
	lease pipeline.Lease
	runs  int
}

func newInflight() *inflight {
	return &inflight{running: map[pipeline.TaskKey]runningLease{}, perPair: map[pairKey]int{}, perPairRollups: map[pairKey]int{},
		relayed: map[pairKey]int{}, adopted: map[pipeline.TaskKey]*session{}, done: make(chan struct{}, 1)}
}

// add records a claim's tasks.
func (f *inflight) add(lease pipeline.Lease, p pairKey, tasks []pipeline.Task) {
	f.mu.Lock()
	for _, t := range tasks {
		r := f.running[t.Key]
		r.lease, r.runs = lease, r.runs+1
		f.running[t.Key] = r
		if t.IsRollup() {
			f.perPairRollups[p]++
		}
	}
	f.perPair[p] += len(tasks)
	f.mu.Unlock()
}

// finish forgets a task (rollup: whether it is one) and frees its pair
// slot.
func (f *inflight) finish(p pairKey, key pipeline.TaskKey, rollup bool) {
	f.mu.Lock()
	if r := f.running[key]; r.runs > 1 {
		r.runs--
		f.running[key] = r
	} else {
		delete(f.running, key)
	}
	f.perPair[p]--
	if rollup {
		f.perPairRollups[p]--
	}
	f.mu.Unlock()
	f.signal()
}

// signal reports a freed slot.
func (f *inflight) signal() {
	select {
	case f.done <- struct{}{}:
	default:
	}
}

// count is the number of tasks in flight.
func (f *inflight) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.running)
}

// pair is the number of p's tasks in flight, peers' relayed stages of p
// included.
func (f *inflight) pair(p pairKey) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.perPair[p] + f.relayed[p]
}

// pairRollups is the number of p's claimed rollups in flight.
func (f *inflight) pairRollups(p pairKey) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.perPairRollups[p]
}

// relay counts a peer's relayed stage of p against the pair until the
// returned done is called; done frees the slot like a finished task.
func (f *inflight) relay(p pairKey) (done func()) {
	f.mu.Lock()
	f.relayed[p]++
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		if f.relayed[p]--; f.relayed[p] <= 0 {
			delete(f.relayed, p)
		}
		f.mu.Unlock()
		f.signal()
	}
}

// relaying is the number of stages peers relayed here still running.
func (f *inflight) relaying() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.relayed {
		n += c
	}
	return n
}

// byLease groups the tasks in flight by their lease, for a release each.
func (f *inflight) byLease() map[pipeline.Lease][]pipeline.TaskKey {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[pipeline.Lease][]pipeline.TaskKey{}
	for k, r := range f.running {
		out[r.lease] = append(out[r.lease], k)
	}
	return out
}

// keys lists the keys of the leases to heartbeat: the tasks in flight and
// the adopted ones.
func (f *inflight) keys() []pipeline.TaskKey {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]pipeline.TaskKey, 0, len(f.running)+len(f.adopted))
	for k := range f.running {
		out = append(out, k)
	}
	for k := range f.adopted {
		if _, dup := f.running[k]; !dup {
			out = append(out, k)
		}
	}
	return out
}
