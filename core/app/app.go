// Package app is the converge process: it turns a Config into pools, stores,
// duties and listeners, runs them through one engine, and shuts down in the
// order the spec requires — duties drain first (the broker waits for its
// workers' completions while its Connect listener is still open), then the
// listeners close, and the member deregisters last.
package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/auth"
	"github.com/converge-run/converge/core/broker"
	"github.com/converge-run/converge/core/cluster"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/control"
	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/kinds"
	"github.com/converge-run/converge/core/metrics"
	"github.com/converge-run/converge/core/server"
	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/lifecycle"
	"github.com/converge-run/converge/core/store/maintenance"
	"github.com/converge-run/converge/core/store/membership"
	"github.com/converge-run/converge/core/store/notify"
	"github.com/converge-run/converge/core/store/pipeline"
	"github.com/converge-run/converge/core/tlsreload"
)

// Mount lets the caller add handlers (GraphQL, dashboard) to the main mux.
type Mount func(mux *http.ServeMux, p *Process) error

// Process is a running converge process's parts.
type Process struct {
	Config   config.Config
	Log      zerolog.Logger
	Primary  *pgxpool.Pool
	Read     *pgxpool.Pool
	Store    *store.Store
	Pipeline *pipeline.Store
	Members  *membership.Store
	Listener *notify.Listener
	Kinds    *kinds.Cache
	Metrics  *metrics.Metrics
	Broker   *broker.Broker // nil without the broker duty
	Shards   *cluster.ShardSet
	MemberID string
	// Plane holds the worker plane's bearer tokens (nil without token files).
	Plane *auth.Plane
	// ClientCerts verify a client certificate again after its handshake
	// (nil without mutual TLS): what outlives a request (an API websocket,
	// a worker's session) ends once its certificate no longer verifies.
	ClientCerts *tlsreload.ClientCheck
	// Outage is the process's one database-outage reporter, shared by every
	// loop (one WARN when the database goes, one INFO when it returns).
	Outage *engine.Outage

	lock     *cluster.LivenessLock
	draining atomic.Bool // the shutdown has begun (/readyz)
	mu       sync.Mutex
	addrs    map[string]net.Addr
	ready    chan struct{}
	extras   []engine.Duty
	onDrain  []func()
}

// AddDuty adds a duty (for instance the GraphQL subscription hub) to the
// engine; call it from a Mount, before the engine starts.
func (p *Process) AddDuty(d engine.Duty) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.extras = append(p.extras, d)
}

// OnDrain registers f to be called once, when the shutdown begins (the
// moment /readyz turns to draining and the duties start to drain), before
// the listeners close; for instance the API's websockets, whose hub stops
// with the duties. Call it from a Mount; f must not block.
func (p *Process) OnDrain(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.onDrain = append(p.onDrain, f)
}

// drain marks the process draining and runs the OnDrain hooks.
func (p *Process) drain() {
	p.draining.Store(true)
	p.mu.Lock()
	hooks := p.onDrain
	p.mu.Unlock()
	for _, f := range hooks {
		f()
	}
}

// Addr is the bound address of a listener ("api", "health", "broker"), once
// it is listening.
func (p *Process) Addr(name string) net.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addrs[name]
}

// Ready is closed once every listener is bound and the member registered.
func (p *Process) Ready() <-chan struct{} { return p.ready }

// Options are the process's extension points.
type Options struct {
	// Mounts add handlers to the main API mux.
	Mounts []Mount
	// OnStart is called with the process once it is ready (tests, devstack).
	OnStart func(*Process)
	// Tune lets tests shorten cadences (heartbeats, polls) before start.
	Tune func(*Process, *Duties)
	// Exit ends the process when an admin kills this member (default
	// os.Exit); it is called with KilledExitCode and must not return.
	Exit func(code int)
}

// KilledExitCode is the exit status of a member an admin killed
// (killClusterMember): 128 + SIGKILL, what a crashed process reports.
const KilledExitCode = 137

// Duties are the engine's parts, exposed so Options.Tune can adjust them.
type Duties struct {
	Reporter *cluster.Reporter
	Watcher  *cluster.TopologyWatcher
	Lock     *cluster.LivenessLock // checked beside the engine, until deregistration
	Probe    *cluster.DeadMemberProbe
	Drainer  *control.Drainer
	Reaper   *control.Reaper
	Resyncer *control.Resyncer
	MemberGC *control.MemberGC
	Folder   *control.CountFolder
	// Statistics re-analyzes fleet tables analyzed while empty.
	Statistics *control.StatisticsGuard
	Events     *control.EventPruner
	// Control acts on an admin's drain or kill request on this member's
	// row; it runs beside the engine, so a kill lands during a drain.
	Control *cluster.ControlWatcher
}

// Run runs the process until ctx ends, then shuts down in order.
func Run(ctx context.Context, cfg config.Config, log zerolog.Logger, opts Options) error {
	// The member id names the pools' sessions (pgpool.NameSessions), so it
	// is chosen before they open.
	memberID := cluster.NewMemberID(string(cfg.Role))
	primary, read, err := boot(ctx, cfg, memberID, log)
	if err != nil {
		return err
	}
	var teardownBy time.Time // set as the deregistration starts
	defer func() { closePools(log, primary, read, teardownBy) }()
	p := newProcess(cfg, log, memberID, primary, read)
	var tlsR *tlsreload.Reloader
	if cfg.Secure() {
		if tlsR, err = tlsreload.New(tlsreload.Files{CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile, CAFile: cfg.TLSClientCAFile},
			cfg.TLSReload, log); err != nil {
			return err
		}
	}
	p.ClientCerts = tlsR.ClientCheck()
	if p.Plane, err = planeCredentials(cfg, log); err != nil {
		return err
	}
	d := p.duties(tlsR)
	if opts.Tune != nil {
		opts.Tune(p, d)
	}
	// The liveness lock is held before the member registers and released
	// after it deregisters. Its checks run beside the engine, not in it, on
	// a context that outlives the drain: a lock session left unchecked is
	// idle, and peers take an idle lock session for a dead member's after
	// 3 s (reap_unlocked_cluster_members) and free its leases — while a
	// draining broker's tasks still run for up to SHUTDOWN_DRAIN, and a peer
	// would claim and run them again.
	if err := d.Lock.Take(ctx); err != nil {
		return fmt.Errorf("take the member's liveness lock: %w", err)
	}
	defer d.Lock.Release()
	lockCtx, stopLock := context.WithCancel(context.WithoutCancel(ctx))
	lockDone := make(chan struct{})
	go func() {
		defer close(lockDone)
		_ = d.Lock.Run(lockCtx) // returns nil when lockCtx ends
	}()
	defer func() { stopLock(); <-lockDone }() // before Release: deferred later, run first

	// Listeners run on their own context: they close only after the duties
	// have drained.
	srvCtx, stopServers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServers()
	var srvWG sync.WaitGroup
	srvErr, err := p.startServers(srvCtx, &srvWG, tlsR, opts)
	if err != nil {
		return err
	}

	if p.Broker != nil {
		// Peers relay stages to this broker at its advertised URL.
		d.Reporter.Config = withBrokerURL(d.Reporter.Config, p.advertisedBrokerURL())
	}
	eng := p.engine(d, tlsR)
	engCtx, stopEngine := context.WithCancel(ctx)
	defer stopEngine()
	// A duty that fails fatally ends engCtx as a signal does, so the
	// shutdown below — /readyz draining, the member marked leaving — begins
	// as the other duties start to drain, not after them.
	eng.OnFatal(func(error) { stopEngine() })
	// However the shutdown begins (SIGTERM, an admin's drain, a listener or
	// a duty that failed), /readyz says so from its first moment.
	stopDraining := context.AfterFunc(engCtx, p.drain)
	defer stopDraining()
	// Its peers take its shards as the shutdown begins, not when it
	// deregisters after the drain.
	leaveDone := p.leaveOnShutdown(engCtx)
	ctlDone := p.watchControl(srvCtx, d.Control, stopEngine, opts.Exit)
	engErr := make(chan error, 1)
	go func() { engErr <- eng.Run(engCtx) }()
	go p.announceReady(engCtx, d.Reporter, opts)

	var runErr error
	select {
	case runErr = <-engErr:
	case runErr = <-srvErr:
		stopEngine()
		<-engErr //nolint:errcheck // the server's error is the one to report
	}
	// Duties have drained; now close the listeners, then deregister last.
	stopServers()
	srvWG.Wait()
	<-ctlDone
	leaveDone()
	teardownBy = time.Now().Add(TeardownWithin)
	d.Reporter.Deregister()
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		return runErr
	}
	return nil
}

// leaveOnShutdown marks this member leaving (membership.Store.Leave) once
// ctx ends, beside the drain: a member that stops claiming while its row
// still counts as live leaves its shards unclaimed by anyone until it
// deregisters, after a drain of up to SHUTDOWN_DRAIN, or until its last
// beat ages past the liveness window. The returned func ends the mark
// (cancelled if it has not landed: the deregistration that follows wakes
// the peers too) and waits for it; it does nothing when ctx never ended
// (every duty returned with no shutdown begun).
func (p *Process) leaveOnShutdown(ctx context.Context) (wait func()) {
	markCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(done)
		marked, err := p.Members.Leave(markCtx, p.MemberID)
		switch {
		case err != nil && markCtx.Err() == nil:
			p.Log.Warn().Err(err).Str("member_id", p.MemberID).
				Msg("marking this member leaving failed; its peers take its shards when it deregisters")
		case marked:
			p.Log.Info().Str("member_id", p.MemberID).
				Msg("shutting down: stopped claiming; the peers re-tile this member's shards while it drains")
		}
	})
	return func() {
		cancel()
		if !stop() {
			<-done
		}
	}
}

// TeardownWithin bounds the last steps of a shutdown together: the member's
// deregistration (its own 5 s budget) and closing the database pools.
// Against a database that answers they take milliseconds; against one that
// does not (frozen, or cut off by a partition that drops packets) the
// deregistration gives up at the end of the budget and the pools are not
// waited for past it: the driver would wait out its abandoned pings and
// cancel requests, over a minute, and exiting closes the connections anyway.
const TeardownWithin = 5 * time.Second

// closePools closes the pools (read may be primary), waiting until by at
// the latest (zero: TeardownWithin from now).
func closePools(log zerolog.Logger, primary, read *pgxpool.Pool, by time.Time) {
	if by.IsZero() {
		by = time.Now().Add(TeardownWithin)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if read != primary {
			read.Close()
		}
		primary.Close()
	}()
	t := time.NewTimer(time.Until(by))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		log.Warn().Msg("database connections still closing (the database does not answer); exiting without them")
	}
}

// ConnectTimeout bounds what boot does to reach the database: loading the
// IAM credentials and opening the pools. The migrations between them are not
// under it: a pod waits for another pod's migration as long as the runner
// allows (migrate.LockWait), and a migration runs as long as it takes (until
// shutdown), so a large index built CONCURRENTLY is not cancelled half-way.
const ConnectTimeout = 2 * time.Minute

// boot authenticates, migrates and opens the pools (read is primary without
// DATABASE_READ_URL), their sessions named after memberID.
func boot(ctx context.Context, cfg config.Config, memberID string, log zerolog.Logger) (primary, read *pgxpool.Pool, err error) {
	authCtx, cancelAuth := context.WithTimeout(ctx, ConnectTimeout)
	hook, err := AuthHook(authCtx, cfg, log)
	cancelAuth()
	if err != nil {
		return nil, nil, err
	}
	if err := migrateAtBoot(ctx, cfg, hook, log); err != nil {
		return nil, nil, err
	}
	bootCtx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	if primary, err = openPool(bootCtx, cfg.DatabaseURL, 40, memberID, hook); err != nil {
		return nil, nil, fmt.Errorf("open primary pool: %w", err)
	}
	if cfg.DatabaseReadURL == "" {
		return primary, primary, nil
	}
	if read, err = openPool(bootCtx, cfg.DatabaseReadURL, 20, memberID, hook); err != nil {
		primary.Close()
		return nil, nil, fmt.Errorf("open read pool: %w", err)
	}
	return primary, read, nil
}

// newProcess builds the process's stores, caches and metrics.
func newProcess(cfg config.Config, log zerolog.Logger, memberID string, primary, read *pgxpool.Pool) *Process {
	p := &Process{Config: cfg, Log: log, Primary: primary, Read: read, addrs: map[string]net.Addr{}, ready: make(chan struct{})}
	p.Store = store.New(primary, read)
	p.Pipeline = pipeline.New(primary)
	p.Members = membership.New(primary)
	p.Listener = notify.NewListener(primary, log)
	// The kinds the broker claims by are read from the primary: a replica
	// (DATABASE_READ_URL, for the UI's and the API's reads) may not have
	// replayed the manifest whose NOTIFY woke the reload yet.
	p.Kinds = kinds.New(p.Store.PrimaryReads(), p.Listener, 30*time.Second, log)
	p.Metrics = metrics.New()
	p.MemberID = memberID
	p.Shards = cluster.NewShardSet(shard.Range{})
	p.Outage = &engine.Outage{Log: log}
	p.Listener.ReportTo(p.Outage)
	p.Metrics.RegisterQueueDepth(func(ctx context.Context) (map[[2]string]float64, error) {
		return p.Store.QueueDepth(ctx)
	}, 10*time.Second)
	return p
}

// duties builds the membership duties, the control bundle and the broker
// the role asks for.
func (p *Process) duties(tlsR *tlsreload.Reloader) *Duties {
	cfg, log := p.Config, p.Log
	d := &Duties{}
	d.Lock = p.livenessLock()
	liveness := 3 * cfg.HeartbeatEvery // the peers' judgement of a member's beats
	d.Reporter = &cluster.Reporter{Registry: p.Members, ID: p.MemberID, Role: string(cfg.Role), Version: cfg.Version,
		Config: cfg.Redacted(), Every: cfg.HeartbeatEvery, Liveness: liveness, Shards: p.Shards, Lock: d.Lock,
		Outage: p.Outage, Log: log}
	d.Watcher = &cluster.TopologyWatcher{Listener: p.Listener, Poll: cfg.HeartbeatEvery, Log: log, Outage: p.Outage,
		Reactors: []cluster.Reactor{&cluster.Resharder{Registry: p.Members, MemberID: p.MemberID, Shards: p.Shards,
			Liveness: liveness, OnChange: d.Reporter.Kick, Held: d.Lock.Held, Log: log}}}
	// Losing the lock stops claiming at once; holding it again re-registers
	// (peers may have removed the row) and re-tiles.
	d.Lock.OnLost = func() { p.Shards.Set(shard.Range{}) }
	d.Lock.OnHeld = func() { d.Reporter.Rejoin(); d.Watcher.Kick() }
	d.Reporter.OnRegistered = d.Watcher.Kick
	d.Probe = &cluster.DeadMemberProbe{ID: p.MemberID, Registry: p.Members, Held: d.Lock.Settled, Key: d.Lock.Key, Outage: p.Outage, Log: log}
	d.Control = &cluster.ControlWatcher{Registry: p.Members, ID: p.MemberID, Listener: p.Listener, Log: log}
	p.lock = d.Lock
	if cfg.HasControl() {
		maint := maintenance.New(p.Primary)
		d.Drainer = &control.Drainer{Pipeline: p.Pipeline, Listener: p.Listener, Shards: p.Shards, Metrics: p.Metrics, Log: log,
			Outage: p.Outage}
		d.Reaper = &control.Reaper{Maintenance: maint, Shards: p.Shards, Log: log, UnclaimedAfter: cfg.UnclaimedAfter, Outage: p.Outage}
		d.Resyncer = &control.Resyncer{Maintenance: maint, Kinds: p.Kinds, Shards: p.Shards, Log: log, Outage: p.Outage}
		d.MemberGC = &control.MemberGC{Members: p.Members, Log: log, Outage: p.Outage}
		d.Folder = &control.CountFolder{Fold: p.Store.FoldPhaseCounts, Log: log, Outage: p.Outage}
		d.Statistics = &control.StatisticsGuard{Analyze: func(ctx context.Context) ([]string, error) {
			return p.Store.AnalyzeUndersized(ctx, store.UndersizedMinRows)
		}, Log: log, Outage: p.Outage}
		d.Events = &control.EventPruner{Prune: maint.PruneEvents, Retention: cfg.EventRetention, Log: log, Outage: p.Outage}
	}
	if cfg.HasBroker() {
		p.Broker = broker.New(broker.Deps{ID: p.MemberID, Pipeline: p.Pipeline, Store: p.Store, Kinds: p.Kinds, Listener: p.Listener,
			Lifecycle: lifecycle.New(p.Primary),
			Shards:    p.Shards, Metrics: p.Metrics, Log: log, Credentials: p.Plane, MTLS: cfg.TLSClientCAFile != "", CertPolicy: cfg.CertPolicy(), ClientCerts: p.ClientCerts, Outage: p.Outage,
			Options: broker.Options{Drain: cfg.ShutdownDrain, MaxMessageBytes: cfg.WorkerMaxMsg, StreamRate: cfg.WorkerRate,
				CompressMinBytes: cfg.WorkerCompress, MaxInFlight: cfg.WorkerMaxInFlight,
				RedeliveryWait: cfg.RedeliveryWait, SilenceTimeout: cfg.WorkerSilence, SessionMaxAge: cfg.WorkerSessionMaxAge}})
		d.Reporter.Kinds = p.Broker.Served
		d.Reporter.InFlight = p.Broker.InFlight
		d.Reporter.Workers = p.Broker.Workers
		// A worker that connects, leaves or changes readiness is on the
		// membership row at once, not at the next beat: a peer re-dispatching
		// a dead worker's stages looks for a broker serving the kind there.
		p.Broker.OnServedChange = d.Reporter.Kick
		mesh := p.Broker.Mesh(p.Members, 3*cfg.HeartbeatEvery)
		if tlsR != nil {
			// Peers are reached with this pod's own keypair (mTLS) and the
			// client CA bundle as the trust root.
			mesh.TLS = tlsR.ClientConfig()
		}
		d.Watcher.Reactors = append(d.Watcher.Reactors, mesh)
	}
	return d
}

// watchControl runs the control watcher on ctx (the listeners' context, which
// outlives the drain) and returns a channel closed when it has stopped. A
// drain stops claiming at once (the peers already re-tiled the member's
// shards) and shuts down as SIGTERM does; a kill exits at once.
func (p *Process) watchControl(ctx context.Context, w *cluster.ControlWatcher, drain context.CancelFunc,
	exit func(int)) <-chan struct{} {
	if exit == nil {
		exit = os.Exit
	}
	w.OnDrain = func(membership.Request) {
		p.Shards.Set(shard.Range{})
		drain()
	}
	w.OnKill = func(membership.Request) { exit(KilledExitCode) }
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	return done
}

// livenessLock is the member's session advisory lock, on a connection taken
// out of the primary pool.
func (p *Process) livenessLock() *cluster.LivenessLock {
	return &cluster.LivenessLock{Log: p.Log, Acquire: func(ctx context.Context, key int32) (cluster.LockSession, error) {
		return membership.AcquireSessionLock(ctx, p.Primary, p.MemberID, key)
	}}
}

// startServers starts the role's listeners on ctx and waits until each is
// bound; a listener that fails later reports on the returned channel.
func (p *Process) startServers(ctx context.Context, wg *sync.WaitGroup, tlsR *tlsreload.Reloader, opts Options) (<-chan error, error) {
	servers, err := p.servers(p.Config, tlsR, opts)
	if err != nil {
		return nil, err
	}
	srvErr := make(chan error, len(servers))
	for name, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Run(ctx); err != nil {
				srvErr <- err
			}
		}()
		select {
		case a := <-s.Bound():
			p.mu.Lock()
			p.addrs[name] = a
			p.mu.Unlock()
		case err := <-srvErr:
			return nil, err
		}
	}
	return srvErr, nil
}

// engine assembles the duties into one engine, in start order.
func (p *Process) engine(d *Duties, tlsR *tlsreload.Reloader) *engine.Engine {
	eng := engine.New(p.Log, p.Listener, p.Kinds, d.Reporter, d.Watcher, d.Probe)
	if p.Config.HasControl() {
		eng.Add(d.Drainer, d.Reaper, d.Resyncer, d.MemberGC, d.Folder, d.Statistics, d.Events)
	}
	if p.Broker != nil {
		eng.Add(p.Broker.Duties()...)
	}
	if tlsR != nil {
		eng.Add(tlsR)
	}
	if p.Plane != nil {
		eng.Add(p.Plane)
	}
	p.mu.Lock()
	eng.Add(p.extras...)
	p.mu.Unlock()
	return eng
}

// announceReady closes Ready and calls OnStart once the member's first
// heartbeat landed.
func (p *Process) announceReady(ctx context.Context, r *cluster.Reporter, opts Options) {
	select {
	case <-r.Beaten():
		close(p.ready)
		p.Log.Info().Str("member_id", p.MemberID).Str("role", string(p.Config.Role)).Str("version", p.Config.Version).Msg("converge ready")
		if opts.OnStart != nil {
			opts.OnStart(p)
		}
	case <-ctx.Done():
	}
}

// servers builds the listeners the role needs.
func (p *Process) servers(cfg config.Config, tlsR *tlsreload.Reloader, opts Options) (map[string]*server.Server, error) {
	out := map[string]*server.Server{}
	var mainTLS = tlsOf(tlsR)
	ping := p.readiness
	if cfg.HasControl() {
		api := server.New("api", cfg.ListenHostPort(), mainTLS, p.Log)
		api.ShutdownGrace = 10 * time.Second
		server.Probes(api.Mux, ping)
		api.Mux.Handle("GET /metrics", p.Metrics.Handler())
		for _, m := range opts.Mounts {
			if err := m(api.Mux, p); err != nil {
				return nil, err
			}
		}
		if p.Broker != nil && cfg.BrokerAddr == "" {
			path, h := p.Broker.Handler()
			api.Mux.Handle(path, h)
		}
		out["api"] = api
	} else {
		health := server.New("health", cfg.HealthAddr, nil, p.Log)
		server.Probes(health.Mux, ping)
		health.Mux.Handle("GET /metrics", p.Metrics.Handler())
		out["health"] = health
		if cfg.BrokerAddr == "" {
			b := server.New("broker", cfg.ListenHostPort(), mainTLS, p.Log)
			path, h := p.Broker.Handler()
			b.Mux.Handle(path, h)
			out["broker"] = b
		}
	}
	if cfg.PprofAddr != "" {
		out["pprof"] = server.Pprof(cfg.PprofAddr, p.Log)
	}
	if p.Broker != nil && cfg.BrokerAddr != "" {
		b := server.New("broker", cfg.BrokerAddr, mainTLS, p.Log)
		path, h := p.Broker.Handler()
		b.Mux.Handle(path, h)
		out["broker"] = b
	}
	// With mutual TLS every request's client certificate is verified again
	// against the bundle of the moment: a rotated-out CA or an expired
	// certificate is refused on a connection opened before.
	for _, s := range out {
		if s.TLS != nil {
			s.ClientCheck = tlsR.ClientCheck()
		}
	}
	return out, nil
}

// /readyz's answers while the member is not ready, in the order checked.
var (
	errDraining    error = server.NotReadyError("draining: the member is shutting down")
	errStarting    error = server.NotReadyError("starting: the member has not registered yet")
	errNotClaiming error = server.NotReadyError("liveness lock not held: the member is not claiming")
)

// readiness is /readyz: the member is registered and not shutting down, and
// it holds its liveness lock (it owns shards and claims). The lock is the
// proof that the primary answers: its session, on a connection of its own,
// is pinged four times a second and given up on a failed ping. A ping
// through the pool would wait for a free connection, and a pool whose every
// connection is busy (a burst of work) would read as a database that does
// not answer, taking every pod under the burst out of the endpoints.
func (p *Process) readiness(ctx context.Context) error {
	if p.draining.Load() {
		return errDraining
	}
	select {
	case <-p.ready:
	default:
		return errStarting
	}
	if p.lock == nil {
		return p.Primary.Ping(ctx)
	}
	if !p.lock.Held() {
		return errNotClaiming
	}
	return nil
}
