// Package stack runs the whole system locally, as real processes: a private
// Postgres (db/pgcluster, Postgres' default durability), the `converge`
// binary (ROLE=all) and the classic demo's worker binary connected to its
// broker over loopback Connect. cmd/devstack is its command line; the
// end-to-end benchmark (examples/classic/cmd/bench) and the chaos suite
// (examples/chaos: Options.Via, RestartPostgres) drive the same stack.
// Options.Topology makes it a local cluster instead: several ROLE=control
// and ROLE=broker processes and workers on the one Postgres (cluster.go).
//
// converge runs as a child process built from this source tree, so the
// stack serves exactly what the production binary serves (the GraphQL API
// and the dashboard included, as they are mounted there).
package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/loopback"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/db/pgcluster"
)

// Packages built when Options leaves a binary unset.
const (
	ConvergePackage = "github.com/converge-run/converge/cmd/converge"
	WorkerPackage   = "github.com/converge-run/converge/examples/classic/cmd/worker"
)

// Options configures a stack.
type Options struct {
	// Addr is converge's LISTEN_ADDR (host:port); port 0 picks a free one.
	Addr string
	// DataDir keeps the database between runs ("" = a temporary one,
	// removed by Stop).
	DataDir string
	// ConvergeBin and WorkerBin are prebuilt binaries; "" builds them from
	// this source tree with the go tool (cached after the first time).
	ConvergeBin, WorkerBin string
	// WorkerPackage is the worker main built when WorkerBin is "" (default
	// WorkerPackage, the classic demo's worker).
	WorkerPackage string
	// ConvergeEnv and WorkerEnv are extra NAME=value settings for the
	// children, on top of this process's environment.
	ConvergeEnv, WorkerEnv []string
	// PGPort is the private Postgres' loopback port (0 = a free one).
	PGPort int
	// PGSettings are extra Postgres settings (-c name=value).
	PGSettings map[string]string
	// Output receives the children's logs, each line prefixed with its
	// process name (default os.Stderr).
	Output io.Writer
	// Setup runs once converge is ready and before the worker starts (apply
	// the kind manifests here, so the worker's kinds are known when it
	// connects).
	Setup func(ctx context.Context, s *Stack) error
	// APIToken has the stack generate an admin API token (API_TOKENS_FILE;
	// Stack.AdminToken). The worker plane is always authenticated with
	// tokens the stack generates.
	APIToken bool
	// ReadyTimeout bounds start-up until /readyz answers (default 2m).
	ReadyTimeout time.Duration
	// Topology asks for a local cluster (several controls, brokers and
	// workers); the zero value is one ROLE=all converge and one worker.
	Topology Topology
	// WorkerArgs are the worker binary's command-line arguments.
	WorkerArgs []string
	// Via, when set, is asked for the address each member dials instead of
	// target, the host:port it would reach directly: Postgres for a
	// converge process, the brokers' balancer (or the single converge) for
	// a worker. The chaos suite puts a fault-injecting proxy there.
	Via func(member, target string) (string, error)
	Log zerolog.Logger
}

// Stack is a running local stack.
type Stack struct {
	// BaseURL is converge's HTTP address (API, probes, broker).
	BaseURL string
	// DatabaseURL is the private Postgres' converge database.
	DatabaseURL string
	// AdminToken is the generated admin API token (with Options.APIToken).
	AdminToken string
	// WorkerToken is the worker-plane token the stack's brokers accept
	// (WORKER_TOKENS_FILE): an extra worker presents it as WORKER_TOKEN.
	WorkerToken string
	// Store reads and writes the database directly (the seam until conctl
	// and the GraphQL API apply documents; see examples/apply).
	Store *store.Store

	pg     *pgcluster.Cluster
	pgOpts pgcluster.Options
	pool   *pgxpool.Pool
	// converge is the first server (BaseURL), worker the first worker.
	converge *process
	worker   *process
	binDir   string
	creds    *credentials
	log      zerolog.Logger
	opts     Options

	mu       sync.Mutex // guards members and their draining/gone flags
	members  []*Member
	balancer *balancer
}

// Start brings the stack up: Postgres, converge (which migrates the schema
// at boot and is waited for until its /readyz answers), Options.Setup, then
// the worker.
// On failure everything started so far is stopped.
func Start(ctx context.Context, opts Options) (s *Stack, err error) {
	if opts.Output == nil {
		opts.Output = os.Stderr
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 2 * time.Minute
	}
	if err := opts.Topology.validate(); err != nil {
		return nil, err
	}
	listen, urlHost, err := resolveAddr(opts.Addr)
	if err != nil {
		return nil, err
	}
	if err := addrFree(listen); err != nil {
		return nil, err
	}
	sweepStaleTempDirs(opts.Log)
	s = &Stack{BaseURL: "http://" + urlHost, log: opts.Log, opts: opts}
	defer func() {
		if err != nil {
			_ = s.Stop()
			s = nil
		}
	}()
	if err := s.binaries(ctx, &s.opts); err != nil {
		return s, err
	}
	s.pgOpts = pgcluster.Options{DataDir: opts.DataDir, Port: opts.PGPort, Settings: opts.PGSettings, Logger: opts.Log}
	if s.pg, err = pgcluster.Start(ctx, s.pgOpts); err != nil {
		return s, err
	}
	s.pgOpts.Port = s.pg.Port() // a restart comes back on the same port
	if err := s.pg.CreateDatabase(ctx, "converge"); err != nil {
		return s, err
	}
	s.DatabaseURL = s.pg.URL("converge")
	if s.creds, err = provision(opts.APIToken); err != nil {
		return s, err
	}
	s.AdminToken = s.creds.adminToken
	s.WorkerToken = s.creds.workerToken

	if err := s.startServers(ctx, listen); err != nil {
		return s, err
	}
	if s.pool, err = pgxpool.New(ctx, s.DatabaseURL); err != nil {
		return s, fmt.Errorf("connect to %s: %w", s.DatabaseURL, err)
	}
	s.Store = store.New(s.pool, s.pool)
	if opts.Setup != nil {
		if err := opts.Setup(ctx, s); err != nil {
			return s, err
		}
	}
	if err := s.startWorkers(); err != nil {
		return s, err
	}
	return s, nil
}

// ConvergePid and WorkerPid are the children's process ids.
func (s *Stack) ConvergePid() int { return s.converge.Pid() }

// WorkerPid is the worker's process id.
func (s *Stack) WorkerPid() int { return s.worker.Pid() }

// PeakRSSMB reads the peak resident set size (VmHWM, MiB) of converge and
// of the worker.
func (s *Stack) PeakRSSMB() (convergeMB, workerMB float64, err error) {
	if convergeMB, err = rssMB(s.converge.Pid(), true); err != nil {
		return 0, 0, err
	}
	workerMB, err = rssMB(s.worker.Pid(), true)
	return convergeMB, workerMB, err
}

// RSSMB reads the current resident set size (VmRSS, MiB) of converge and
// of the worker.
func (s *Stack) RSSMB() (convergeMB, workerMB float64, err error) {
	if convergeMB, err = rssMB(s.converge.Pid(), false); err != nil {
		return 0, 0, err
	}
	workerMB, err = rssMB(s.worker.Pid(), false)
	return convergeMB, workerMB, err
}

// CreateDatabase creates another database on the private cluster (unless
// it exists) and returns its connection string, for a peer benchmark that
// should see the same server.
func (s *Stack) CreateDatabase(ctx context.Context, name string) (string, error) {
	if err := s.pg.CreateDatabase(ctx, name); err != nil {
		return "", err
	}
	return s.pg.URL(name), nil
}

// Checkpoint forces a checkpoint, so what runs next does not pay for the
// dirty buffers of what ran before.
func (s *Stack) Checkpoint(ctx context.Context) error {
	return s.Store.Checkpoint(ctx)
}

// WaitAutovacuum waits, up to limit, until no autovacuum worker is running
// on the cluster (the tables a run has just written are vacuumed and
// analyzed right after it), and returns how long it waited.
func (s *Stack) WaitAutovacuum(ctx context.Context, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		n, err := s.Store.AutovacuumWorkers(ctx)
		if err != nil {
			return time.Since(start), err
		}
		if n == 0 || time.Since(start) >= limit {
			return time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			return time.Since(start), ctx.Err()
		case <-tick.C:
		}
	}
}

// StopProcesses stops the worker and converge, as Stop does, but leaves
// Postgres (and Store) up; Stop later stops only Postgres.
func (s *Stack) StopProcesses() error {
	return s.stopMembers(60 * time.Second)
}

// Exited reports a child that has ended on its own (a crash), if any.
func (s *Stack) Exited() error {
	for _, m := range s.Members() {
		if m.proc.stopped {
			continue
		}
		if ok, err := m.proc.exited(); ok {
			return fmt.Errorf("%s exited unexpectedly: %w", m.Name, err)
		}
	}
	return nil
}

// Stop tears the stack down in order — the workers (which drain), the
// brokers and controls (which drain and deregister), then Postgres — and
// removes temporary data. Every step runs even when an earlier one fails.
func (s *Stack) Stop() error {
	var errs []error
	if s.pool != nil {
		s.pool.Close()
	}
	errs = append(errs, s.stopMembers(60*time.Second))
	if s.pg != nil {
		errs = append(errs, s.pg.Stop())
	}
	if s.binDir != "" {
		errs = append(errs, os.RemoveAll(s.binDir))
	}
	errs = append(errs, s.creds.remove())
	return errors.Join(errs...)
}

// Abandon kills every member's process group at once (SIGKILL), for a
// caller about to exit without Stop (a second Ctrl+C). Postgres ends with
// the caller (its parent-death signal), and the next stack's start sweeps
// the temporary directories left behind. Safe to call while Stop runs.
func (s *Stack) Abandon() {
	for _, m := range s.Members() {
		_ = syscall.Kill(-m.Pid(), syscall.SIGKILL)
	}
}

// binaries builds the binaries Options leaves unset.
func (s *Stack) binaries(ctx context.Context, opts *Options) error {
	var pkgs []string
	if opts.ConvergeBin == "" {
		pkgs = append(pkgs, ConvergePackage)
	}
	if opts.WorkerBin == "" {
		pkg := opts.WorkerPackage
		if pkg == "" {
			pkg = WorkerPackage
		}
		pkgs = append(pkgs, pkg)
	}
	if len(pkgs) == 0 {
		return nil
	}
	dir, err := ownedTempDir(binPrefix)
	if err != nil {
		return fmt.Errorf("create build dir: %w", err)
	}
	s.binDir = dir
	if err := Build(ctx, dir, pkgs...); err != nil {
		return err
	}
	if opts.ConvergeBin == "" {
		opts.ConvergeBin = filepath.Join(dir, "converge")
	}
	if opts.WorkerBin == "" {
		opts.WorkerBin = filepath.Join(dir, "worker")
	}
	return nil
}

// Build compiles packages of this module into dir with the go tool. It must
// run inside the source tree (as `go run ./cmd/devstack` does).
func Build(ctx context.Context, dir string, pkgs ...string) error {
	gobin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("the go tool is needed to build %v (or pass prebuilt binaries): %w", pkgs, err)
	}
	cmd := exec.CommandContext(ctx, gobin, append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %v: %w\n%s", pkgs, err, out)
	}
	return nil
}

// ErrAddrInUse means the stack's listen address is taken: by another stack,
// whose /readyz would otherwise answer for this stack's converge.
var ErrAddrInUse = errors.New("is in use")

// addrFree refuses an address something already listens on, before anything
// starts: converge would fail to bind it only after migrating, and meanwhile
// the other server's /readyz would pass for this converge's.
func addrFree(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("%s %w (another stack or server listens there): pick another address, or port 0 for a free one",
				addr, ErrAddrInUse)
		}
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	return ln.Close()
}

// resolveAddr fills in a free port for port 0 and returns the address to
// listen on and the one to reach it at (loopback for a wildcard host).
func resolveAddr(addr string) (listen, reach string, err error) {
	if addr == "" {
		addr = "127.0.0.1:8080"
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", "", fmt.Errorf("address %q: want host:port: %w", addr, err)
	}
	if port == "0" {
		p, err := loopback.FreePort(host)
		if err != nil {
			return "", "", err
		}
		port = strconv.Itoa(p)
	}
	reachHost := host
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		reachHost = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), net.JoinHostPort(reachHost, port), nil
}
