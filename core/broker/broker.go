package broker

import (
	"compress/gzip"
	"context"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/auth"
	"github.com/converge-run/converge/core/cluster"
	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/kinds"
	"github.com/converge-run/converge/core/metrics"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/lifecycle"
	"github.com/converge-run/converge/core/store/membership"
	"github.com/converge-run/converge/core/store/notify"
	"github.com/converge-run/converge/core/store/pipeline"
	"github.com/converge-run/converge/core/tlsreload"
	"github.com/converge-run/converge/workerproto/gen/converge/worker/v1/workerv1connect"
)

// Defaults of the broker duty.
const (
	// DefaultPairCap is the per-pod in-flight ceiling of one (kind, task
	// type); a leaf kind's pairs hold twice as many (pairCaps).
	DefaultPairCap = 100
	// DefaultDrain is SHUTDOWN_DRAIN: how long in-flight tasks may finish.
	DefaultDrain = 45 * time.Second
	// DefaultPollMin and DefaultPollMax bound the dispatcher's idle
	// failsafe poll (each poll is one statement probing every pair). PollMax is the
	// longest a pend whose wake was lost waits to be claimed.
	DefaultPollMin = 25 * time.Millisecond
	DefaultPollMax = time.Second
	// DefaultHeartbeatEvery is the lease heartbeat cadence.
	DefaultHeartbeatEvery = 5 * time.Second
	// DefaultMaxMessageBytes bounds one WorkerService message either way
	// (WORKER_MAX_MESSAGE_BYTES).
	DefaultMaxMessageBytes = 16 << 20
	// DefaultStreamRate paces one worker stream's messages per second.
	DefaultStreamRate = 20000
	// DefaultMaxInFlight is WORKER_MAX_IN_FLIGHT: the largest max_in_flight
	// a worker's Subscribe may ask for.
	DefaultMaxInFlight = 1024
	// DefaultRedeliveryWait is how long a stage whose worker vanished waits
	// for it to reconnect and redeliver.
	DefaultRedeliveryWait = 30 * time.Second
	// DefaultLeaseKeyRotation is how old the cluster's newest lease-secret
	// key may grow before a broker adds a fresh one (lease_keys).
	DefaultLeaseKeyRotation = 24 * time.Hour
	// DefaultLeaseKeyReload is how often a broker re-reads the lease keys.
	DefaultLeaseKeyReload = time.Minute
	// DefaultMaxDrainLag is how long the oldest result may wait in the
	// outbox before the dispatcher stops claiming anything but rollups (see
	// dispatcher.drainBehind).
	DefaultMaxDrainLag = 2 * time.Second
)

// Options tune the broker; zero values take the defaults above.
type Options struct {
	// PairCap caps one (kind, version, task type) per pod; a leaf kind's
	// pairs hold twice as many.
	PairCap int
	// Drain is the shutdown drain budget (SHUTDOWN_DRAIN).
	Drain time.Duration
	// PollMin and PollMax bound the idle claim backoff.
	PollMin, PollMax time.Duration
	// HeartbeatEvery is the lease heartbeat cadence.
	HeartbeatEvery time.Duration
	// RedeliveryWait is how long a stage whose worker vanished waits for the
	// worker to reconnect and redeliver.
	RedeliveryWait time.Duration
	// ComposeSlots bounds the composes this broker runs at once
	// (DefaultComposeSlots).
	ComposeSlots int
	// RollupSlots bounds the other reconciles of rollup kinds this broker
	// runs at once (DefaultRollupSlots).
	RollupSlots int
	// MaxMessageBytes bounds one WorkerService message read or sent
	// (requests, stream messages, relayed stages).
	MaxMessageBytes int
	// CompressMinBytes is the smallest stream message the broker gzips for
	// a worker that accepts gzip (WORKER_COMPRESS_MIN_BYTES); 0, the
	// default, compresses nothing. See compression.
	CompressMinBytes int
	// StreamRate paces the messages one worker stream may send per second
	// (burst twice that; WORKER_MAX_STREAM_RATE; 0 = DefaultStreamRate).
	StreamRate int
	// MaxInFlight is the largest max_in_flight a worker's Subscribe may ask
	// for (WORKER_MAX_IN_FLIGHT; 0 = DefaultMaxInFlight): a session's send
	// queue is sized by it, so a Subscribe above it is refused.
	MaxInFlight int
	// SilenceTimeout ends the session of a keepalive worker that sent
	// nothing for this long, re-dispatching its stages
	// (WORKER_SILENCE_TIMEOUT; 0 = DefaultSilenceTimeout).
	SilenceTimeout time.Duration
	// SessionMaxAge ends a worker's session, once its stages have finished,
	// after about this long (±10%): the worker reconnects, through the
	// Service, to any broker, so workers spread over brokers added since
	// (WORKER_SESSION_MAX_AGE; 0: never).
	SessionMaxAge time.Duration
	// LeaseKeyRotation and LeaseKeyReload: how old the newest cluster
	// lease key grows before it is rotated, and how often it is re-read.
	LeaseKeyRotation, LeaseKeyReload time.Duration
	// MaxDrainLag is the longest the oldest outbox result may wait for the
	// drain before the dispatcher claims only rollups (DefaultMaxDrainLag;
	// negative: claims never wait on the drain).
	MaxDrainLag time.Duration
}

func (o *Options) defaults() {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	if o.PairCap <= 0 {
		o.PairCap = DefaultPairCap
	}
	def(&o.Drain, DefaultDrain)
	def(&o.PollMin, DefaultPollMin)
	def(&o.PollMax, DefaultPollMax)
	def(&o.HeartbeatEvery, DefaultHeartbeatEvery)
	def(&o.RedeliveryWait, DefaultRedeliveryWait)
	def(&o.SilenceTimeout, DefaultSilenceTimeout)
	def(&o.LeaseKeyRotation, DefaultLeaseKeyRotation)
	def(&o.LeaseKeyReload, DefaultLeaseKeyReload)
	if o.MaxDrainLag == 0 {
		o.MaxDrainLag = DefaultMaxDrainLag
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.StreamRate <= 0 {
		o.StreamRate = DefaultStreamRate
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
}

// Deps are what a broker is built from.
type Deps struct {
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
	// Clock drives every loop (nil: the wall clock).
	Clock engine.Clock
	// Credentials are the worker plane's bearer tokens (nil: none); with
	// MTLS the listener also verifies client certificates. Without either
	// the WorkerService is open.
	Credentials *auth.Plane
	MTLS        bool
	// CertPolicy decides a client certificate's audience (the zero policy:
	// by its OU).
	CertPolicy auth.CertPolicy
	// ClientCerts verify a live session's client certificate again when
	// the client CA bundle changes or the certificate expires (nil: no
	// mutual TLS).
	ClientCerts *tlsreload.ClientCheck
	// Outage is the process's shared database-outage reporter (nil: every
	// error is logged by its loop).
	Outage *engine.Outage
	Options
}

// Broker is the broker duty of a pod, assembled from its services: the
// dispatcher (claim loop and drain) with its task runner and stager, the
// lease heartbeater, the config pusher, the reactor dispatcher, the mesh,
// the outbox writer, and the WorkerService handler workers dial.
type Broker struct {
	// Options may be changed until Duties or Handler is first called.
	Options
	// OnServedChange is called when the kinds this broker's workers serve
	// ready, or the number of its workers, change (the member reporter's
	// Kick: peers route stages by the kinds the membership row advertises,
	// and spread the workers by its count). Set before Duties.
	OnServedChange func()

	deps  Deps
	clock engine.Clock
	log   zerolog.Logger

	reg         *registry
	mesh        *Mesh
	tasks       *inflight
	completions *completions
	leases      *leaseKeys

	once     sync.Once
	handler  *workerService
	disp     *dispatcher
	beats    *heartbeater
	pushes   *configPusher
	reactors *reactorDispatcher
	out      *outboxWriter
	// endSessions ends the workers' sessions once the drain has ended
	// (workerService.closing).
	endSessions func()
	// cutRelays ends the stages peers relayed here that are still running
	// when the drain budget is spent (workerService.relaysCut).
	cutRelays context.CancelFunc
}

// New returns a broker over deps; mount Handler on the listener workers dial
// and run Duties on the pod's engine.
func New(d Deps) *Broker {
	if d.Metrics == nil {
		d.Metrics = metrics.New()
	}
	if d.Clock == nil {
		d.Clock = engine.RealClock
	}
	b := &Broker{Options: d.Options, deps: d, clock: d.Clock,
		log: d.Log.With().Str("component", "broker").Str("broker_id", d.ID).Logger()}
	b.reg = newRegistry(b.log)
	b.mesh = newMesh(d.ID, b.reg.notifyRoutes, b.log)
	b.tasks = newInflight()
	// The redelivered results a worker's session hands over are batched
	// with the broker's own: the session's receive loop never waits for
	// the database.
	b.out = newOutboxWriter(d.Pipeline.AppendOutbox)
	b.completions = newCompletions(b.out, b.log)
	b.completions.outage = d.Outage
	b.leases = newLeaseKeys(d.Credentials)
	return b
}

// assemble builds the services from the options as they stand.
func (b *Broker) assemble() {
	b.once.Do(func() {
		b.defaults()
		d := b.deps
		b.leases.every, b.leases.log, b.leases.outage = b.LeaseKeyReload, b.log, d.Outage
		if d.Store != nil {
			rotate := b.LeaseKeyRotation
			b.leases.source = func(ctx context.Context) ([][]byte, error) { return d.Store.LeaseKeys(ctx, rotate) }
		}
		kinds := cacheKinds{d.Kinds}
		wakes := listenerWaker{d.Listener}
		rt := &routes{reg: b.reg, mesh: b.mesh, kinds: kinds}
		draining, closing := make(chan struct{}), make(chan struct{})
		relaysCut, cutRelays := context.WithCancel(context.Background())
		b.cutRelays = cutRelays
		b.endSessions = sync.OnceFunc(func() {
			b.reg.closeRouting()
			close(closing)
		})
		stg := &stager{id: d.ID, reg: b.reg, mesh: b.mesh, completions: b.completions, leases: b.leases, clock: b.clock, log: b.log,
			redeliveryWait: b.RedeliveryWait, draining: draining, outage: d.Outage}
		if d.Pipeline != nil {
			stg.attempts = d.Pipeline
		}
		run := &runner{store: taskStores{d.Store, d.Pipeline}, stages: stg, outbox: b.out, kinds: kinds,
			metrics: d.Metrics, clock: b.clock, log: b.log, composes: newTaskSlots(b.ComposeSlots, DefaultComposeSlots),
			rollups: newTaskSlots(b.RollupSlots, DefaultRollupSlots()), outage: d.Outage}
		b.disp = &dispatcher{id: d.ID, claims: d.Pipeline, routes: rt, shards: d.Shards, tasks: b.tasks, runner: run,
			wakes: wakes, metrics: d.Metrics, clock: b.clock, log: b.log, outage: d.Outage,
			caps: pairCaps{base: b.PairCap, kinds: kinds}, maxDrainLag: b.MaxDrainLag,
			pollMin: b.PollMin, pollMax: b.PollMax, drain: b.Drain, beginDrain: sync.OnceFunc(func() { close(draining) }),
			rollupBound: rollupBounds{kinds: kinds, rollupSlots: run.rollups.n}.bound}
		b.beats = &heartbeater{id: d.ID, leases: d.Pipeline, tasks: b.tasks, every: b.HeartbeatEvery, clock: b.clock, log: b.log,
			outage: d.Outage}
		b.pushes = &configPusher{configs: d.Store, targets: b.reg, wakes: wakes, failsafe: configFailsafe,
			clock: b.clock, outage: d.Outage, log: b.log}
		if d.Lifecycle != nil {
			b.reactors = &reactorDispatcher{id: d.ID, deliveries: d.Lifecycle, routes: rt, sender: stg, kinds: kinds,
				shards: d.Shards, wakes: wakes, freed: b.tasks.signal, cap: b.PairCap, pollMin: b.PollMin,
				every: b.HeartbeatEvery, drain: b.Drain, clock: b.clock, log: b.log, outage: d.Outage}
		}
		b.handler = &workerService{id: d.ID, reg: b.reg, kinds: kinds, configs: d.Store, completions: b.completions,
			stages: stg, relays: b.tasks, leases: b.leases, streamRate: b.StreamRate, maxMessageBytes: b.MaxMessageBytes, maxInFlight: b.MaxInFlight, silence: b.SilenceTimeout, maxAge: b.SessionMaxAge,
			closing: closing, relaysCut: relaysCut, metrics: d.Metrics, outage: d.Outage, creds: d.Credentials, certs: d.ClientCerts, log: b.log}
		if d.Pipeline != nil {
			b.handler.adopt = &adoptions{id: d.ID, store: d.Pipeline, tasks: b.tasks, leases: b.leases, log: b.log}
			b.completions.written = b.handler.adopt.done
		}
		b.mesh.clientOpts = []connect.ClientOption{connect.WithInterceptors(meshCredential{d.Credentials}),
			connect.WithReadMaxBytes(b.MaxMessageBytes), connect.WithSendMaxBytes(b.MaxMessageBytes)}
	})
}

// fastGzip replaces the handler's gzip compressor with one at
// gzip.BestSpeed: the messages worth compressing (a rollup's subtree, a
// composite's children) are JSON-heavy, and the default level spent about 4%
// of the broker's CPU in a 100k-leaf run on them for a few percent of size.
// The wire format is plain gzip, so every client decodes it unchanged.
//
// Connect keeps its compressors in a sync.Pool, which every GC empties: a
// BestSpeed writer is about 1 MB of tables, so the broker allocated one per
// rollup-sized message (7% of its allocation in a 100k run) and the churn
// paced its GCs. The writers themselves live in gzipWriters instead, a
// bounded free list the GC leaves alone; what Connect pools is a light
// handle that borrows one for a message (Reset … Close).
func fastGzip() connect.HandlerOption {
	return connect.WithCompression("gzip",
		func() connect.Decompressor { return &gzip.Reader{} },
		gzipWriters.compressor)
}

// gzipWriters holds the broker's idle BestSpeed writers: as many as
// messages are compressed at once in steady state, a handful.
var gzipWriters = &gzipPool{free: make(chan *gzip.Writer, 8)}

// gzipPool is a bounded free list of BestSpeed gzip writers.
type gzipPool struct{ free chan *gzip.Writer }

func (gp *gzipPool) compressor() connect.Compressor { return &pooledGzip{pool: gp} }

// pooledGzip is a connect.Compressor borrowing a writer from its pool
// from its first Write until Close. Connect calls Reset(dst), Write, Close
// and then Reset(io.Discard) before pooling the handle, so the handle never
// holds a writer between messages.
type pooledGzip struct {
	pool *gzipPool
	dst  io.Writer
	w    *gzip.Writer
}

func (p *pooledGzip) Reset(dst io.Writer) {
	p.release() // a message abandoned before Close: its writer is reset on reuse
	p.dst = dst
}

func (p *pooledGzip) Write(b []byte) (int, error) {
	p.borrow()
	return p.w.Write(b)
}

// Close finishes the message (an empty one too, as gzip.Writer would) and
// returns the writer to the free list.
func (p *pooledGzip) Close() error {
	p.borrow()
	err := p.w.Close()
	p.release()
	return err
}

func (p *pooledGzip) borrow() {
	if p.w != nil {
		return
	}
	if p.dst == nil {
		p.dst = io.Discard
	}
	select {
	case p.w = <-p.pool.free:
		p.w.Reset(p.dst)
	default:
		p.w, _ = gzip.NewWriterLevel(p.dst, gzip.BestSpeed) // BestSpeed is a valid level: no error
	}
}

func (p *pooledGzip) release() {
	if p.w == nil {
		return
	}
	select {
	case p.pool.free <- p.w:
	default: // the list is full: let this one go
	}
	p.w = nil
}

// compression is the WorkerService handler's gzip: stream messages of at
// least minBytes go out gzipped at BestSpeed to a worker that accepts gzip;
// with minBytes 0 none do. A gzipped request is read either way.
//
// Off is the default because a broker's scarce resource is its CPU, not the
// bandwidth to its workers, which run beside it in the cluster. The messages
// big enough to be worth compressing are a rollup's subtree and a provider
// config bundle: gzip cost 2% of converge's CPU in a 200k-leaf run, and
// each writer in use holds about 1 MB of tables: converge's RSS was 1–4 MB
// lower (peak, mean and end) in 200k and 1M runs without it. A
// stage or an ack is a few hundred bytes, which gzip never pays for (its
// per-message reset and tables were 45% of converge's CPU at 30k leaves when
// everything was compressed). Workers across a slow link are what the
// setting is for.
func compression(minBytes int) []connect.HandlerOption {
	if minBytes <= 0 {
		minBytes = math.MaxInt
	}
	return []connect.HandlerOption{connect.WithCompressMinBytes(minBytes), fastGzip()}
}

// Handler is the Connect WorkerService to mount on the broker listener:
// authenticated (see planeAuth) and bounded to MaxMessageBytes per message.
func (b *Broker) Handler() (string, http.Handler) {
	b.assemble()
	pa := &planeAuth{creds: b.deps.Credentials, mtls: b.deps.MTLS, log: b.log}
	opts := append([]connect.HandlerOption{connect.WithInterceptors(pa),
		connect.WithReadMaxBytes(b.MaxMessageBytes), connect.WithSendMaxBytes(b.MaxMessageBytes)},
		compression(b.CompressMinBytes)...)
	path, h := workerv1connect.NewWorkerServiceHandler(b.handler, opts...)
	return path, withStreamAbort(withCertificate(b.deps.CertPolicy, h))
}

// Duties are the broker's long-running parts for the pod's engine: the
// broker proper (the dispatcher, with the heartbeater, config pusher and
// outbox writer kept running until its drain ends) and, with a lifecycle
// store, the reactor dispatcher.
func (b *Broker) Duties() []engine.Duty {
	b.assemble()
	out := []engine.Duty{engine.Func{N: "broker", F: b.run}}
	if b.reactors != nil {
		out = append(out, b.reactors)
	}
	if b.SessionMaxAge > 0 {
		// Ending sessions is allowed (WORKER_SESSION_MAX_AGE is not 0), so
		// they are ended to spread the workers too.
		out = append(out, &spreader{reg: b.reg, peers: b.mesh.peerWorkers, clock: b.clock, log: b.log,
			cooldown: spreadCooldown, settle: spreadSettle, pace: servedPace})
	}
	if b.OnServedChange != nil {
		out = append(out, engine.Func{N: "served-kinds", F: func(ctx context.Context) error {
			b.watchServed(ctx, b.OnServedChange, servedPace)
			return nil
		}})
	}
	return out
}

// servedPace spaces watchServed's comparisons: a flapping worker's
// readiness changes the routes at most once a pace for its listeners.
const servedPace = 100 * time.Millisecond

// watchServed calls onChange once at start and then whenever the served
// kinds or the number of workers differ from the last call's, comparing at
// most once per pace, until ctx ends. The change channel is taken before
// each comparison, so a change that lands while one is made, or during the
// pace, is seen by the next.
func (b *Broker) watchServed(ctx context.Context, onChange func(), pace time.Duration) {
	last := "\x00" // no set of kinds joins to this: the first comparison differs
	for {
		ch := b.reg.routesChanged()
		if cur := strings.Join(b.Served(), ",") + "|" + strconv.Itoa(b.reg.workers()); cur != last {
			last = cur
			onChange()
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pace):
		}
	}
}

// run claims and dispatches until ctx ends, then drains: in-flight tasks get
// up to Drain to finish (the Connect handler must stay mounted meanwhile so
// their completions land, and their leases stay heartbeated and their
// results written); stragglers' leases are released for fast re-claim.
func (b *Broker) run(ctx context.Context) error {
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	// The cluster's lease key before the first dispatch, so the secrets
	// handed out verify on every member (unreachable: the process's own key
	// issues until the next read).
	lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
	if err := b.leases.load(lctx); err != nil && ctx.Err() == nil { // a shutdown during start is no failure
		b.log.Warn().Err(err).Msg("read the cluster lease keys; issuing with this process's own key until they are read")
	}
	lcancel()
	var wg sync.WaitGroup
	for _, s := range []engine.Duty{b.out, b.beats, b.pushes, b.leases} {
		wg.Go(func() { _ = s.Run(bg) })
	}
	began := make(chan time.Time, 1)
	stopMark := context.AfterFunc(ctx, func() { began <- b.clock.Now() })
	err := b.disp.Run(ctx)
	if stopMark() { // the dispatcher ended before the shutdown
		began <- b.clock.Now()
	}
	// Drained: every task's result is written or its lease released, so the
	// workers' sessions end now, and the workers move to another broker —
	// each once the stages peers relayed to it have finished, within what
	// is left of the drain budget.
	b.endSessions()
	b.awaitRelays(<-began)
	cancel()
	wg.Wait()
	return err
}

// awaitRelays waits for the stages peers relayed to this broker's workers
// to finish, until the drain budget counted from began is spent; then it
// ends those still running (logged once): each peer hears Unavailable and
// dispatches its stage again, and the sessions they held end. The stages
// are the peers', which outlive this broker's own drain, but the process
// leaves within SHUTDOWN_DRAIN: the listener's shutdown grace is not a
// second budget.
func (b *Broker) awaitRelays(began time.Time) {
	spent := b.clock.After(b.Drain - b.clock.Now().Sub(began))
	for {
		n := b.tasks.relaying()
		if n == 0 {
			return
		}
		select {
		case <-b.tasks.done:
		case <-spent:
			b.log.Warn().Int("relayed", n).Dur("budget", b.Drain).
				Msg("drain budget spent with relayed stages still running; handing them back to their peers")
			b.cutRelays()
			return
		}
	}
}

// InFlight is the number of tasks this broker runs now (for membership).
func (b *Broker) InFlight() int { return b.tasks.count() }

// Workers is the number of worker sessions this broker serves, less those
// ending (for membership: its peers spread the workers by it).
func (b *Broker) Workers() int { return b.reg.workers() }

// Served lists the (kind, version) pairs connected workers serve ready.
func (b *Broker) Served() []string {
	var out []string
	for _, kv := range b.reg.served() {
		out = append(out, kv.String())
	}
	return out
}

// Mesh returns the broker's mesh reactor (register it with the topology
// watcher so joins, leaves and crashes re-route within one liveness window).
func (b *Broker) Mesh(members *membership.Store, liveness time.Duration) *Mesh {
	b.mesh.Members, b.mesh.Liveness = members, liveness
	return b.mesh
}

// taskStores joins the store reads and pipeline writes a task runner needs.
type taskStores struct {
	s *store.Store
	p *pipeline.Store
}

func (t taskStores) SubtreeSettled(ctx context.Context, root uuid.UUID) (bool, error) {
	return t.s.SubtreeSettled(ctx, root)
}

func (t taskStores) WalkComposedSubtree(ctx context.Context, root uuid.UUID, withStatus bool, visit func(store.SubtreeNode)) (bool, error) {
	return t.s.WalkComposedSubtree(ctx, root, withStatus, visit)
}

func (t taskStores) OperationForTask(ctx context.Context, id uuid.UUID) (resource.Operation, error) {
	return t.s.OperationForTask(ctx, id)
}

func (t taskStores) ApplyCompose(ctx context.Context, task pipeline.Task, c pipeline.Composition) (pipeline.ComposeResult, error) {
	return t.p.ApplyCompose(ctx, task, c)
}

func (t taskStores) Release(ctx context.Context, l pipeline.Lease, keys []pipeline.TaskKey) (int, error) {
	return t.p.Release(ctx, l, keys)
}
