package broker

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/gopool"
	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/metrics"
	"github.com/converge-run/converge/core/store/notify"
	"github.com/converge-run/converge/core/store/pipeline"
	"github.com/converge-run/converge/core/testsignal"
)

// claimer is the work_queue side of the dispatcher.
type claimer interface {
	// Claimable probes, in one statement, which pairs have claimable rows.
	Claimable(ctx context.Context, lo, hi int, batches []pipeline.Batch) ([]bool, error)
	Claim(ctx context.Context, l pipeline.Lease, b pipeline.Batch) ([]pipeline.Task, error)
	Release(ctx context.Context, l pipeline.Lease, keys []pipeline.TaskKey) (int, error)
	// OutboxLag is how long the oldest result in [lo, hi] has waited for
	// the drain (0: none waits).
	OutboxLag(ctx context.Context, lo, hi int) (time.Duration, error)
}

// claimRoutes is what the dispatcher asks of the routing table.
type claimRoutes interface {
	// pairs lists the (kind, version, task type) pairs worth claiming.
	pairs() []pairKey
	// localFree is kv's free local worker slots; onlyLocal is false when a
	// mesh peer serves kv too.
	localFree(kv manifest.KindVersion) (free int, onlyLocal bool)
	// changed is closed at the next routing or capacity change.
	changed() <-chan struct{}
}

// shardBounds is this pod's claim range.
type shardBounds interface {
	Bounds() (lo, hi int, owned bool)
	// Changed is closed at the next change of the range.
	Changed() <-chan struct{}
}

// taskRunner runs one claimed task to its outbox result, under the deadline
// its claim shares unless it waits for a slot first, and calls done when the
// task has ended (which may be after runTask returns: a task waiting for a
// slot holds no goroutine).
type taskRunner interface {
	runTask(ctx context.Context, lease pipeline.Lease, t pipeline.Task, due *claimDeadline, done func())
}

// dispatcher is the claim loop: it round-robins every (kind, version, task
// type) that has a manifest and a ready worker, claims batches in this pod's
// shard range while there is work and room, and hands each task to the
// runner. When ctx ends it drains: in-flight tasks get the drain budget to
// finish, and stragglers' leases are released for a fast re-claim.
type dispatcher struct {
	id      string
	claims  claimer
	routes  claimRoutes
	shards  shardBounds
	tasks   *inflight
	runner  taskRunner
	wakes   waker
	metrics *metrics.Metrics
	clock   engine.Clock
	log     zerolog.Logger
	outage  *engine.Outage // nil: errors are logged

	caps pairCaps
	// rollupBound is the room p's rollups have when the pair's is full
	// (ok false: none of their own); nil gives none.
	rollupBound      func(p pairKey) (bound int, ok bool)
	pollMin, pollMax time.Duration
	drain            time.Duration
	// beginDrain is called once claiming has stopped, before the drain
	// waits: it gives back the stages no worker has taken (stager.draining).
	beginDrain func()
	// maxDrainLag bounds how far claims run ahead of the drain (see
	// drainBehind; <= 0: unbounded). lagAt is when the outbox was last
	// read, lag what it said and behind whether that was past the bound.
	maxDrainLag time.Duration
	lagAt       time.Time
	lag         time.Duration
	behind      bool
	// failing are the pairs whose last claim failed with an error of its
	// own, logged once when it began (claimFailed).
	failing map[pairKey]bool
	// probeFailing: the last claimable probe failed with an error of its
	// own, logged once when it began; lagFailing, the same of the last
	// read of the outbox's lag.
	probeFailing, lagFailing bool

	// pool runs the claimed tasks while Run runs (nil: a goroutine each).
	pool *gopool.Pool

	testSignals dispatcherSignals
}

// dispatcherSignals are the dispatcher's test signals.
type dispatcherSignals struct {
	swept   testsignal.Signal[int]           // a sweep ended; the tasks it claimed
	idle    testsignal.Signal[time.Duration] // the loop waits idle this long
	drained testsignal.Signal[int]           // the drain ended; stragglers released
	// loop is what the claim loop did last, for a failure message.
	loop testsignal.Latest[loopState]
}

func (s *dispatcherSignals) init() {
	s.swept.Init()
	s.idle.Init()
	s.drained.Init()
	s.loop.Init()
}

// loopState is what the claim loop is doing: parked in its idle wait, or
// sweeping since a wake, with its dry marks and failing pairs as they were
// then. Recorded only for tests (dispatcherSignals.loop).
type loopState struct {
	at      time.Time     // the clock when it parked or woke
	sweeps  int           // sweeps so far
	parked  bool          // in its idle wait (else sweeping, or about to)
	wait    time.Duration // parked: the idle timer's wait
	woke    string        // sweeping: what ended the wait
	dry     map[pairKey]time.Time
	failing []pairKey
}

// loopState snapshots the loop's state; it runs only under a test.
func (d *dispatcher) loopState(sweeps int, dry map[pairKey]time.Time, wait time.Duration, woke string) loopState {
	s := loopState{at: d.clock.Now(), sweeps: sweeps, parked: woke == "", wait: wait, woke: woke,
		dry: make(map[pairKey]time.Time, len(dry))}
	maps.Copy(s.dry, dry)
	for p := range d.failing {
		s.failing = append(s.failing, p)
	}
	return s
}

func (s loopState) String() string {
	var b strings.Builder
	if s.parked {
		fmt.Fprintf(&b, "parked at %s after %d sweeps, on the idle timer (%s, due %s) and the wakes",
			s.at.Format(time.RFC3339Nano), s.sweeps, s.wait, s.at.Add(s.wait).Format(time.RFC3339Nano))
	} else {
		fmt.Fprintf(&b, "sweeping since %s (woken by %s) after %d sweeps", s.at.Format(time.RFC3339Nano), s.woke, s.sweeps)
	}
	b.WriteString("; dry marks:")
	for p, until := range s.dry {
		fmt.Fprintf(&b, " %s/%s until %s (%+v from then)", p.kv, p.tt, until.Format(time.RFC3339Nano), until.Sub(s.at))
	}
	b.WriteString("; failing:")
	for _, p := range s.failing {
		fmt.Fprintf(&b, " %s/%s", p.kv, p.tt)
	}
	return b.String()
}

// Name implements engine.Duty.
func (d *dispatcher) Name() string { return "dispatcher" }

// Run claims and dispatches until ctx ends, then drains. Tasks run on a
// context that outlives ctx by the drain budget, and so do the claim
// statements: a claim cut short by the shutdown signal can still commit its
// leases after the broker has given up on it, and those tasks would sit
// leased, run and heartbeated by nobody, until the reaper's stale-lease
// window (the chaos suite's rolled broker left up to three that way, and
// their roots waited a minute). So a claim in flight when ctx ends
// finishes, and its tasks are run or given back by the drain like any
// others; it is cut short only when the database has not answered within
// the drain budget. No claim starts once ctx has ended (the sweep checks
// it).
func (d *dispatcher) Run(ctx context.Context) error {
	taskCtx, cancelTasks := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelTasks()
	claimCtx, cancelClaims := outlive(ctx, d.clock, d.drain)
	defer cancelClaims()
	d.pool = gopool.New(taskIdle)
	defer d.pool.Stop()
	wake, stop := d.wakes.subscribe("work_ready")
	defer stop()
	d.claimLoop(ctx, claimCtx, taskCtx, wake)
	if d.beginDrain != nil {
		d.beginDrain()
	}
	d.drainTasks(cancelTasks)
	return nil
}

// outlive returns a context with ctx's values that ends grace after ctx
// does (or when cancelled): work begun before a shutdown signal gets the
// drain budget to finish.
func outlive(ctx context.Context, clock engine.Clock, grace time.Duration) (context.Context, context.CancelFunc) {
	out, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		select {
		case <-clock.After(grace):
			cancel()
		case <-out.Done():
		}
	})
	return out, func() { stop(); cancel() }
}

// taskIdle is how long a task goroutine waits for the next task before it
// exits (see gopool.Pool). Under load a goroutine waits a few milliseconds
// at most; a second kept a burst's goroutines and their grown stacks alive
// long enough to double converge's stack memory (3.5 → 6.4 MB at a 100k
// run's peak, +5 MB of RSS), a tenth of one does not (3.7 MB), and the
// stack growth saved is the same.
const taskIdle = 100 * time.Millisecond

// dryWindow is how long an empty pair is skipped by completion-only sweeps:
// notify_gated's coalescing window.
const dryWindow = 50 * time.Millisecond

// claimLoop sweeps the pairs while they yield work and backs off when idle
// (a work_ready wake, a routing change or a freed slot cuts the wait short).
//
// No committed pend waits on the backoff longer than it must:
//   - A wake is never lost. The work_ready subscription and the freed-slot
//     channel buffer one signal, and the routing-change channel is taken
//     before the sweep, so a signal that lands while a sweep runs triggers
//     the next sweep at once.
//   - A sweep that claimed anything is followed by another at once, until
//     every pair comes back dry: queued work never waits on a timer.
//   - A change of the shard range (a re-tile, or the range handed back once
//     the liveness lock is held again after a database restart) sweeps at
//     once, probing: rows in a range the broker did not own were never
//     asked for.
//   - Every wake, routing change or finished task restarts the idle wait at
//     pollMin, and it doubles from there: after a wake the trailing sweeps
//     fall at +25ms, +75ms, +175ms… (defaults), so a pend whose own notify
//     notify_gated coalesced into that wake (its 50ms window) is claimed by
//     the +75ms sweep at the latest, and one committed δ after the wake by
//     δ + pollMin.
//   - The wait never exceeds pollMax (1s by default; each idle poll is one
//     statement, an indexed EXISTS probe of idx_work_queue_pending per pair,
//     and claims only from the pairs it finds work for), so a pend whose wake
//     was lost entirely — a NOTIFY suppressed while another transaction held
//     the gate, a dropped LISTEN connection — waits at most pollMax plus one
//     sweep, however long the broker was idle before.
//
// A pair whose claim came back empty is dry for a wake window: a sweep
// triggered only by a finished task (which frees a slot but creates no work)
// skips it, and so does one triggered by a routing change or a freed worker
// slot. A work_ready wake and the idle timer both probe first: one statement
// asks every pair at once which hold claimable rows, and the sweep claims
// from those (a wake names no pair, and under load most pairs of a wake
// have nothing: claiming from each would cost a statement per empty pair
// per wake). With a single pair either claims at once (the claim's own
// partition probe is the same one statement). The window matches
// notify_gated's, so work whose wake the gate coalesced away is still
// claimed within about one window of arriving, even while another pair's
// completions keep the loop from ever idling.
func (d *dispatcher) claimLoop(ctx, claimCtx, taskCtx context.Context, wake <-chan notify.Event) {
	wait := d.pollMin
	offset := 0
	dry := map[pairKey]time.Time{}
	probe := false // a wake or the idle timer: probe before claiming
	for sweeps := 1; ctx.Err() == nil; sweeps++ {
		// Taken before the sweep: a change while it runs closes this one.
		changed, reTiled := d.routes.changed(), d.shards.Changed()
		var claimed int
		claimed, offset = d.sweep(ctx, claimCtx, taskCtx, offset, dry, probe)
		probe = false
		d.testSignals.swept.Signal(claimed)
		if claimed > 0 {
			wait = d.pollMin
			continue
		}
		timer := d.clock.After(wait)
		d.testSignals.idle.Signal(wait)
		d.testSignals.loop.Record(func() loopState { return d.loopState(sweeps, dry, wait, "") })
		var woke string
		select {
		case <-ctx.Done():
			return
		case <-wake:
			d.metrics.Wakes.WithLabelValues("work_ready").Inc()
			wait, probe, woke = d.pollMin, true, "a work_ready wake"
		case <-changed:
			// A worker joined, left, changed readiness or freed a slot:
			// room to claim, but no new rows, so dry pairs stay dry
			// (every stage's slot release signals here).
			wait, woke = d.pollMin, "a routing change"
		case <-d.tasks.done:
			wait, woke = d.pollMin, "a finished task"
		case <-reTiled:
			wait, probe, woke = d.pollMin, true, "a change of the shard range"
		case <-timer:
			wait, probe, woke = min(wait*2, d.pollMax), true, "the idle timer"
		}
		d.testSignals.loop.Record(func() loopState { return d.loopState(sweeps, dry, 0, woke) })
	}
}

// sweep claims once from every pair that is not dry, starting one pair
// further round each time; it returns the tasks claimed and the next offset.
// A probing sweep (a wake, the idle failsafe) first asks which pairs hold
// claimable rows, in one statement, and claims only from those; with one
// pair it claims at once. Pairs whose dry window has run out are asked
// again the same way, together: under load the loop sweeps without pause,
// and each pair that has nothing (the delete and operate pairs of a
// reconcile-heavy run) would otherwise cost a statement of its own every
// window.
func (d *dispatcher) sweep(ctx, claimCtx, taskCtx context.Context, offset int, dry map[pairKey]time.Time, probe bool) (claimed, next int) {
	pairs := d.routes.pairs()
	lo, hi, owned := d.shards.Bounds()
	if !owned || len(pairs) == 0 {
		return 0, offset
	}
	switch {
	case d.behind:
		// Behind at the last read: only rollups are claimed, so no probe
		// for the other pairs' work.
	case probe && len(pairs) > 1:
		d.probe(ctx, pairs, lo, hi, dry)
	case probe:
		clear(dry)
	default:
		if expired := dryExpired(pairs, dry, d.clock.Now()); len(expired) > 1 {
			d.probe(ctx, expired, lo, hi, dry)
		}
	}
	offset = (offset + 1) % len(pairs)
	behind, read := d.behind, false
	for i := range pairs {
		p := pairs[(offset+i)%len(pairs)]
		if ctx.Err() != nil {
			break // shutting down: no claim starts
		}
		if until, ok := dry[p]; ok && d.clock.Now().Before(until) {
			continue
		}
		if !read {
			// Read only once a pair may be claimed from: an idle poll whose
			// probe finds nothing costs no statement more.
			behind, read = d.drainBehind(ctx, lo, hi), true
		}
		n, err := d.claimPair(claimCtx, taskCtx, p, lo, hi, behind)
		claimed += max(n, 0)
		if err != nil {
			d.claimFailed(ctx, p, lo, hi, err, dry)
			continue
		}
		d.outage.Succeeded()
		if d.failing[p] {
			delete(d.failing, p)
			d.log.Info().Str("kind", p.kv.String()).Str("task_type", string(p.tt)).
				Int("shard_lo", lo).Int("shard_hi", hi).Msg("pair claims again")
		}
		switch {
		case n == 0:
			dry[p] = d.clock.Now().Add(dryWindow)
		case n > 0:
			delete(dry, p) // it has work: not one to ask again with the others
		}
	}
	if !read && d.lag > 0 {
		// No pair to claim from, but results waited at the last read: read
		// on until the outbox is seen empty, so the gauge and the bound
		// follow the drain while the broker idles. An idle broker whose last
		// read found nothing waiting reads nothing.
		d.drainBehind(ctx, lo, hi)
	}
	return claimed, offset
}

// claimFailed handles a claim of p that failed: the pair is skipped for a
// dry window, as if it had come back empty (under load the loop sweeps
// without pause for the other pairs, and a pair whose claim keeps failing
// cost a statement each sweep), and its failure is logged once, where it
// starts (the database unreachable goes to the outage reporter instead);
// the sweep that claims from it again logs that once.
func (d *dispatcher) claimFailed(ctx context.Context, p pairKey, lo, hi int, err error, dry map[pairKey]time.Time) {
	dry[p] = d.clock.Now().Add(dryWindow)
	if ctx.Err() != nil || d.outage.Failed("claim", err) || d.failing[p] {
		return
	}
	if d.failing == nil {
		d.failing = map[pairKey]bool{}
	}
	d.failing[p] = true
	d.log.Error().Err(err).Str("kind", p.kv.String()).Str("task_type", string(p.tt)).
		Int("shard_lo", lo).Int("shard_hi", hi).Msg("claim failed; retried quietly until it claims again")
}

// dryExpired returns the pairs whose dry mark has run out by now.
func dryExpired(pairs []pairKey, dry map[pairKey]time.Time, now time.Time) []pairKey {
	var out []pairKey
	for _, p := range pairs {
		if until, ok := dry[p]; ok && !now.Before(until) {
			out = append(out, p)
		}
	}
	return out
}

// probe sets the dry marks of pairs from one Claimable probe: a pair with
// claimable rows is swept, one without is dry for a window (as if its claim
// had come back empty). When the probe fails every pair is swept.
func (d *dispatcher) probe(ctx context.Context, pairs []pairKey, lo, hi int, dry map[pairKey]time.Time) {
	batches := make([]pipeline.Batch, len(pairs))
	for i, p := range pairs {
		batches[i] = pipeline.Batch{Kind: p.kv.Kind, Version: p.kv.Version, TaskType: p.tt}
	}
	has, err := d.claims.Claimable(ctx, lo, hi, batches)
	if err == nil && len(has) != len(pairs) {
		err = fmt.Errorf("claimable probe answered for %d pairs of %d", len(has), len(pairs))
	}
	if err != nil {
		// Logged once, where it starts (an unreachable database goes to the
		// outage reporter): it runs on every wake, and under load whenever
		// dry pairs' windows run out.
		if ctx.Err() == nil && !d.outage.Failed("claim", err) && !d.probeFailing {
			d.probeFailing = true
			d.log.Warn().Err(err).Int("shard_lo", lo).Int("shard_hi", hi).
				Msg("claimable probe failed; sweeping every pair until it answers again")
		}
		clear(dry)
		return
	}
	if d.probeFailing {
		d.probeFailing = false
		d.log.Info().Int("shard_lo", lo).Int("shard_hi", hi).Msg("claimable probe answers again")
	}
	until := d.clock.Now().Add(dryWindow)
	for i, p := range pairs {
		if has[i] {
			delete(dry, p)
		} else {
			dry[p] = until
		}
	}
}

// claimPair claims up to the room left for one pair and starts its tasks.
// It returns -1 without claiming when the pair has no room worth a claim:
// full, or — with tasks still in flight — less than a quarter of its limit
// free. That hysteresis turns a stream of completions into claims of a
// quarter of the limit each instead of one statement per finished task. A
// rollup kind's pair without room still claims its rollups, up to their own
// room (rollupRoom); so does every rollup kind's pair while the drain is
// behind (drainBehind), and no other pair claims then.
func (d *dispatcher) claimPair(claimCtx, taskCtx context.Context, p pairKey, lo, hi int, behind bool) (int, error) {
	inflight := d.tasks.pair(p)
	limit := d.caps.of(p)
	room := limit - inflight
	free, onlyLocal := d.routes.localFree(p.kv)
	if onlyLocal {
		// Only local workers: claim what they can take.
		room, limit = min(room, free), min(limit, inflight+free)
	}
	batch := pipeline.Batch{Kind: p.kv.Kind, Version: p.kv.Version, TaskType: p.tt, Max: room}
	if behind || room <= 0 || (inflight > 0 && room < max(1, limit/4)) {
		// No room worth a claim. A rollup kind's rollups have some of
		// their own: a composite's pair fills with composes waiting for
		// their slots, and a rollup finishes a whole tree. Whether or not
		// a worker slot is free: a stage waiting for one gets the next
		// freed, ahead of the claims that would take it for leaves.
		rollups, ok := d.rollupRoom(p)
		if !ok || rollups <= 0 {
			return -1, nil
		}
		batch.Max, batch.OnlyRollups = rollups, true
	}
	lease := pipeline.Lease{WorkerID: d.id, Lo: lo, Hi: hi}
	tasks, err := d.claims.Claim(claimCtx, lease, batch)
	if len(tasks) == 0 {
		return 0, err
	}
	d.metrics.Claims.WithLabelValues(p.kv.Kind, string(p.tt)).Add(float64(len(tasks)))
	d.tasks.add(lease, p, tasks)
	due := newClaimDeadline(taskCtx, tasks)
	for i := range tasks {
		// A pointer into the claim's slice: the closure copies no task. The
		// entry is cleared when its task ends, so the slice, held until the
		// claim's last task ends, keeps no finished task's documents.
		t := &tasks[i]
		d.pool.Go(func() {
			d.runner.runTask(taskCtx, lease, *t, due, func() {
				d.tasks.finish(p, t.Key, t.IsRollup())
				*t = pipeline.Task{}
				due.done()
			})
		})
	}
	return len(tasks), err
}

// lagEvery is the longest drainBehind trusts its last read of the outbox:
// under load the loop sweeps without pause, and reads the outbox at most
// ten times a second.
const lagEvery = 100 * time.Millisecond

// drainBehind reports whether the oldest result in [lo, hi] has waited for
// the drain longer than maxDrainLag, reading the outbox at most every
// lagEvery. The pair caps bound the tasks a broker runs, not the results
// waiting to be applied: a task ends once its result is in the outbox, and
// its room is claimed again at once. When the drain is the slower side
// (Postgres busy with a 1M run's composes), every claim only lengthens the
// backlog — a 1M run kept 10,000–28,000 results waiting, up to 25 s each,
// with the roots' rollups behind them, and a result that waits past the
// reaper's stale-lease window has its task run again. While behind, the
// dispatcher claims only rollups (they finish whole trees, and are few);
// the backlog drains, and the claims resume once the wait is back under
// the bound. The read failing counts as not behind: the claims' own
// statements report the outage, and a failure of the read's own is logged
// once.
func (d *dispatcher) drainBehind(ctx context.Context, lo, hi int) bool {
	if d.maxDrainLag <= 0 {
		return false
	}
	now := d.clock.Now()
	if !d.lagAt.IsZero() && now.Sub(d.lagAt) < lagEvery {
		return d.behind
	}
	d.lagAt = now
	lag, err := d.claims.OutboxLag(ctx, lo, hi)
	if err != nil {
		// Unreachable: the claims' own statements report the outage. Any
		// other failure leaves the claims unpaced: said once, where it
		// begins, and once when a read answers again.
		if ctx.Err() == nil && !d.outage.Failed("claim", err) && !d.lagFailing {
			d.lagFailing = true
			d.log.Warn().Err(err).Int("shard_lo", lo).Int("shard_hi", hi).
				Msg("read the outbox's lag failed; claims are not paced on the drain until a read answers")
		}
		d.behind = false
		return false
	}
	if d.lagFailing {
		d.lagFailing = false
		d.log.Info().Int("shard_lo", lo).Int("shard_hi", hi).Msg("the outbox's lag reads again; claims are paced on the drain")
	}
	d.lag = lag
	d.metrics.OutboxLag.Set(lag.Seconds())
	if behind := lag > d.maxDrainLag; behind != d.behind {
		d.behind = behind
		d.log.Debug().Dur("lag", lag).Dur("bound", d.maxDrainLag).Bool("behind", behind).
			Msg("outbox lag crossed its bound; claiming only rollups while behind")
	}
	if lag > drainStalled {
		stalled := d.log.Sample(drainStalledWarnings)
		stalled.Warn().Dur("lag", lag).Int("shard_lo", lo).Int("shard_hi", hi).
			Msg("results have waited this long for a drainer; claiming only rollups until one catches up (the drainer runs in ROLE=control and ROLE=all pods)")
	}
	return d.behind
}

// drainStalled is the outbox lag past which the drain is not slow but
// stopped (no drainer runs for these shards, or its statements fail): worth
// a warning, at most once a minute (drainStalledWarnings).
const drainStalled = 30 * time.Second

var drainStalledWarnings = &zerolog.BurstSampler{Burst: 1, Period: time.Minute}

// rollupRoom is how many rollups p may claim beyond its room: its rollup
// bound less its rollups in flight (ok false: it has no bound).
func (d *dispatcher) rollupRoom(p pairKey) (int, bool) {
	if d.rollupBound == nil {
		return 0, false
	}
	bound, ok := d.rollupBound(p)
	if !ok {
		return 0, false
	}
	return bound - d.tasks.pairRollups(p), true
}

// claimDeadline is the deadline the tasks of one claim share. They are of
// one kind, so they have one deadline, and they start together: one timer
// and one context per claim, where one per task was nearly 4% of the
// broker's CPU at a 100k run's rate. A task that waits for a compose or
// rollup slot first does not use it (its deadline starts once it has the
// slot).
type claimDeadline struct {
	ctx      context.Context // nil: the claim's tasks have no deadline
	cancel   context.CancelFunc
	deadline time.Duration
	left     atomic.Int32 // tasks of the claim not yet done
}

// newClaimDeadline starts the shared deadline of tasks, claimed together,
// under parent; it ends when the last of them is done.
func newClaimDeadline(parent context.Context, tasks []pipeline.Task) *claimDeadline {
	c := &claimDeadline{deadline: tasks[0].Deadline}
	if c.deadline > 0 {
		c.ctx, c.cancel = context.WithTimeout(parent, c.deadline)
	}
	c.left.Store(int32(len(tasks)))
	return c
}

// context is the context a task with deadline d (> 0) runs under, and its
// cancel: the claim's, ended by the claim's last task, or — no claim, or a
// deadline that differs from the claim's (never within one kind) — one of
// its own.
func (c *claimDeadline) context(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if c == nil || c.ctx == nil || d != c.deadline {
		return context.WithTimeout(parent, d)
	}
	return c.ctx, noCancel
}

// noCancel is the cancel of a context someone else ends.
func noCancel() {}

// done marks one task of the claim finished; the last one ends the context.
func (c *claimDeadline) done() {
	if c.left.Add(-1) == 0 && c.cancel != nil {
		c.cancel()
	}
}

// drainTasks gives in-flight tasks up to the drain budget (the Connect
// handler stays mounted meanwhile so their completions land), then cancels
// the stragglers and releases their leases for a fast re-claim.
func (d *dispatcher) drainTasks(cancelTasks context.CancelFunc) {
	d.log.Info().Int("in_flight", d.tasks.count()).Dur("budget", d.drain).Msg("broker draining")
	deadline := d.clock.After(d.drain)
drain:
	for d.tasks.count() > 0 {
		select {
		case <-d.tasks.done:
		case <-deadline:
			break drain
		}
	}
	left, n := d.tasks.byLease(), 0
	for _, keys := range left {
		n += len(keys)
	}
	if n > 0 {
		d.log.Warn().Int("stragglers", n).Msg("drain budget spent; releasing leases for re-claim")
		cancelTasks()
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		d.release(rctx, left)
		cancel()
	}
	d.testSignals.drained.Signal(n)
}

// release gives the stragglers' leases back, one statement per lease.
func (d *dispatcher) release(ctx context.Context, byLease map[pipeline.Lease][]pipeline.TaskKey) {
	for l, keys := range byLease {
		if _, err := d.claims.Release(ctx, l, keys); err != nil {
			d.log.Warn().Err(err).Int("tasks", len(keys)).Msg("release leases; the reaper will reclaim them")
		}
	}
}
