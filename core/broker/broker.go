package broker

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/cluster"
	"github.com/converge-run/converge/core/kinds"
	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/metrics"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/lifecycle"
	"github.com/converge-run/converge/core/store/notify"
	"github.com/converge-run/converge/core/store/pipeline"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
	"github.com/converge-run/converge/workerproto/gen/converge/worker/v1/workerv1connect"
)

// Defaults of the broker duty.
const (
	// DefaultPairCap is the per-pod in-flight ceiling of one (kind, task type).
	DefaultPairCap = 100
	// DefaultDrain is SHUTDOWN_DRAIN: how long in-flight tasks may finish.
	DefaultDrain = 45 * time.Second
)

// Broker is the broker duty of a pod. Build one with its exported fields and
// mount Handler on the listener workers dial.
type Broker struct {
	// ID is the lease token stamped on every claim (the pod's member id).
	ID       string
	Pipeline *pipeline.Store
	Store    *store.Store
	Kinds    *kinds.Cache
	// Lifecycle claims reactor deliveries; nil disables the reactor dispatcher.
	Lifecycle *lifecycle.Store
	Listener  *notify.Listener
	Shards    *cluster.ShardSet
	Metrics   *metrics.Metrics
	Log       zerolog.Logger

	// PairCap caps one (kind, version, task type) per pod (default 100).
	PairCap int
	// Drain is the shutdown drain budget (SHUTDOWN_DRAIN, default 45s).
	Drain time.Duration
	// PollMin and PollMax bound the idle claim backoff (defaults 25ms, 30s).
	PollMin, PollMax time.Duration
	// HeartbeatEvery is the lease heartbeat cadence (default 5s).
	HeartbeatEvery time.Duration
	// RedeliveryWait is how long a stage whose worker vanished waits for the
	// worker to reconnect and redeliver (default 30s).
	RedeliveryWait time.Duration

	reg        *registry
	mesh       *Mesh
	out        *outboxWriter
	sessionSeq atomic.Int64

	mu       sync.Mutex
	running  map[pipeline.TaskKey]*running
	perPair  map[pairKey]int
	waiters  map[string]chan *workerv1.StageComplete
	taskDone chan struct{}
	once     sync.Once
}

type pairKey struct {
	kv manifest.KindVersion
	tt pipeline.TaskType
}

// running is one claimed task in flight on this broker.
type running struct {
	task  pipeline.Task
	lease pipeline.Lease
	pair  pairKey
}

func (b *Broker) init() {
	b.once.Do(func() {
		if b.PairCap <= 0 {
			b.PairCap = DefaultPairCap
		}
		if b.Drain <= 0 {
			b.Drain = DefaultDrain
		}
		if b.PollMin <= 0 {
			b.PollMin = 25 * time.Millisecond
		}
		if b.PollMax <= 0 {
			b.PollMax = 30 * time.Second
		}
		if b.HeartbeatEvery <= 0 {
			b.HeartbeatEvery = 5 * time.Second
		}
		if b.RedeliveryWait <= 0 {
			b.RedeliveryWait = 30 * time.Second
		}
		if b.Metrics == nil {
			b.Metrics = metrics.New()
		}
		b.reg = newRegistry()
		b.out = newOutboxWriter(b.Pipeline.AppendOutbox)
		b.running = map[pipeline.TaskKey]*running{}
		b.perPair = map[pairKey]int{}
		b.waiters = map[string]chan *workerv1.StageComplete{}
		b.taskDone = make(chan struct{}, 1)
		b.Log = b.Log.With().Str("component", "broker").Str("broker_id", b.ID).Logger()
	})
}

// Handler is the Connect WorkerService to mount on the broker listener.
func (b *Broker) Handler() (string, http.Handler) {
	b.init()
	return workerv1connect.NewWorkerServiceHandler(b)
}

// InFlight is the number of tasks this broker runs now (for membership).
func (b *Broker) InFlight() int {
	b.init()
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.running)
}

// Kinds served lists the (kind, version) pairs connected workers serve ready.
func (b *Broker) Served() []string {
	b.init()
	var out []string
	for _, kv := range b.reg.served() {
		out = append(out, kv.String())
	}
	return out
}

// Name implements engine.Duty.
func (b *Broker) Name() string { return "broker" }

// Run claims and dispatches until ctx ends, then drains: in-flight tasks get
// up to Drain to finish (the Connect handler must stay mounted meanwhile so
// their completions land); stragglers' leases are released for fast re-claim.
func (b *Broker) Run(ctx context.Context) error {
	b.init()
	// Tasks run on a context that outlives ctx by the drain budget.
	taskCtx, cancelTasks := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelTasks()

	var wake <-chan notify.Event
	if b.Listener != nil {
		sub := b.Listener.Subscribe("work_ready", 1)
		defer sub.Close()
		wake = sub.C
	}
	bg, cancelBG := context.WithCancel(taskCtx)
	var wg sync.WaitGroup
	wg.Add(4)
	go func() { defer wg.Done(); b.out.run(bg) }()
	go func() { defer wg.Done(); b.heartbeats(bg) }()
	go func() { defer wg.Done(); b.configPushes(bg) }()
	go func() { defer wg.Done(); b.reactors(ctx) }()

	b.claimLoop(ctx, taskCtx, wake)

	// Drain.
	n := b.InFlight()
	b.Log.Info().Int("in_flight", n).Dur("budget", b.Drain).Msg("broker draining")
	deadline := time.After(b.Drain)
drain:
	for b.InFlight() > 0 {
		select {
		case <-b.taskDone:
		case <-deadline:
			break drain
		}
	}
	if left := b.stragglers(); len(left) > 0 {
		b.Log.Warn().Int("stragglers", len(left)).Msg("drain budget spent; releasing leases for re-claim")
		cancelTasks()
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		b.release(rctx, left)
		cancel()
	}
	cancelBG()
	wg.Wait()
	return nil
}

func (b *Broker) stragglers() []*running {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*running, 0, len(b.running))
	for _, r := range b.running {
		out = append(out, r)
	}
	return out
}

func (b *Broker) release(ctx context.Context, rs []*running) {
	byLease := map[pipeline.Lease][]pipeline.TaskKey{}
	for _, r := range rs {
		byLease[r.lease] = append(byLease[r.lease], r.task.Key)
	}
	for l, keys := range byLease {
		if _, err := b.Pipeline.Release(ctx, l, keys); err != nil {
			b.Log.Warn().Err(err).Int("tasks", len(keys)).Msg("release leases; the reaper will reclaim them")
		}
	}
}

// heartbeats keeps the leases of in-flight tasks alive, pruned to the span
// of the tasks themselves (not the current ownership: a reshard must not let
// the reaper take work already claimed).
func (b *Broker) heartbeats(ctx context.Context) {
	t := time.NewTicker(b.HeartbeatEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rs := b.stragglers()
		if len(rs) == 0 {
			continue
		}
		// One statement per partition-sized group keeps each heartbeat pruned.
		groups := map[int][]pipeline.TaskKey{}
		for _, r := range rs {
			groups[r.task.Key.ShardID/16] = append(groups[r.task.Key.ShardID/16], r.task.Key)
		}
		for p, keys := range groups {
			if _, err := b.Pipeline.Heartbeat(ctx, b.ID, p*16, p*16+15, keys); err != nil && ctx.Err() == nil {
				b.Log.Warn().Err(err).Int("tasks", len(keys)).Msg("lease heartbeat failed")
			}
		}
	}
}

// configPushes pushes a kind's whole default config to its workers on every
// providerconfig_changed wake (plus a failsafe re-read).
func (b *Broker) configPushes(ctx context.Context) {
	var wake <-chan notify.Event
	if b.Listener != nil {
		sub := b.Listener.Subscribe("providerconfig_changed", 1)
		defer sub.Close()
		wake = sub.C
	}
	last := map[string]int64{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-time.After(30 * time.Second):
		}
		for _, kv := range b.reg.served() {
			pc, ok, err := b.Store.DefaultProviderConfig(ctx, kv.Kind)
			if err != nil {
				if ctx.Err() == nil {
					b.Log.Warn().Err(err).Str("kind", kv.Kind).Msg("read default providerconfig for push")
				}
				continue
			}
			rev := int64(0)
			if ok {
				rev = pc.UpdatedAt.UnixNano()
			}
			if prev, seen := last[kv.Kind]; seen && prev == rev {
				continue
			}
			last[kv.Kind] = rev
			push := &workerv1.ConfigPush{Kind: kv.Kind, Deleted: !ok}
			if ok {
				push.Config = configProto(pc)
			}
			b.pushConfig(ctx, kv.Kind, push)
		}
	}
}

func configProto(pc store.ProviderConfig) *workerv1.ProviderConfig {
	return &workerv1.ProviderConfig{Kind: pc.Kind, Name: pc.Name, IsDefault: pc.IsDefault,
		SpecJson: pc.Spec, DataJson: pc.Data, Revision: pc.UpdatedAt.UnixNano()}
}

// complete routes a worker's completion to the stage waiting for it, or —
// for a completion redelivered from an earlier session whose waiter is gone —
// applies it directly when it was the task's final stage (the drain fences
// it on its claim_epoch).
func (b *Broker) complete(c *workerv1.StageComplete) {
	b.mu.Lock()
	ch, ok := b.waiters[c.GetTaskId()]
	b.mu.Unlock()
	if ok {
		select {
		case ch <- c:
		default: // a duplicate redelivery; the first one won
		}
		return
	}
	id, err := parseTaskID(c.GetTaskId())
	if err != nil {
		b.Log.Warn().Err(err).Str("task_id", c.GetTaskId()).Msg("completion for an unknown task; dropped")
		return
	}
	if !id.final {
		b.Log.Debug().Str("task_id", c.GetTaskId()).Msg("orphaned mid-pipeline completion; the task re-runs after its lease lapses")
		return
	}
	res := pipeline.Result{Key: id.key, ClaimEpoch: id.epoch, Generation: id.generation}
	if e := c.GetError(); e != nil {
		res.Error, res.Terminal = e.GetMessage(), e.GetTerminal()
	} else {
		o := c.GetOutcome()
		res.Status = raw(o.GetStatusJson())
		res.HealthOK = o.HealthOk
		res.Conditions = conditions(o.GetConditions())
		res.OperationOutput = raw(o.GetOperationOutputJson())
		res.Finalizer = id.finalizer
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Pipeline.AppendOutbox(ctx, res); err != nil {
		b.Log.Warn().Err(err).Str("task_id", c.GetTaskId()).Msg("apply redelivered completion; the task re-runs")
		return
	}
	b.Log.Info().Str("task_id", c.GetTaskId()).Msg("applied a redelivered completion (fenced on its claim_epoch)")
}
