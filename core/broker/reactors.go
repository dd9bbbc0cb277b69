package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store/lifecycle"
	"github.com/converge-run/converge/core/testsignal"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// deliveries is the lifecycle_outbox side of the reactor dispatcher.
type deliveries interface {
	Claim(ctx context.Context, workerID string, reactors []string, lo, hi, limit int) ([]lifecycle.Delivery, error)
	Ack(ctx context.Context, d lifecycle.Delivery) (bool, error)
	Heartbeat(ctx context.Context, workerID string, ds []lifecycle.Delivery) (int, error)
	Release(ctx context.Context, workerID string, ds []lifecycle.Delivery) (int, error)
}

// reactorRoutes is what the reactor dispatcher asks of the routing table.
type reactorRoutes interface {
	// reactorKinds lists the served (kind, version) pairs that declare a
	// reactor reaction.
	reactorKinds() []manifest.KindVersion
	// routesChanged is closed at the next routing change (not at every
	// finished stage: the dispatcher's own deliveries wake it through ended).
	routesChanged() <-chan struct{}
}

// taskSender ships one stage task to a worker (local or over the mesh).
type taskSender interface {
	dispatch(ctx context.Context, kv manifest.KindVersion, task *workerv1.StageTask) (*workerv1.StageComplete, error)
}

// reactorPollMax caps the reactor dispatcher's idle backoff.
const reactorPollMax = 5 * time.Second

// reactorDispatcher claims lifecycle_outbox deliveries for the reactor kinds
// connected workers serve, ships each as a STAGE_REACT to a worker, and
// acknowledges it once the reactor succeeded. A reactor that failed
// transiently is not acknowledged; its claim lapses and the reaper re-arms it
// (at-least-once per binding; DedupToken lets sinks stay idempotent). One
// that failed terminally is dropped: it would fail the same way again.
type reactorDispatcher struct {
	id         string
	deliveries deliveries
	routes     reactorRoutes
	sender     taskSender
	kinds      kindSource
	shards     shardBounds
	wakes      waker
	// freed is told when a delivery ends (its worker slot is free).
	freed   func()
	cap     int
	pollMin time.Duration
	every   time.Duration // claim heartbeat cadence
	// drain is the budget the deliveries in flight get to finish once ctx
	// ends (SHUTDOWN_DRAIN).
	drain  time.Duration
	clock  engine.Clock
	log    zerolog.Logger
	outage *engine.Outage

	mu sync.Mutex
	// inflight holds the deliveries running, by claim epoch: one claim each.
	// Not by key: a delivery re-armed while in flight (its edge re-fired) and
	// re-claimed here runs beside the first under the same key, and the
	// first one's end must not take the second out of the heartbeats.
	inflight map[int64]lifecycle.Delivery
	// ended is signalled when one of this dispatcher's deliveries ends:
	// room to claim again.
	ended chan struct{}
	// running counts the delivery goroutines; unacked are the deliveries
	// that ended unacknowledged once the shutdown began, given back when
	// the drain ends.
	running sync.WaitGroup
	unacked []lifecycle.Delivery

	testSignals reactorSignals
}

// reactorSignals are the reactor dispatcher's test signals.
type reactorSignals struct {
	delivered testsignal.Signal[bool] // a delivery ended; whether it was acked
}

// Name implements engine.Duty.
func (r *reactorDispatcher) Name() string { return "reactor-dispatcher" }

// Run claims and delivers until ctx ends, then drains: the deliveries in
// flight get up to the drain budget to finish (heartbeated meanwhile), and
// every delivery that ended unacknowledged after ctx ended — cut short, or
// given back by the draining stager — is released for another broker to
// deliver at once, instead of when its claim lapses. A reactor that failed
// before ctx ended keeps its claim until it lapses: that wait is its retry's
// backoff.
func (r *reactorDispatcher) Run(ctx context.Context) error {
	wake, stop := r.wakes.subscribe("lifecycle_ready")
	defer stop()
	r.mu.Lock()
	r.inflight = map[int64]lifecycle.Delivery{}
	r.ended = make(chan struct{}, 1)
	r.unacked = nil
	ended := r.ended
	r.mu.Unlock()
	// Deliveries and their heartbeats outlive ctx by the drain budget; so
	// does a claim in flight when ctx ends (see dispatcher.Run: a
	// claim cut short can still commit).
	live, cancelLive := outlive(ctx, r.clock, r.drain)
	defer cancelLive()
	var beats sync.WaitGroup
	beats.Go(func() { r.heartbeats(live) })
	defer func() {
		r.drainDeliveries(cancelLive)
		beats.Wait()
	}()

	wait := r.pollMin
	for ctx.Err() == nil {
		// Taken before the claim: a range handed back while it runs (a
		// re-tile, the liveness lock held again) claims at once.
		reTiled := r.shards.Changed()
		if r.claim(ctx, live) > 0 {
			wait = r.pollMin
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
			wait = r.pollMin
		case <-r.routes.routesChanged():
			wait = r.pollMin
		case <-reTiled:
			wait = r.pollMin
		case <-ended:
			wait = r.pollMin
		case <-r.clock.After(wait):
			wait = min(wait*2, reactorPollMax)
		}
	}
	return nil
}

// drainDeliveries waits for the deliveries in flight (live, their context,
// ends at most the drain budget after the shutdown began, cutting short any
// still running), stops the heartbeats (cancel), and releases every delivery
// that ended unacknowledged during the shutdown.
func (r *reactorDispatcher) drainDeliveries(cancel context.CancelFunc) {
	r.running.Wait()
	cancel()
	r.mu.Lock()
	give := r.unacked
	r.unacked = nil
	r.mu.Unlock()
	if len(give) == 0 {
		return
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	n, err := r.deliveries.Release(rctx, r.id, give)
	if err != nil {
		r.log.Warn().Err(err).Int("deliveries", len(give)).Msg("release lifecycle deliveries; they are re-armed when their claims lapse")
		return
	}
	r.log.Info().Int("released", n).Msg("reactor deliveries given back for another broker")
}

// claim claims up to the room left and starts each delivery on live, which
// outlives ctx (the shutdown) by the drain. The claim statement itself runs
// on live too: a claim cut short by the shutdown could still commit.
func (r *reactorDispatcher) claim(ctx, live context.Context) int {
	kinds := reactorNames(r.routes.reactorKinds())
	lo, hi, owned := r.shards.Bounds()
	if !owned || len(kinds) == 0 {
		return 0
	}
	r.mu.Lock()
	room := r.cap - len(r.inflight)
	r.mu.Unlock()
	ds, err := r.deliveries.Claim(live, r.id, kinds, lo, hi, room)
	switch {
	case err == nil:
		r.outage.Succeeded()
	case ctx.Err() == nil && !r.outage.Failed("reactor-claim", err):
		r.log.Error().Err(err).Int("shard_lo", lo).Int("shard_hi", hi).Msg("claim lifecycle deliveries failed")
	}
	for _, d := range ds {
		r.mu.Lock()
		r.inflight[d.ClaimEpoch] = d
		r.mu.Unlock()
		r.running.Add(1)
		go func() {
			defer r.running.Done()
			defer func() {
				r.mu.Lock()
				delete(r.inflight, d.ClaimEpoch)
				ended := r.ended
				r.mu.Unlock()
				select {
				case ended <- struct{}{}:
				default:
				}
				r.freed()
			}()
			acked := r.deliver(live, d)
			if !acked && ctx.Err() != nil {
				r.mu.Lock()
				r.unacked = append(r.unacked, d)
				r.mu.Unlock()
			}
			r.testSignals.delivered.Signal(acked)
		}()
	}
	return len(ds)
}

// heartbeats keeps slow reactors' claims alive.
func (r *reactorDispatcher) heartbeats(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.clock.After(r.every):
		}
		r.mu.Lock()
		ds := make([]lifecycle.Delivery, 0, len(r.inflight))
		for _, d := range r.inflight {
			ds = append(ds, d)
		}
		r.mu.Unlock()
		if _, err := r.deliveries.Heartbeat(ctx, r.id, ds); err != nil && ctx.Err() == nil &&
			!r.outage.Failed("reactor-heartbeat", err) {
			r.log.Warn().Err(err).Msg("lifecycle heartbeat failed")
		}
	}
}

// lifecycleSnapshot is the watched resource as the lifecycle row holds it.
type lifecycleSnapshot struct {
	ID         string            `json:"id"`
	Kind       string            `json:"kind"`
	Version    string            `json:"version"`
	Name       string            `json:"name"`
	Labels     map[string]string `json:"labels"`
	Spec       json.RawMessage   `json:"spec"`
	Status     json.RawMessage   `json:"status"`
	Generation int64             `json:"generation"`
	OwnerID    *string           `json:"owner_id"`
	Finalizers []string          `json:"finalizers"`
}

// deliver ships one delivery and acks it on success, or on a terminal
// failure (dropped: a redelivery would fail the same way); it reports
// whether the delivery was acknowledged.
func (r *reactorDispatcher) deliver(ctx context.Context, d lifecycle.Delivery) bool {
	log := r.log.With().Str("reactor", d.Reactor).Str("binding", d.Key.Binding).Str("transition", d.Key.Transition).Logger()
	var snap lifecycleSnapshot
	if err := json.Unmarshal(d.Snapshot, &snap); err != nil {
		log.Error().Err(err).Str("dedup_token", d.Key.DedupToken()).Msg("unreadable lifecycle snapshot; dropping the delivery")
		return r.ack(ctx, log, d)
	}
	kv, reaction, ok := r.reactor(d.Reactor)
	if !ok {
		log.Warn().Msg("reactor kind has no applied manifest; leaving the delivery for later")
		return false
	}
	task := reactTask(r.id, d, kv, reaction, snap)
	dctx, cancel, deadline := r.withDeadline(ctx, kv, task)
	defer cancel()
	c, err := r.sender.dispatch(dctx, kv, task)
	switch {
	case err != nil && ctx.Err() == nil && dctx.Err() != nil:
		log.Warn().Dur("deadline", deadline).Msg("reactor overran its task deadline; the delivery is re-armed when its claim lapses")
		return false
	case err != nil && ctx.Err() == nil && !errors.Is(err, errDraining):
		log.Warn().Err(err).Msg("reactor delivery not handed to a worker; it is re-armed when its claim lapses")
		return false
	case err != nil || c == nil:
		// Cut short or given back by the shutdown (released when the drain
		// ends), or its worker was lost (the stager logs it): re-armed when
		// the claim lapses.
		return false
	}
	if e := c.GetError(); e != nil {
		if !e.GetTerminal() {
			log.Warn().Str("error", e.GetMessage()).Msg("reactor failed; the delivery is re-armed when its claim lapses")
			return false
		}
		// The same delivery fails the same way every time (the reactor said
		// so, or its snapshot is over the worker's message limit): retried,
		// it would come back every claim lapse, for good.
		log.Error().Str("error", e.GetMessage()).Str("dedup_token", d.Key.DedupToken()).Int("attempts", d.Attempts).
			Msg("reactor failed terminally; the delivery is dropped")
	}
	return r.ack(ctx, log, d)
}

// withDeadline is ctx bounded by the reactor kind's task deadline
// (task_deadline_secs; none when 0), which task then carries to the
// worker, as every other stage's does; and that deadline.
func (r *reactorDispatcher) withDeadline(ctx context.Context, kv manifest.KindVersion, task *workerv1.StageTask) (
	context.Context, context.CancelFunc, time.Duration) {
	k, ok := r.kinds.Kind(kv)
	if !ok || k.Config.TaskDeadlineSecs <= 0 {
		return ctx, func() {}, 0
	}
	deadline := time.Duration(k.Config.TaskDeadlineSecs) * time.Second
	dctx, cancel := context.WithTimeout(ctx, deadline)
	if d, ok := dctx.Deadline(); ok {
		task.TaskDeadlineMs = max(time.Until(d).Milliseconds(), 1)
	}
	return dctx, cancel, deadline
}

// ack acknowledges d, reporting whether it landed (a failed ack is logged
// here: the delivery comes back when its claim lapses).
func (r *reactorDispatcher) ack(ctx context.Context, log zerolog.Logger, d lifecycle.Delivery) bool {
	if _, err := r.deliveries.Ack(ctx, d); err != nil {
		if !r.outage.Failed("reactor-ack", err) {
			log.Warn().Err(err).Msg("ack lifecycle delivery; it will be redelivered")
		}
		return false
	}
	r.outage.Succeeded()
	return true
}

// reactorNames is the kind names of kvs, each once.
func reactorNames(kvs []manifest.KindVersion) []string {
	var out []string
	for _, kv := range kvs {
		if !slices.Contains(out, kv.Kind) {
			out = append(out, kv.Kind)
		}
	}
	return out
}

// reactor finds the reactor kind named name and its reaction: a version a
// worker serves (a delivery names only its reactor kind, and the first
// version applied may be one no worker serves any more), else, when none
// is served now, any applied version.
func (r *reactorDispatcher) reactor(name string) (manifest.KindVersion, manifest.ReactionDecl, bool) {
	for _, kv := range r.routes.reactorKinds() {
		if k, ok := r.kinds.Kind(kv); ok && kv.Kind == name {
			if react, ok := k.Manifest.Reactor(); ok && react.Name != "" {
				return kv, react, true
			}
		}
	}
	for _, k := range r.kinds.All() {
		if react, ok := k.Manifest.Reactor(); ok && k.Name == name {
			return manifest.KindVersion{Kind: k.Name, Version: k.Version}, react, react.Name != ""
		}
	}
	return manifest.KindVersion{}, manifest.ReactionDecl{}, false
}

// reactTask is the STAGE_REACT task of one delivery. The watched resource
// travels as the reactor task's resource, under the reactor's kind and
// version (they route the task to the reactor's provider); its own kind
// travels as the request's watch_kind.
func reactTask(brokerID string, d lifecycle.Delivery, kv manifest.KindVersion, reaction manifest.ReactionDecl,
	snap lifecycleSnapshot) *workerv1.StageTask {
	res := &workerv1.Resource{Id: snap.ID, Kind: kv.Kind, Version: kv.Version, Name: snap.Name, Generation: snap.Generation}
	readParts(res, reaction.Reading(), snap.Spec, snap.Status, snap.Labels, snap.Finalizers)
	if snap.OwnerID != nil {
		res.OwnerId = *snap.OwnerID
	}
	tid := fmt.Sprintf("react|%s|%d", d.Key.DedupToken(), d.ClaimEpoch)
	return &workerv1.StageTask{TaskId: tid, Fence: &workerv1.Fence{LeaseToken: brokerID, ClaimEpoch: d.ClaimEpoch},
		Stage: workerv1.Stage_STAGE_REACT, Reaction: reaction.Name, Resource: res,
		Request: &workerv1.StageTask_React{React: &workerv1.ReactRequest{Transition: d.Key.Transition, WatchKind: d.WatchKind,
			BindingName: d.Key.Binding,
			DedupToken:  d.Key.DedupToken(), Generation: d.Key.Generation}}}
}
