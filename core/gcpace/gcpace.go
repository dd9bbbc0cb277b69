// Package gcpace paces the Go collector by a minimum heap headroom: after
// each cycle the heap may grow by at least Headroom before the next, or by
// what was live, whichever is more.
//
// GOGC=100 lets the heap grow by what was live at the last cycle. Converge's
// live heap is small and flat in the fleet's size (about 9 MB in a 100k run),
// while it allocates tens of MB a second on the hot path (the claims' and
// results' batches, compositions, protobuf messages): the collector ran six
// times a second over a 9 MB heap, and its marking and the allocation it
// slowed were 15% of converge's CPU. Each cycle costs about what is live,
// so growing by a fixed headroom instead cuts the cycles, and that cost,
// by the headroom's ratio to the live heap — for some tens of MB of memory
// that is the same whatever the fleet's size, well inside the process's
// budget. A heap whose live part outgrows the headroom is paced as GOGC=100
// paces it. A soft memory limit (GOMEMLIMIT, or core/memlimit's from the
// cgroup) still caps the heap: near it the collector runs early.
//
// An operator's GOGC wins: with GOGC set (not empty), Start leaves the
// runtime alone.
package gcpace

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"

	"github.com/rs/zerolog"
)

// Headroom is how far the heap may grow past what was live before the next
// cycle, at the least.
const Headroom = 32 << 20

// maxPercent bounds the GOGC-equivalent set for a nearly empty heap (a
// process starting up): 20 × a 1.6 MB live heap is the headroom.
const maxPercent = 2000

// Percent is the GOGC-equivalent that lets a heap of live bytes grow by
// max(live, headroom): 100 once live reaches headroom, up to maxPercent.
func Percent(live, headroom uint64) int {
	if live == 0 {
		return maxPercent
	}
	if live >= headroom {
		return 100
	}
	return int(min(math.Ceil(100*float64(headroom)/float64(live)), maxPercent))
}

// Pacer resets the collector's percent after every cycle.
type Pacer struct {
	headroom uint64
	percent  atomic.Int64 // the percent set last
	cycles   atomic.Int64 // cycles paced, for tests
	sample   []metrics.Sample
}

// Start paces the collector by headroom unless GOGC is set (then it returns
// nil and the runtime keeps the operator's setting). It sets the percent
// for the heap live now, then again after each cycle: a finalizer on an
// object that only the cycle can free runs when the cycle ends and arms the
// next. An idle process collects nothing, and so does nothing.
func Start(headroom uint64) *Pacer {
	if v, set := os.LookupEnv("GOGC"); set && v != "" { // empty is unset to the runtime too
		return nil
	}
	p := &Pacer{headroom: headroom, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	p.pace()
	p.arm()
	return p
}

// Cycles is how many cycles the pacer has seen end.
func (p *Pacer) Cycles() int64 { return p.cycles.Load() }

// sentinel is what a cycle frees: it holds a pointer, so it is never one of
// the tiny allocations the runtime packs together (whose finalizers wait
// for their neighbours).
type sentinel struct{ p *Pacer }

func (p *Pacer) arm() {
	runtime.SetFinalizer(&sentinel{p: p}, func(s *sentinel) {
		s.p.cycles.Add(1)
		s.p.pace()
		s.p.arm()
	})
}

// pace sets the percent for the heap live at the last cycle, when it
// changed by more than a tenth (a cycle's live heap wobbles).
func (p *Pacer) pace() {
	metrics.Read(p.sample)
	live := uint64(0)
	if p.sample[0].Value.Kind() == metrics.KindUint64 {
		live = p.sample[0].Value.Uint64()
	}
	want := int64(Percent(live, p.headroom))
	if cur := p.percent.Load(); cur != 0 && math.Abs(float64(want-cur)) <= float64(cur)/10 {
		return
	}
	p.percent.Store(want)
	debug.SetGCPercent(int(want))
}

// StartAndLog is Start at Headroom, for the process's life, logged once:
// the pacing, or that GOGC rules.
func StartAndLog(log zerolog.Logger) {
	if Start(Headroom) == nil {
		log.Info().Str("GOGC", os.Getenv("GOGC")).Msg("garbage collector paced by GOGC")
		return
	}
	log.Info().Int("min_headroom_bytes", Headroom).Msg("garbage collector paced for a minimum heap headroom (set GOGC to pace it yourself)")
}
