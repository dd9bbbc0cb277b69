package control

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/cluster"
	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/metrics"
	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/notify"
	"github.com/converge-run/converge/core/testsignal"
)

// DrainStore is the pipeline half the drainer drives (a *pipeline.Store).
type DrainStore interface {
	// DrainOutboxBatch applies up to limit results in shards [lo, hi] in one
	// transaction and returns how many it popped.
	DrainOutboxBatch(ctx context.Context, limit, lo, hi int) (int, error)
	// DrainRollupRechecks re-gates up to limit armed roots in [lo, hi] and
	// returns how many it pended.
	DrainRollupRechecks(ctx context.Context, limit, lo, hi int) (int, error)
	// NotifyWorkReady sends work_ready in a statement of its own.
	NotifyWorkReady(ctx context.Context) error
}

// Drainer applies work_outbox rows to resources (drain_outbox_batch) and
// closes rollup straddles (drain_rollup_rechecks). It wakes on the coalesced
// outbox_ready and rollup_recheck NOTIFYs and on every change of its shard
// range, with a 2 s failsafe poll.
//
// After a drain that applied rows commits, the drainer announces work_ready
// itself (at most one NOTIFY per WakeEvery per process, always with a
// trailing edge): the gated NOTIFY inside the drain is decided before the
// drain commits, so without this a drain that commits after the gate's
// winner could leave its pends unannounced until a dispatcher's idle poll.
type Drainer struct {
	Pipeline DrainStore
	Listener *notify.Listener // nil: the failsafe poll only
	Shards   *cluster.ShardSet
	Metrics  *metrics.Metrics // may be nil
	Log      zerolog.Logger
	// Outage is the process's shared database-outage reporter (nil: errors
	// are logged).
	Outage *engine.Outage
	Clock  engine.Clock // nil: the wall clock
	// Batch is the rows per drain statement (default 1000).
	Batch int
	// Parallel is how many partition chunks drain at once (default 2).
	Parallel int
	// Failsafe is the idle poll behind the NOTIFY (default 2s).
	Failsafe time.Duration
	// WakeEvery is the shortest gap between two work_ready NOTIFYs this
	// drainer sends (default 20ms).
	WakeEvery time.Duration

	TestSignals DrainerTestSignals
}

// DrainerTestSignals report the drainer's progress to tests.
type DrainerTestSignals struct {
	// Drained carries each lane's outcome once its statements returned
	// (committed or failed).
	Drained testsignal.Signal[DrainLane]
	// NotifiedWorkReady fires after each work_ready NOTIFY it sent.
	NotifiedWorkReady testsignal.Signal[error]
}

// Init arms every signal.
func (ts *DrainerTestSignals) Init() {
	ts.Drained.Init()
	ts.NotifiedWorkReady.Init()
}

// DrainLane is what one lane of a step did.
type DrainLane struct {
	Shards    shard.Range
	Drained   int // outbox results applied
	Rechecked int // rollup roots re-gated and pended
	Err       error
}

// Name implements engine.Duty.
func (d *Drainer) Name() string { return "drainer" }

func (d *Drainer) defaults() {
	if d.Batch <= 0 {
		d.Batch = 1000
	}
	if d.Parallel <= 0 {
		d.Parallel = 2
	}
	if d.Failsafe <= 0 {
		d.Failsafe = 2 * time.Second
	}
	if d.WakeEvery <= 0 {
		d.WakeEvery = 20 * time.Millisecond
	}
}

// Run drains until ctx ends.
func (d *Drainer) Run(ctx context.Context) error {
	d.defaults()
	clock := clockOr(d.Clock)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	ready := newWakeCoalescer(d.WakeEvery, clock, d.notifyWorkReady)
	wg.Add(1)
	go func() { defer wg.Done(); ready.Run(ctx) }()

	wake := make(chan struct{}, 1)
	if d.Listener != nil {
		for _, ch := range []string{"outbox_ready", "rollup_recheck"} {
			sub := d.Listener.Subscribe(ch, 1)
			defer sub.Close() //nolint:revive // two subscriptions, both held for the whole run
			wg.Add(1)
			go func() { defer wg.Done(); d.forward(ctx, ch, sub.C, wake) }()
		}
	}
	if d.Shards != nil {
		changed := d.Shards.Changed() // before the first step: no change is missed
		wg.Add(1)
		go func() { defer wg.Done(); d.forwardReTiles(ctx, changed, wake) }()
	}
	step := func(ctx context.Context) (bool, error) { return d.step(ctx, ready.Request) }
	loop := &engine.PollLoop{Name: "drainer", Step: step, Wake: wake, Min: 5 * time.Millisecond, Max: d.Failsafe,
		Clock: clock, Log: d.Log, Outage: d.Outage}
	return loop.Run(ctx)
}

// forward turns a channel's NOTIFYs into coalesced wakes of the loop.
func (d *Drainer) forward(ctx context.Context, ch string, in <-chan notify.Event, wake chan<- struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-in:
			if d.Metrics != nil {
				d.Metrics.Wakes.WithLabelValues(ch).Inc()
			}
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}
}

// forwardReTiles wakes the loop at every change of the shard range: a
// range handed back (a re-tile, or the liveness lock held again after a
// database restart, with results waiting since before the outage) is
// drained at once, not after the idle wait the loop reached while it owned
// nothing (up to Failsafe).
func (d *Drainer) forwardReTiles(ctx context.Context, changed <-chan struct{}, wake chan<- struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		changed = d.Shards.Changed()
		select {
		case wake <- struct{}{}:
		default:
		}
	}
}

// notifyWorkReady sends one work_ready NOTIFY (the coalescer's send).
func (d *Drainer) notifyWorkReady(ctx context.Context) {
	err := d.Pipeline.NotifyWorkReady(ctx)
	if err != nil && ctx.Err() == nil && !d.Outage.Failed("drainer", err) {
		d.Log.Warn().Err(err).Msg("work_ready notify failed; dispatchers fall back to their poll")
	}
	d.TestSignals.NotifiedWorkReady.Signal(err)
}

// step drains the owned range once, split into Parallel lanes drained at
// once; busy when any lane came back full (more may be waiting). Each lane
// drains one partition per transaction (DrainOutboxBatch), skipping the
// partitions with no results in one probe. A lane that applied anything asks
// announce for a work_ready NOTIFY once its statements have committed.
func (d *Drainer) step(ctx context.Context, announce func()) (bool, error) {
	rng := d.Shards.Span()
	if rng.Empty() {
		return false, nil
	}
	lanes := Lanes(rng.Lo, rng.Last(), d.Parallel)
	var (
		mu    sync.Mutex
		busy  bool
		first error
		wg    sync.WaitGroup
	)
	for _, c := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := d.drainLane(ctx, shard.Between(c[0], c[1]))
			if l.Drained > 0 || l.Rechecked > 0 {
				announce()
			}
			d.TestSignals.Drained.Signal(l)
			mu.Lock()
			defer mu.Unlock()
			if l.Err != nil && first == nil {
				first = l.Err
			}
			if l.Drained >= d.Batch || l.Rechecked >= d.Batch {
				busy = true
			}
		}()
	}
	wg.Wait()
	return busy, first
}

// drainLane applies one lane's results, then its rollup rechecks.
func (d *Drainer) drainLane(ctx context.Context, rng shard.Range) DrainLane {
	l := DrainLane{Shards: rng}
	started := time.Now()
	l.Drained, l.Err = d.Pipeline.DrainOutboxBatch(ctx, d.Batch, rng.Lo, rng.Last())
	if l.Err != nil {
		l.Drained = 0 // the transaction rolled back: nothing was applied
		return l
	}
	if l.Drained > 0 && d.Metrics != nil {
		d.Metrics.DrainBatches.Inc()
		d.Metrics.DrainRows.Add(float64(l.Drained))
		d.Metrics.DrainLatency.Observe(time.Since(started).Seconds())
	}
	l.Rechecked, l.Err = d.Pipeline.DrainRollupRechecks(ctx, d.Batch, rng.Lo, rng.Last())
	if l.Err != nil {
		l.Rechecked = 0
	}
	return l
}

// Lanes splits [lo, hi] into at most n contiguous ranges cut at partition
// boundaries (16 shards), as even as the partitions allow.
func Lanes(lo, hi, n int) [][2]int {
	if lo > hi {
		return nil
	}
	const w = shard.PartitionWidth
	first, last := lo/w, hi/w
	parts := last - first + 1
	n = max(1, min(n, parts))
	out := make([][2]int, 0, n)
	p := first
	for i := range n {
		k := parts / n
		if i < parts%n {
			k++
		}
		out = append(out, [2]int{max(lo, p*w), min(hi, (p+k)*w-1)})
		p += k
	}
	return out
}
