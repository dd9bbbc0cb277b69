// Package apptest boots converge + worker stacks for tests, the one way
// every package does it: real converge processes (app.Run) built from a
// config.Config value (never a faked environment) on a private database,
// logs routed to t.Log, workers connected to the broker, and waits on
// conditions with deadlines.
//
//	s := apptest.Start(t, apptest.Options{
//		Manifests: []string{leafKind},
//		Workers:   []apptest.Worker{{Providers: []worker.Provider{leaf}}},
//		GraphQL:   resolvers.Mount(resolvers.MountOptions{}), // packages above core only
//	})
//	s.Store.ApplyResource(…)
//	r := s.WaitPhase("leaf", "a", resource.PhaseReady, time.Minute)
//
// core/ must not import the resolvers, so the GraphQL mount is an option the
// test passes; without it a process serves probes, metrics and the broker.
package apptest

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/app"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/db/pgtest"
)

// Deadlines are generous: a loaded 2-core CI machine is slow, and a
// deadline only bounds how long a broken test takes to fail.
const (
	// BootWithin bounds a process's start-up (migrate, listeners, first beat).
	BootWithin = 90 * time.Second
	// StopWithin bounds a process's shutdown.
	StopWithin = 60 * time.Second
)

// Options shape a stack. Zero values take the defaults noted.
type Options struct {
	// DatabaseURL is the database the processes share ("" = a fresh pgtest
	// database).
	DatabaseURL string
	// Roles start one process each, in order (default one config.RoleAll).
	Roles []config.Role
	// Config adjusts each process's configuration, built from
	// config.Defaults with loopback listeners on free ports, a 1s member
	// heartbeat, a 5s shutdown drain and the stack's worker-plane token
	// files (clear WorkerTokens and MeshTokens for an open plane).
	Config func(*config.Config)
	// Version is each process's build version (default "test").
	Version string
	// GraphQL, when set, is mounted on every process that serves the API
	// (resolvers.Mount).
	GraphQL app.Mount
	// Tune adjusts cadences after the harness's own (reaper every 200ms,
	// retry after 1s).
	Tune func(*app.Process, *app.Duties)
	// Manifests are kind manifest documents applied once the first process
	// is ready, before any worker connects.
	Manifests []string
	// Workers connect to the first process's broker after the manifests.
	Workers []Worker
}

// Worker is one in-process worker.
type Worker struct {
	// Options take test defaults where zero: a 5s drain, 500ms reconnect
	// backoff and heartbeats, the test's logger.
	Options   worker.Options
	Providers []worker.Provider
}

// Stack is a running stack.
type Stack struct {
	t    testing.TB
	opts Options
	// DatabaseURL is the database the processes share.
	DatabaseURL string
	// Processes are the running processes, in Options.Roles order.
	Processes []*app.Process
	// Process is the first process; Store its store.
	Process *app.Process
	Store   *store.Store
	// Log is the stack's logger (to t.Log).
	Log zerolog.Logger
	// WorkerTokensFile and MeshTokensFile are the worker plane's credential
	// files every process gets (WORKER_TOKENS_FILE, MESH_TOKENS_FILE),
	// holding WorkerToken and MeshToken.
	WorkerTokensFile, MeshTokensFile string
}

// WorkerToken and MeshToken are the credentials every stack provisions for
// its worker plane (fresh random values per test binary): workers started
// by the harness present WorkerToken, brokers present MeshToken to peers.
var (
	WorkerToken = randomToken()
	MeshToken   = randomToken()
)

func randomToken() string {
	b := make([]byte, 24)
	_, _ = crand.Read(b)
	return hex.EncodeToString(b)
}

// provisionCredentials writes the stack's worker-plane token files.
func (s *Stack) provisionCredentials() {
	dir := s.t.TempDir()
	s.WorkerTokensFile = filepath.Join(dir, "worker-tokens")
	s.MeshTokensFile = filepath.Join(dir, "mesh-tokens")
	for path, line := range map[string]string{s.WorkerTokensFile: WorkerToken + " apptest-worker\n", s.MeshTokensFile: MeshToken + " apptest-mesh\n"} {
		if err := os.WriteFile(path, []byte(line), 0o600); err != nil {
			s.t.Fatalf("apptest: write %s: %v", path, err)
		}
	}
}

// Start boots the stack and returns it once every process is ready, holds
// its shard range, and the workers are started. Everything stops when the
// test ends.
func Start(t testing.TB, o Options) *Stack {
	t.Helper()
	if o.DatabaseURL == "" {
		o.DatabaseURL = pgtest.URL(t)
	}
	if len(o.Roles) == 0 {
		o.Roles = []config.Role{config.RoleAll}
	}
	if o.Version == "" {
		o.Version = "test"
	}
	s := &Stack{t: t, opts: o, DatabaseURL: o.DatabaseURL, Log: Logger(t)}
	s.provisionCredentials()
	for _, role := range o.Roles {
		p, _ := s.StartProcess(role)
		s.Processes = append(s.Processes, p)
	}
	s.Process = s.Processes[0]
	s.Store = s.Process.Store
	for _, m := range o.Manifests {
		s.ApplyManifest(m)
	}
	for _, w := range o.Workers {
		s.StartWorker(w)
	}
	return s
}

// Config is the configuration the stack gives a process of role.
func (s *Stack) Config(role config.Role) config.Config {
	cfg := config.Defaults()
	cfg.DatabaseURL = s.DatabaseURL
	cfg.Role = role
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.HealthAddr = "127.0.0.1:0"
	cfg.HeartbeatEvery = time.Second
	cfg.ShutdownDrain = 5 * time.Second
	cfg.Version = s.opts.Version
	cfg.WorkerTokens, cfg.MeshTokens = s.WorkerTokensFile, s.MeshTokensFile
	if s.opts.Config != nil {
		s.opts.Config(&cfg)
	}
	return cfg
}

// StartProcess runs one more converge process of role on the stack's
// database and returns it once ready with its shard range; stop ends it
// early (it also ends with the test). It is not added to Processes.
func (s *Stack) StartProcess(role config.Role) (p *app.Process, stop func()) {
	s.t.Helper()
	cfg := s.Config(role)
	if err := cfg.Validate(); err != nil {
		s.t.Fatalf("apptest: invalid config: %v", err)
	}
	opts := app.Options{Tune: func(p *app.Process, d *app.Duties) {
		if d.Reaper != nil {
			d.Reaper.Every = 200 * time.Millisecond
			d.Reaper.RetryAfter = time.Second
		}
		if s.opts.Tune != nil {
			s.opts.Tune(p, d)
		}
	}}
	if s.opts.GraphQL != nil {
		opts.Mounts = []app.Mount{s.opts.GraphQL}
	}
	started := make(chan *app.Process, 1)
	opts.OnStart = func(p *app.Process) { started <- p }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, cfg, s.Log.With().Str("role", string(role)).Logger(), opts) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					s.t.Errorf("converge (%s) stopped with: %v", role, err)
				}
			case <-time.After(StopWithin):
				s.t.Errorf("converge (%s) did not stop within %s", role, StopWithin)
			}
		})
	}
	select {
	case p = <-started:
	case err := <-done:
		cancel()
		s.t.Fatalf("converge (%s) exited during start-up: %v", role, err)
	case <-time.After(BootWithin):
		cancel()
		s.t.Fatalf("converge (%s) did not become ready within %s", role, BootWithin)
	}
	s.t.Cleanup(stop)
	// The first beat registered the member; wait for its shard range.
	WaitFor(s.t, 30*time.Second, "the member gets its shard range", func() bool { _, _, ok := p.Shards.Bounds(); return ok })
	return p, stop
}

// APIURL is the first process's API (http://host:port).
func (s *Stack) APIURL() string { return APIURL(s.Process) }

// BrokerURL is where workers dial the first process's broker.
func (s *Stack) BrokerURL() string { return BrokerURL(s.Process) }

// APIURL is p's API listener (http://host:port).
func APIURL(p *app.Process) string { return "http://" + p.Addr("api").String() }

// BrokerURL is where workers dial p's broker: its own listener, else the API's.
func BrokerURL(p *app.Process) string {
	a := p.Addr("broker")
	if a == nil {
		a = p.Addr("api")
	}
	return "http://" + a.String()
}

// ApplyManifest applies a kind manifest document.
func (s *Stack) ApplyManifest(doc string) {
	s.t.Helper()
	if _, _, err := s.Store.ApplyManifest(context.Background(), []byte(doc)); err != nil {
		s.t.Fatalf("apply manifest: %v", err)
	}
}

// StartWorker connects a worker to the first process's broker.
func (s *Stack) StartWorker(w Worker) (stop func()) {
	s.t.Helper()
	return StartWorker(s.t, s.BrokerURL(), w.Options, w.Providers...)
}

// StartWorker serves providers against the broker at url until the test
// ends or stop is called. Without a token or TLS settings in o it presents
// WorkerToken.
func StartWorker(t testing.TB, url string, o worker.Options, ps ...worker.Provider) (stop func()) {
	t.Helper()
	if o.Token == "" && o.TokenFile == "" && o.TLS == nil {
		o.Token = WorkerToken
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = 5 * time.Second
	}
	if o.ReconnectMax == 0 {
		o.ReconnectMax = 500 * time.Millisecond
	}
	if o.HeartbeatEvery == 0 {
		o.HeartbeatEvery = 500 * time.Millisecond
	}
	if reflect.ValueOf(o.Logger).IsZero() {
		o.Logger = Logger(t).With().Str("component", "worker").Logger()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := worker.Serve(ctx, url, o, ps...); err != nil && ctx.Err() == nil {
			t.Errorf("worker: %v", err)
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	t.Cleanup(stop)
	return stop
}
