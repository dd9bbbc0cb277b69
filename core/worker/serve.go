package worker

import (
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/gopool"
	"github.com/converge-run/converge/core/tlsreload"
	"github.com/converge-run/converge/core/transport"
	"github.com/converge-run/converge/workerproto"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
	"github.com/converge-run/converge/workerproto/gen/converge/worker/v1/workerv1connect"
)

// Options tunes a Worker. Zero values take the defaults noted.
type Options struct {
	// WorkerID identifies this process to brokers (default host-pid-random).
	WorkerID string
	// MaxParallel bounds concurrent tasks (WORKER_MAX_PARALLEL, default 64).
	MaxParallel int
	// DrainTimeout is how long running handlers may finish on shutdown
	// (WORKER_DRAIN_TIMEOUT, default 50s) before their contexts are
	// cancelled; a task that then fails is handed back unanswered, for the
	// broker to dispatch again without counting an attempt.
	DrainTimeout time.Duration
	// HeartbeatEvery is the cadence of coalesced progress heartbeats (default 5s).
	HeartbeatEvery time.Duration
	// ReadinessEvery is how often Provider.Ready is polled (default 1s).
	ReadinessEvery time.Duration
	// BufferSize bounds results kept until a broker acknowledges them —
	// unsent while the stream is down, or sent and not yet acked (default
	// 4096); past it the oldest result is discarded and counted (its task
	// re-runs).
	BufferSize int
	// ResultLinger is how long a finished task's result may wait to share
	// a message with the results finishing after it, while results sent
	// earlier still await the broker's ack (default 5ms). With nothing
	// awaiting an ack a result goes at once, so an idle worker adds no
	// latency; under load the results of a burst travel as one
	// StageCompletes message instead of one message (two frames, and as
	// many reads and an ack on the broker's side) each.
	ResultLinger time.Duration
	// ReconnectMin and ReconnectMax bound the jittered reconnect backoff
	// (defaults 100ms and 10s).
	ReconnectMin, ReconnectMax time.Duration
	// TLS configures https:// brokers (client cert, pinned CA); nil = defaults.
	TLS *tls.Config
	// TLSFiles configures https:// brokers from PEM files instead of TLS
	// (set one): the client keypair for mutual TLS (WORKER_TLS_CERT_FILE
	// and WORKER_TLS_KEY_FILE, together) and the CA that verifies the
	// broker (WORKER_TLS_CA_FILE; unset = the system roots). New loads them,
	// failing on unusable files; Run re-reads them every TLSReloadEvery
	// (TLS_RELOAD_INTERVAL, default 3m), so rotated material applies to the
	// next connection.
	TLSFiles       tlsreload.Files
	TLSReloadEvery time.Duration
	// Token is the worker-plane bearer token sent on every call
	// (WORKER_TOKEN); TokenFile names a file whose first line is the token,
	// re-read on every call (WORKER_TOKEN_FILE; a file that cannot be read,
	// or whose first line is empty, fails the call, naming it). Neither: no token (an open
	// broker, or mutual TLS with a converge-worker client certificate).
	Token     string
	TokenFile string
	// MaxMessageBytes bounds one message either way (default 16 MiB,
	// WORKER_MAX_MESSAGE_BYTES): a result larger than it, or than the
	// limit the broker names when the session opens (its own
	// WORKER_MAX_MESSAGE_BYTES) if that is smaller, is sent as its task's
	// terminal failure, naming the size and the limit.
	MaxMessageBytes int
	// HealthAddr is where /livez and /readyz are served (WORKER_HEALTH_ADDR,
	// e.g. ":8081"; empty = no probes). See health.go.
	HealthAddr string
	// PprofAddr is where Go's profiler is served (WORKER_PPROF_ADDR, a
	// loopback host:port such as "127.0.0.1:6062"; empty = off; any other
	// address is refused). See pprof.go.
	PprofAddr string
	// Version is reported to brokers.
	Version string
	Logger  zerolog.Logger
}

func (o *Options) defaults() {
	if o.WorkerID == "" {
		host, _ := os.Hostname()
		b := make([]byte, 3)
		_, _ = crand.Read(b)
		o.WorkerID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
	}
	if o.MaxParallel <= 0 {
		o.MaxParallel = 64
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = 50 * time.Second
	}
	if o.HeartbeatEvery <= 0 {
		o.HeartbeatEvery = 5 * time.Second
	}
	if o.ReadinessEvery <= 0 {
		o.ReadinessEvery = time.Second
	}
	if o.BufferSize <= 0 {
		o.BufferSize = 4096
	}
	if o.ResultLinger <= 0 {
		o.ResultLinger = 5 * time.Millisecond
	}
	if o.ReconnectMin <= 0 {
		o.ReconnectMin = 100 * time.Millisecond
	}
	if o.ReconnectMax <= 0 {
		o.ReconnectMax = 10 * time.Second
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = 16 << 20
	}
	if o.TLSReloadEvery <= 0 {
		o.TLSReloadEvery = 3 * time.Minute
	}
}

// taskIdle is how long a task's goroutine waits for the next task before
// it exits (gopool.Pool). A goroutine per task grew its stack through the
// handler's JSON and the SDK for every task: runtime.morestack was 6.4% of
// the demo worker's CPU in a 100k run, 1.4% with the goroutines reused. A
// tenth of a second, as the broker's: under load the next task comes
// within milliseconds, and a burst's goroutines do not outlive it.
const taskIdle = 100 * time.Millisecond

// Worker hosts providers and serves them to a broker.
type Worker struct {
	opts   Options
	log    zerolog.Logger
	client workerv1connect.WorkerServiceClient
	// cred is the bearer token presented on every call.
	cred credential
	// conns is the client's HTTP client: a planned end of the session
	// closes its idle connections (see sessions).
	conns     interface{ CloseIdleConnections() }
	providers map[string]Provider // by "kind/version"
	ordered   []Provider          // sorted by kind/version: stable readiness reports
	checks    []*readyCheck       // each ordered provider's Ready, called aside
	defaults  *defaults
	sem       chan struct{}
	pool      *gopool.Pool        // the goroutines tasks run on (see taskIdle)
	health    *sideServer         // the probes; nil without HealthAddr
	pprof     *sideServer         // the profiler; nil without PprofAddr
	tlsFiles  *tlsreload.Reloader // Options.TLSFiles, refreshed while Run runs; nil without

	mu      sync.Mutex
	running map[string]runningTask // by task_id
	// pending are the results not yet settled, oldest first: pending[:sent]
	// went out on the current session and await the broker's ResultAck,
	// pending[sent:] are still to send. A new session resends them all.
	pending []*workerv1.StageComplete
	sent    int
	// unsentSince is when the oldest result of pending[sent:] was
	// delivered: the linger (Options.ResultLinger) counts from it.
	unsentSince time.Time
	draining    bool
	// subscribed is true while a session's Subscribe is acknowledged.
	subscribed bool
	// brokerMax is the current session's broker's message limit
	// (Subscribed.max_message_bytes; 0: not said): what is sent is held to
	// the smaller of it and Options.MaxMessageBytes (messageLimitLocked).
	brokerMax int
	dropped   int64
	// handedBack counts tasks the drain cancelled and handed back
	// unanswered (taskRun.settle).
	handedBack atomic.Int64
	wake       chan struct{} // a result is pending
	idle       chan struct{} // closed/replaced when running drops to zero
}

// Serve runs providers against the broker at brokerURL until ctx is done,
// then drains in-flight work (see Options.DrainTimeout).
func Serve(ctx context.Context, brokerURL string, opts Options, providers ...Provider) error {
	w, err := New(brokerURL, opts, providers...)
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// New validates the providers and prepares a worker.
func New(brokerURL string, opts Options, providers ...Provider) (*Worker, error) {
	opts.defaults()
	if len(providers) == 0 {
		return nil, errors.New("worker: no providers")
	}
	log := opts.Logger.With().Str("worker_id", opts.WorkerID).Logger()
	tlsFiles, err := loadTLSFiles(brokerURL, &opts, log)
	if err != nil {
		return nil, err
	}
	hc, err := transport.ClientFor(brokerURL, opts.TLS)
	if err != nil {
		return nil, err
	}
	cred := credential{token: opts.Token, file: opts.TokenFile}
	w := &Worker{
		opts:     opts,
		log:      log,
		tlsFiles: tlsFiles,
		cred:     cred,
		conns:    hc,
		client: workerv1connect.NewWorkerServiceClient(hc, brokerURL,
			connect.WithInterceptors(cred),
			connect.WithReadMaxBytes(opts.MaxMessageBytes), connect.WithSendMaxBytes(opts.MaxMessageBytes)),
		providers: map[string]Provider{},
		defaults:  newDefaults(),
		sem:       make(chan struct{}, opts.MaxParallel),
		pool:      gopool.New(taskIdle),
		running:   map[string]runningTask{},
		wake:      make(chan struct{}, 1),
		idle:      make(chan struct{}),
	}
	close(w.idle)
	for _, p := range providers {
		key := kvKey(p.Kind())
		if _, dup := w.providers[key]; dup {
			return nil, fmt.Errorf("worker: two providers serve %s", key)
		}
		w.providers[key] = p
		w.ordered = append(w.ordered, p)
	}
	sort.Slice(w.ordered, func(i, j int) bool { return kvKey(w.ordered[i].Kind()) < kvKey(w.ordered[j].Kind()) })
	for _, p := range w.ordered {
		w.checks = append(w.checks, &readyCheck{p: p, log: log})
	}
	if w.pprof, err = newPprofServer(opts.PprofAddr, w); err != nil {
		return nil, err
	}
	if w.health, err = newHealthServer(opts.HealthAddr, w); err != nil {
		w.pprof.close() // New fails: nothing will serve it
		return nil, err
	}
	return w, nil
}

// loadTLSFiles loads Options.TLSFiles into opts.TLS, returning the
// reloader that keeps them fresh (nil when no file is named).
func loadTLSFiles(brokerURL string, opts *Options, log zerolog.Logger) (*tlsreload.Reloader, error) {
	f := opts.TLSFiles
	if f == (tlsreload.Files{}) {
		return nil, nil
	}
	if u, err := url.Parse(brokerURL); err == nil && u.Scheme != "https" {
		// The stream would be cleartext, the files unused: mutual TLS
		// the operator asked for would silently not be.
		return nil, fmt.Errorf("worker: WORKER_TLS_* files are set but the broker url %q is not https://", brokerURL)
	}
	if opts.TLS != nil {
		return nil, errors.New("worker: Options.TLS and Options.TLSFiles are both set: set one")
	}
	if (f.CertFile == "") != (f.KeyFile == "") {
		return nil, errors.New("worker: WORKER_TLS_CERT_FILE and WORKER_TLS_KEY_FILE must be set together")
	}
	r, err := tlsreload.New(f, opts.TLSReloadEvery, log)
	if err != nil {
		return nil, fmt.Errorf("worker: load the TLS files: %w", err)
	}
	opts.TLS = r.ClientConfig()
	return r, nil
}

// Dropped counts results discarded because the redelivery buffer was full.
func (w *Worker) Dropped() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dropped
}

// Run serves until ctx is done, reconnecting with jittered backoff, then
// drains: the broker is told every kind is unready, running handlers get up
// to DrainTimeout to finish, and their results are delivered.
func (w *Worker) Run(ctx context.Context) error {
	stopHealth := w.health.serve()
	defer stopHealth()
	stopPprof := w.pprof.serve()
	defer stopPprof()
	if w.tlsFiles != nil {
		reloadCtx, stopReload := context.WithCancel(context.WithoutCancel(ctx))
		reloaded := make(chan struct{})
		go func() {
			defer close(reloaded)
			_ = w.tlsFiles.Run(reloadCtx) // ends with reloadCtx; a failed reload is logged by the reloader
		}()
		defer func() { stopReload(); <-reloaded }()
	}
	defer w.pool.Stop()
	// Tasks run on a context that outlives ctx by the drain budget.
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	sessCtx, cancelSess := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSess()

	done := make(chan struct{})
	go func() {
		defer close(done)
		w.sessions(sessCtx, workCtx)
	}()

	<-ctx.Done()
	w.mu.Lock()
	w.draining = true
	idle := w.idle
	n := len(w.running)
	w.mu.Unlock()
	w.signal()
	w.log.Info().Int("in_flight", n).Dur("budget", w.opts.DrainTimeout).Msg("draining in-flight tasks")
	select {
	case <-idle:
	case <-time.After(w.opts.DrainTimeout):
		w.log.Warn().Msg("drain budget spent; cancelling running handlers")
		cancelWork()
		// A handler that fails for the cancellation, or ignores it past
		// handlerGrace, hands its task back.
		select {
		case <-w.idleChan():
		case <-time.After(handlerGrace + time.Second):
		}
		if n := w.handedBack.Load(); n > 0 {
			w.log.Info().Int64("tasks", n).Msg("handed back the tasks the drain cancelled; the broker dispatches them again")
		}
	}
	// Give the session a moment to flush the last results.
	flushBy := time.After(5 * time.Second)
	for w.pendingCount() > 0 {
		select {
		case <-flushBy:
			w.log.Warn().Int("undelivered", w.pendingCount()).Msg("results not delivered before exit; their tasks will re-run")
			cancelSess()
			<-done
			return nil
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancelSess()
	<-done
	return nil
}

func (w *Worker) idleChan() chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.idle
}

func (w *Worker) pendingCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending)
}

func (w *Worker) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// sessions keeps one session open at a time, reconnecting with backoff.
func (w *Worker) sessions(ctx, workCtx context.Context) {
	backoff := w.opts.ReconnectMin
	for ctx.Err() == nil {
		w.primeDefaults(ctx)
		started := time.Now()
		// A stream's interceptor cannot fail the call: a token file it
		// cannot read would open the session with no credential, and the
		// broker's refusal would hide why.
		_, err := w.cred.value()
		if err == nil {
			err = w.session(ctx, workCtx)
		}
		if ctx.Err() != nil {
			return
		}
		if time.Since(started) > 30*time.Second {
			backoff = w.opts.ReconnectMin
		}
		if plannedEnd(err) {
			// The broker drained, or the session reached its maximum age:
			// nothing failed, and the next session starts after the
			// shortest backoff — on a new connection. The HTTP/2 client
			// would otherwise open the next stream on the connection it
			// has, to the same broker behind the Service, and a session
			// ended to move the worker would stay where it was.
			w.log.Info().Err(err).Msg("broker ended the session; reconnecting")
			w.conns.CloseIdleConnections()
			backoff = w.opts.ReconnectMin
		} else {
			w.log.Warn().Err(err).Dur("retry_in", backoff).Msg("broker stream lost; reconnecting")
		}
		jitter := time.Duration(rand.Int64N(int64(backoff)/2 + 1))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff/2 + jitter):
		}
		backoff = min(backoff*2, w.opts.ReconnectMax)
	}
}

// plannedEnd reports whether err is a broker ending the session on purpose
// (workerproto.PlannedSessionEnd).
func plannedEnd(err error) bool {
	var ce *connect.Error
	return errors.As(err, &ce) && ce.Code() == connect.CodeUnavailable &&
		strings.HasPrefix(ce.Message(), workerproto.PlannedSessionEnd)
}

// configPullTimeout bounds one pull of a default providerconfig before a
// session (the TypeScript SDK's too): a broker that does not answer (its
// database read hangs) must not keep the worker from its session, which
// delivers the config by push.
const configPullTimeout = 10 * time.Second

// primeDefaults pulls every served kind's default providerconfig.
func (w *Worker) primeDefaults(ctx context.Context) {
	for _, p := range w.providers {
		kind := p.Kind().Kind
		pctx, cancel := context.WithTimeout(ctx, configPullTimeout)
		res, err := w.client.GetProviderConfig(pctx, connect.NewRequest(&workerv1.GetProviderConfigRequest{Kind: kind,
			MaxMessageBytes: int64(w.opts.MaxMessageBytes)}))
		cancel()
		if connect.CodeOf(err) == connect.CodeResourceExhausted {
			// Too big for this worker's message limit (the broker names the
			// config and both sizes; an older broker's is the read's own
			// refusal): the session's push skips it too, so the provider
			// runs without it until the limit is raised.
			w.log.Warn().Err(err).Str("kind", kind).Int("max_message_bytes", w.opts.MaxMessageBytes).
				Msg("default providerconfig refused: over the worker's message limit (WORKER_MAX_MESSAGE_BYTES)")
			continue
		}
		if err != nil {
			w.log.Debug().Err(err).Str("kind", kind).Msg("pull default providerconfig")
			continue
		}
		w.applyConfig(kind, res.Msg.GetConfig(), !res.Msg.GetFound())
	}
}

func (w *Worker) applyConfig(kind string, c *workerv1.ProviderConfig, deleted bool) {
	var cfg ProviderConfig
	if pc := configFromProto(c); pc != nil {
		cfg = *pc
	}
	if !w.defaults.set(kind, cfg, deleted) {
		return
	}
	for _, p := range w.providers {
		if p.Kind().Kind == kind {
			w.safeOnConfig(p, cfg)
		}
	}
}

// safeOnConfig calls p.OnConfig, isolating a panic to the call: it is
// logged, and the worker keeps its session (tasks still get the config, in
// req.Config). A panic there ran on the stream's receive loop, and ended
// the process.
func (w *Worker) safeOnConfig(p Provider, cfg ProviderConfig) {
	defer func() {
		if rec := recover(); rec != nil {
			kv := p.Kind()
			w.log.Error().Str("kind", kv.Kind).Str("version", kv.Version).Str("config", cfg.Name).Int64("revision", cfg.Revision).
				Interface("panic", rec).Bytes("stack", debug.Stack()).Msg("OnConfig panicked")
		}
	}()
	p.OnConfig(cfg)
}

func (w *Worker) readiness() (kinds []*workerv1.KindReadiness, draining bool) {
	w.mu.Lock()
	draining = w.draining
	w.mu.Unlock()
	kinds = make([]*workerv1.KindReadiness, 0, len(w.ordered))
	for i, p := range w.ordered {
		kv := p.Kind()
		kinds = append(kinds, &workerv1.KindReadiness{
			Kind:  &workerv1.KindVersion{Kind: kv.Kind, Version: kv.Version},
			Ready: !draining && w.checks[i].ready(),
		})
	}
	return kinds, draining
}

func safeReady(p Provider) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return p.Ready()
}

func readinessKey(rs []*workerv1.KindReadiness) string {
	b := make([]byte, 0, 64)
	for _, r := range rs {
		b = append(b, r.GetKind().GetKind()...)
		b = append(b, '/')
		b = append(b, r.GetKind().GetVersion()...)
		if r.GetReady() {
			b = append(b, '+')
		} else {
			b = append(b, '-')
		}
	}
	return string(b)
}
