// Package control is the control bundle of a pod: the drainer that applies
// worker results from the outbox, the reaper's backstop passes, the drift
// resyncer, the cluster-member GC and the phase-count folder. Each sweeper
// works only on this pod's shard range (read lock-free from the ShardSet on
// every tick) and is idempotent, so control pods need no leader.
package control

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/cluster"
	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/metrics"
	"github.com/converge-run/converge/core/store/notify"
	"github.com/converge-run/converge/core/store/pipeline"
)

// Drainer applies work_outbox rows to resources (drain_outbox_batch) and
// closes rollup straddles (drain_rollup_rechecks). It wakes on the coalesced
// outbox_ready and rollup_recheck NOTIFYs, with a 2 s failsafe poll.
type Drainer struct {
	Pipeline *pipeline.Store
	Listener *notify.Listener
	Shards   *cluster.ShardSet
	Metrics  *metrics.Metrics
	Log      zerolog.Logger
	// Batch is the rows per drain statement (default 1000).
	Batch int
	// Parallel is how many partition chunks drain at once (default 2).
	Parallel int
	// Failsafe is the idle poll behind the NOTIFY (default 2s).
	Failsafe time.Duration
}

// Name implements engine.Duty.
func (d *Drainer) Name() string { return "drainer" }

// Run drains until ctx ends.
func (d *Drainer) Run(ctx context.Context) error {
	if d.Batch <= 0 {
		d.Batch = 1000
	}
	if d.Parallel <= 0 {
		d.Parallel = 2
	}
	if d.Failsafe <= 0 {
		d.Failsafe = 2 * time.Second
	}
	wake := make(chan struct{}, 1)
	if d.Listener != nil {
		for _, ch := range []string{"outbox_ready", "rollup_recheck"} {
			sub := d.Listener.Subscribe(ch, 1)
			defer sub.Close()
			go func(ch string) {
				for {
					select {
					case <-ctx.Done():
						return
					case <-sub.C:
						if d.Metrics != nil {
							d.Metrics.Wakes.WithLabelValues(ch).Inc()
						}
						select {
						case wake <- struct{}{}:
						default:
						}
					}
				}
			}(ch)
		}
	}
	loop := &engine.PollLoop{Name: "drainer", Step: d.step, Wake: wake, Min: 5 * time.Millisecond, Max: d.Failsafe, Log: d.Log}
	return loop.Run(ctx)
}

// step drains the owned range once, split into Parallel lanes drained at
// once; busy when any lane came back full (more may be waiting). Each lane
// drains one partition per transaction (DrainOutboxBatch), skipping the
// partitions with no results in one probe.
func (d *Drainer) step(ctx context.Context) (bool, error) {
	lo, hi, ok := d.Shards.Bounds()
	if !ok {
		return false, nil
	}
	lanes := Lanes(lo, hi, d.Parallel)
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
			started := time.Now()
			n, err := d.Pipeline.DrainOutboxBatch(ctx, d.Batch, c[0], c[1])
			if err == nil && n > 0 && d.Metrics != nil {
				d.Metrics.DrainBatches.Inc()
				d.Metrics.DrainRows.Add(float64(n))
				d.Metrics.DrainLatency.Observe(time.Since(started).Seconds())
			}
			var m int
			if err == nil {
				m, err = d.Pipeline.DrainRollupRechecks(ctx, d.Batch, c[0], c[1])
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
			}
			if n >= d.Batch || m >= d.Batch {
				busy = true
			}
		}()
	}
	wg.Wait()
	return busy, first
}

// Lanes splits [lo, hi] into at most n contiguous ranges cut at partition
// boundaries (16 shards), as even as the partitions allow.
func Lanes(lo, hi, n int) [][2]int {
	if lo > hi {
		return nil
	}
	first, last := lo/16, hi/16
	parts := last - first + 1
	n = max(1, min(n, parts))
	out := make([][2]int, 0, n)
	p := first
	for i := range n {
		k := parts / n
		if i < parts%n {
			k++
		}
		out = append(out, [2]int{max(lo, p*16), min(hi, (p+k)*16-1)})
		p += k
	}
	return out
}
