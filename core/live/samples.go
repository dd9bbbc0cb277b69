package live

import (
	"context"
	"slices"
	"time"

	"github.com/converge-run/converge/core/resource"
)

// KindQueue is the estimated work queue of one kind at a sample.
type KindQueue struct {
	Kind            string
	Pending, Leased int
}

// Sample is what the Summary draws over time: the work queue by kind (an
// estimate from planner statistics, store.QueueDepth) and the phase totals,
// read together at At.
type Sample struct {
	At     time.Time
	Queue  []KindQueue // by kind, non-empty kinds only
	Phases []resource.PhaseCount
}

// sampleRing is a bounded ring of samples, oldest first.
type sampleRing struct {
	buf  []Sample
	next int
	full bool
}

func (r *sampleRing) add(s Sample) {
	if r.full {
		r.buf[r.next] = s
	} else {
		r.buf = append(r.buf, s)
	}
	r.next = (r.next + 1) % cap(r.buf)
	if len(r.buf) == cap(r.buf) {
		r.full = true
	}
}

func (r *sampleRing) list() []Sample {
	if !r.full {
		return slices.Clone(r.buf)
	}
	return append(slices.Clone(r.buf[r.next:]), r.buf[:r.next]...)
}

// Samples returns the hub's recent samples, oldest first: one every
// Options.SampleEvery for the last Options.SampleWindow (the Summary's
// history at first paint; empty before Run's first sample).
func (h *Hub) Samples() []Sample {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.samples.list()
}

// sample reads one Sample (two statements: the planner-statistics queue
// estimate, which never reads the queue, and the phase totals, which read
// the folded counts plus the pending deltas) and appends it to the ring.
func (h *Hub) sample(ctx context.Context) {
	rctx, cancel := h.bounded(ctx)
	defer cancel()
	depth, err := h.store.QueueDepth(rctx)
	if err != nil {
		h.sampleFailed(ctx, err)
		return
	}
	phases, err := h.store.PhaseCounts(rctx, "")
	if err != nil {
		h.sampleFailed(ctx, err)
		return
	}
	s := Sample{At: h.opts.Clock(), Phases: phases}
	byKind := map[string]int{}
	for key, n := range depth {
		i, ok := byKind[key[0]]
		if !ok {
			i = len(s.Queue)
			byKind[key[0]] = i
			s.Queue = append(s.Queue, KindQueue{Kind: key[0]})
		}
		if key[1] == "pending" {
			s.Queue[i].Pending = int(n)
		} else {
			s.Queue[i].Leased = int(n)
		}
	}
	s.Queue = slices.DeleteFunc(s.Queue, func(q KindQueue) bool { return q.Pending+q.Leased == 0 })
	slices.SortFunc(s.Queue, func(a, b KindQueue) int {
		if a.Kind < b.Kind {
			return -1
		}
		if a.Kind > b.Kind {
			return 1
		}
		return 0
	})
	h.succeeded("samples")
	h.mu.Lock()
	h.samples.add(s)
	h.mu.Unlock()
}

func (h *Hub) sampleFailed(ctx context.Context, err error) {
	if !h.failed(ctx, "samples", err) {
		return
	}
	h.log.Warn().Err(err).Msg("sample the queue and the phase totals; the Summary's history has a gap")
}
