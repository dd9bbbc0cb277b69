// Command chaos runs the fault suite against real processes: a private
// Postgres, two converge processes (ROLE=all; the second reaches Postgres
// through a TCP proxy of ours, examples/chaos/tcpproxy, so it can be
// partitioned), and two workers (this binary re-executed). Each scenario
// applies a wave of leaf resources, injects its fault once a third of the
// wave has settled, and waits for the wave to converge; it prints one line
// per fault with the time it added over the fault-free wave and checks four
// invariants: eventual completion, progress (no window over 5 s without a
// resource settling while work is queued, counted from the end of the
// fault's own outage for a frozen database), no stranding (nothing left
// Reconciling or Failed) and no double-apply (an audit trigger records each
// result the drain applies, stamped by the demo worker with the claim it
// served: at most one per claim). Run it from the repository root:
//
//	go run ./examples/chaos                        # every fault
//	go run ./examples/chaos -n 200 -smoke          # the CI smoke: four faults
//	go run ./examples/chaos -faults pg-restart -repeat 5
//	go run ./examples/chaos -n 2000                # bigger waves
//
// Fault keys: worker-kill, converge-kill, partition, pg-restart,
// pg-immediate, pg-freeze, worker-cut, hung-handler, slow-worker.
package main

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/db/pgcluster"
	"github.com/converge-run/converge/examples/chaos/tcpproxy"
)

const leafKind = `{"kind":"leaf","spec_schema":{"type":"object"},"task_deadline_secs":5,
 "reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`

func main() {
	if len(os.Args) == 3 && os.Args[1] == "-worker" {
		runWorker(os.Args[2])
		return
	}
	n := flag.Int("n", 300, "resources per wave")
	smoke := flag.Bool("smoke", false, "the CI smoke: the fault-free wave and four faults (worker kill, converge kill, partition, Postgres fast restart)")
	only := flag.String("faults", "", "comma-separated fault keys to run after the fault-free wave (default: all)")
	repeat := flag.Int("repeat", 1, "run each selected fault this many times")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *n, *smoke, *only, *repeat)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
}

// runWorker serves the leaf kind: 50–300 ms of "work" per resource. SIGUSR1
// hangs its next 5 handler calls, of 5 different resources (they ignore
// their context and never return: the broker's task deadline gives up on
// them, and the retry runs normally); SIGUSR2 toggles a slow mode (ten
// times the latency).
func runWorker(url string) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	var runs, hang atomic.Int64
	var slow atomic.Bool
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		for sig := range sigs {
			if sig == syscall.SIGUSR1 {
				hang.Store(5)
			} else {
				slow.Store(!slow.Load())
			}
		}
	}()
	self := strconv.Itoa(os.Getpid())
	var mu sync.Mutex
	hung := map[string]bool{}
	p := apptest.NewProvider("leaf", func(ctx context.Context, req worker.Request) (worker.Outcome, error) {
		mu.Lock()
		hangs := !hung[req.Resource.ID] && hang.Add(-1) >= 0
		hung[req.Resource.ID] = hung[req.Resource.ID] || hangs
		mu.Unlock()
		if hangs { // once per resource: its retry runs normally
			select {} // hung: deaf to its context
		}
		latency := time.Duration(50+rand.IntN(250)) * time.Millisecond
		if slow.Load() {
			latency *= 10
		}
		select {
		case <-time.After(latency):
		case <-ctx.Done():
			return worker.Outcome{}, ctx.Err()
		}
		// The claim stamp the apply audit counts: one fresh run id per
		// execution, under the claim it served.
		c, _ := worker.ClaimFrom(ctx)
		return worker.Outcome{Status: json.RawMessage(fmt.Sprintf(`{"done":true,"epoch":%d,"run":"%s-%d"}`,
			c.Epoch, self, runs.Add(1)))}, nil
	})
	_ = worker.Serve(ctx, url, worker.Options{MaxParallel: 64, ReconnectMax: 200 * time.Millisecond,
		Token: os.Getenv("CHAOS_WORKER_TOKEN")}, p)
}

// proc is a child process the suite can kill and restart.
type proc struct {
	name string
	args []string
	env  []string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *proc) start() error {
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	p.cmd = exec.Command(p.args[0], p.args[1:]...)
	p.cmd.Env = append(os.Environ(), p.env...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.done = make(chan struct{})
	go func() { _ = p.cmd.Wait(); _ = f.Close(); close(p.done) }()
	return nil
}

func (p *proc) signal(sig syscall.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %s: %w", p.name, err)
	}
	return nil
}

func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.kill()
	}
}

// stack is the running system under test.
type stack struct {
	dir    string
	pg     *pgcluster.Cluster
	pgOpts pgcluster.Options
	proxy  *tcpproxy.Proxy
	// workerProxy is between worker-0 and converge-0.
	workerProxy *tcpproxy.Proxy
	st          *store.Store
	pool        *pgxpool.Pool
	servers     []*proc
	workers     []*proc
	apiPorts    []int
	applied     int
}

func run(ctx context.Context, n int, smoke bool, only string, repeat int) error {
	s, err := boot(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	all := []scenario{
		{key: "worker-kill", name: "worker SIGKILLed", inject: func() error { s.workers[1].kill(); return s.workers[1].start() }},
		{key: "converge-kill", name: "converge SIGKILLed", inject: func() error { s.servers[1].kill(); return nil },
			after: func() error { return s.restartServer(ctx, 1) }},
		{key: "partition", name: "converge partitioned from Postgres 8s", inject: func() error {
			s.proxy.Pause()
			time.AfterFunc(8*time.Second, s.proxy.Heal)
			return nil
		}},
		{key: "pg-restart", name: "Postgres restarted (fast shutdown)", inject: func() error { return s.restartPostgres(ctx, false) }},
		{key: "pg-immediate", name: "Postgres restarted (immediate: a crash)", full: true,
			inject: func() error { return s.restartPostgres(ctx, true) }},
		{key: "pg-freeze", name: "Postgres frozen 8s (SIGSTOP)", full: true, outage: 8 * time.Second,
			inject: func() error { return s.freezePostgres(8 * time.Second) }},
		// The stages in flight on the silenced connection wait for it (the
		// worker's result arrives when it heals): the progress invariant
		// counts from the heal.
		{key: "worker-cut", name: "worker↔broker connection silent 8s", full: true, outage: 8 * time.Second, inject: func() error {
			s.workerProxy.Pause()
			time.AfterFunc(8*time.Second, s.workerProxy.Heal)
			return nil
		}},
		// The hung resources wait out their 5 s task deadline (then fail
		// and retry): the progress invariant counts from the deadline.
		{key: "hung-handler", name: "5 handler calls hung (task deadline 5s)", full: true, outage: 5 * time.Second,
			inject: func() error { return s.workers[0].signal(syscall.SIGUSR1) }},
		{key: "slow-worker", name: "a worker 10x slower", full: true,
			inject: func() error { return s.workers[1].signal(syscall.SIGUSR2) },
			after:  func() error { return s.workers[1].signal(syscall.SIGUSR2) }},
	}
	var picked []scenario
	for _, sc := range all {
		inSmoke := !sc.full || !smoke
		if (only == "" && inSmoke) || slices.Contains(strings.Split(only, ","), sc.key) {
			for range max(repeat, 1) {
				picked = append(picked, sc)
			}
		}
	}
	// The first wave warms the processes up (connections, caches, the
	// workers' sessions); the second, fault-free, is the baseline.
	scenarios := append([]scenario{{key: "warm-up", name: "warm-up (no fault)"}, {key: "none", name: "fault-free"}}, picked...)
	var base time.Duration
	fmt.Printf("%-40s %10s %8s %9s %s\n", "fault", "converged", "added", "max gap", "invariants")
	for i, sc := range scenarios {
		res, err := s.wave(ctx, i, n, sc)
		if err != nil {
			return fmt.Errorf("%s: %w", sc.name, err)
		}
		if i <= 1 {
			base = res.took
		}
		fmt.Printf("%-40s %9.1fs %+7.1fs %8.1fs %s\n", sc.name, res.took.Seconds(), (res.took - base).Seconds(),
			res.maxGap.Seconds(), res.verdict())
		if !res.ok() {
			return errors.New("an invariant failed; logs in " + s.dir)
		}
		if sc.after != nil {
			if err := sc.after(); err != nil {
				return err
			}
		}
	}
	return nil
}

type scenario struct {
	key  string
	name string
	// full: only in the full suite, not the CI smoke.
	full bool
	// outage is how long the fault itself stops all progress (a frozen
	// database): the progress invariant starts counting after it.
	outage time.Duration
	inject func() error
	after  func() error
}

type result struct {
	took, maxGap time.Duration
	complete     bool
	stranded     int
	// doubled counts claims with more than one result applied (the
	// invariant), reapplied resources with results of two claims applied.
	doubled, reapplied int
	// logRate is the most log lines per second one converge process wrote
	// over the wave.
	logRate float64
}

func (r result) ok() bool {
	return r.complete && r.stranded == 0 && r.maxGap <= 5*time.Second && r.doubled == 0
}

func (r result) verdict() string {
	return fmt.Sprintf("completion=%t progress=%t stranded=%d applied-twice=%d logs=%.1f/s (re-applied under a second claim: %d)",
		r.complete, r.maxGap <= 5*time.Second, r.stranded, r.doubled, r.logRate, r.reapplied)
}

func boot(ctx context.Context) (*stack, error) {
	dir, err := os.MkdirTemp("", "converge-chaos-")
	if err != nil {
		return nil, err
	}
	s := &stack{dir: dir}
	fmt.Println("chaos: logs in", dir)
	// Fast (no fsync: only an OS crash would need it) but with
	// synchronous_commit on: a commit Postgres acknowledged survives the
	// immediate restart (a crash of the server process), as in production.
	s.pgOpts = pgcluster.Options{DataDir: filepath.Join(dir, "pg"), Port: freePort(), Fast: true,
		Settings: map[string]string{"synchronous_commit": "on"}, Logger: zerolog.Nop()}
	if s.pg, err = pgcluster.Start(ctx, s.pgOpts); err != nil {
		return nil, err
	}
	if err := s.pg.CreateDatabase(ctx, "converge"); err != nil {
		return s, err
	}
	if s.proxy, err = tcpproxy.Start(fmt.Sprintf("127.0.0.1:%d", s.pg.Port())); err != nil {
		return s, err
	}
	bin := filepath.Join(dir, "converge")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/converge").CombinedOutput(); err != nil {
		return s, fmt.Errorf("build converge (run from the repository root): %w\n%s", err, out)
	}
	// Authenticated like a production cluster: worker and mesh tokens. The
	// per-dispatch lease secrets are then verifiable by every broker, so a
	// worker's completions redelivered to another broker after a fault
	// apply (without mesh tokens each broker's key is its own, and they
	// wait out the stale-lease window).
	workerToken, meshToken := randomToken(), randomToken()
	for name, content := range map[string]string{"worker-tokens": workerToken + " chaos-worker\n", "mesh-tokens": meshToken + " chaos-mesh\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			return s, err
		}
	}
	for i, port := range []int{s.pg.Port(), s.proxy.Port()} {
		api := freePort()
		s.apiPorts = append(s.apiPorts, api)
		s.servers = append(s.servers, &proc{name: "converge-" + strconv.Itoa(i), args: []string{bin},
			log: filepath.Join(dir, fmt.Sprintf("converge-%d.log", i)),
			env: []string{"DATABASE_URL=" + fmt.Sprintf("postgres://postgres@127.0.0.1:%d/converge?sslmode=disable", port),
				"ROLE=all", fmt.Sprintf("LISTEN_ADDR=127.0.0.1:%d", api), "LOG_FORMAT=json", "SHUTDOWN_DRAIN=5s",
				"WORKER_TOKENS_FILE=" + filepath.Join(dir, "worker-tokens"), "MESH_TOKENS_FILE=" + filepath.Join(dir, "mesh-tokens")}})
		if err := s.restartServer(ctx, i); err != nil {
			return s, err
		}
	}
	if s.pool, err = pgxpool.New(ctx, s.pg.URL("converge")); err != nil {
		return s, err
	}
	s.st = store.New(s.pool, nil)
	if _, _, err := s.st.ApplyManifest(ctx, []byte(leafKind)); err != nil {
		return s, err
	}
	if err := s.st.InstallApplyAudit(ctx); err != nil {
		return s, err
	}
	self, err := os.Executable()
	if err != nil {
		return s, err
	}
	// worker-0 reaches converge-0 through a proxy too, so its connection
	// can be silenced (blackholed, no FIN or RST: what a half-open
	// connection looks like from both ends).
	if s.workerProxy, err = tcpproxy.Start(fmt.Sprintf("127.0.0.1:%d", s.apiPorts[0])); err != nil {
		return s, err
	}
	for i, api := range []int{s.workerProxy.Port(), s.apiPorts[1]} {
		w := &proc{name: "worker-" + strconv.Itoa(i), args: []string{self, "-worker", fmt.Sprintf("http://127.0.0.1:%d", api)},
			log: filepath.Join(dir, fmt.Sprintf("worker-%d.log", i)), env: []string{"CHAOS_WORKER_TOKEN=" + workerToken}}
		if err := w.start(); err != nil {
			return s, err
		}
		s.workers = append(s.workers, w)
	}
	return s, nil
}

func (s *stack) restartServer(ctx context.Context, i int) error {
	if err := s.servers[i].start(); err != nil {
		return err
	}
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		res, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", s.apiPorts[i]))
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s never became ready", s.servers[i].name)
}

// restartPostgres stops the server and starts it again on the same data
// directory and port: a fast shutdown (every session ends, a checkpoint) or,
// immediate, a crash (SIGQUIT: no checkpoint, crash recovery on start, and
// the UNLOGGED queue and outbox come back empty).
func (s *stack) restartPostgres(ctx context.Context, immediate bool) error {
	if immediate {
		pid, err := s.postmaster()
		if err != nil {
			return err
		}
		if err := syscall.Kill(pid, syscall.SIGQUIT); err != nil {
			return fmt.Errorf("SIGQUIT postgres: %w", err)
		}
	}
	if err := s.pg.Stop(); err != nil {
		return err
	}
	pg, err := pgcluster.Start(ctx, s.pgOpts)
	if err != nil {
		return err
	}
	s.pg = pg
	return nil
}

// postmaster is the running server's process id (postmaster.pid's first
// line); it leads the process group of every backend.
func (s *stack) postmaster() (int, error) {
	b, err := os.ReadFile(filepath.Join(s.pg.DataDir(), "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("read postmaster.pid: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return 0, fmt.Errorf("postmaster.pid: %w", err)
	}
	return pid, nil
}

// freezePostgres stops every Postgres process (SIGSTOP to the postmaster,
// then to each of its children: every backend calls setsid, so they are not
// in its process group) and resumes them after d: connections stay open,
// nothing answers.
func (s *stack) freezePostgres(d time.Duration) error {
	pid, err := s.postmaster()
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("SIGSTOP postgres: %w", err)
	}
	procs := append([]int{pid}, childrenOf(pid)...)
	for _, c := range procs[1:] {
		_ = syscall.Kill(c, syscall.SIGSTOP)
	}
	time.AfterFunc(d, func() {
		for _, c := range slices.Backward(procs) {
			_ = syscall.Kill(c, syscall.SIGCONT)
		}
	})
	return nil
}

// childrenOf lists the processes whose parent is pid (from /proc).
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		rest := string(b[bytes.LastIndexByte(b, ')')+1:])
		if f := strings.Fields(rest); len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

func (s *stack) close() {
	for _, p := range append(s.workers, s.servers...) {
		if p.cmd != nil && p.cmd.ProcessState == nil {
			p.stop()
		}
	}
	if s.pool != nil {
		s.pool.Close()
	}
	if s.workerProxy != nil {
		s.workerProxy.Close()
	}
	if s.proxy != nil {
		s.proxy.Close()
	}
	if s.pg != nil {
		_ = s.pg.Stop()
	}
}

// ready is the number of Ready leaves (folded phase counts: about a second
// behind).
func (s *stack) ready(ctx context.Context) (int, error) {
	counts, err := s.st.PhaseCounts(ctx, "leaf")
	if err != nil {
		return 0, err
	}
	for _, c := range counts {
		if c.Phase == resource.PhaseReady {
			return int(c.Count), nil
		}
	}
	return 0, nil
}

// wave applies n resources, injects the fault at a third settled, and waits
// for all of them.
func (s *stack) wave(ctx context.Context, w, n int, sc scenario) (result, error) {
	start := time.Now()
	logsBefore := s.logLines()
	for i := range n {
		if _, _, err := s.st.ApplyResource(ctx, store.ApplyResourceInput{Kind: "leaf",
			Name: fmt.Sprintf("w%d-%d", w, i), Spec: json.RawMessage(`{}`)}); err != nil {
			return result{}, err
		}
	}
	s.applied += n
	target, injected := s.applied, sc.inject == nil
	var res result
	last, lastAt := -1, time.Now()
	dumped := false
	deadline := start.Add(3 * time.Minute)
	var quietUntil time.Time // the fault's own outage: no progress expected
	for time.Now().Before(deadline) {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		got, err := s.ready(rctx)
		cancel()
		if err != nil { // the suite's own reads fail while Postgres restarts or is frozen
			got = max(last, 0)
		}
		if got != last {
			last, lastAt = got, time.Now()
		}
		if gap := time.Since(maxTime(lastAt, quietUntil)); time.Now().After(quietUntil) {
			res.maxGap = max(res.maxGap, gap)
			if gap > 3*time.Second && !dumped {
				dumped = true
				s.dumpQueue(ctx)
			}
		}
		if !injected && got-(target-n) >= n/3 {
			if err := sc.inject(); err != nil {
				return res, err
			}
			injected, quietUntil = true, time.Now().Add(sc.outage)
		}
		if got >= target {
			res.took, res.complete = time.Since(start), true
			break
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if !res.complete {
		res.took = time.Since(start)
	}
	page, err := s.st.ListResources(ctx, store.ListOptions{Kind: "leaf",
		Phases: []resource.Phase{resource.PhaseReconciling, resource.PhaseFailed}, Limit: 500})
	if err != nil {
		return res, err
	}
	res.stranded = len(page.Items)
	for i, after := range s.logLines() {
		res.logRate = max(res.logRate, float64(after-logsBefore[i])/res.took.Seconds())
	}
	if res.doubled, res.reapplied, err = s.st.AppliedTwice(ctx); err != nil {
		return res, err
	}
	return res, nil
}

func freePort() int {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// randomToken is a fresh bearer token (32 random bytes, hex).
func randomToken() string {
	b := make([]byte, 32)
	if _, err := crand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

// dumpQueue prints what the queue holds while a wave stalls: its rows by
// claimer, with their lease and heartbeat ages (a lease nobody heartbeats is
// one its broker lost track of).
func (s *stack) dumpQueue(ctx context.Context) {
	holders, err := s.st.QueueHolders(ctx)
	if err != nil {
		fmt.Println("  stall: queue dump:", err)
		return
	}
	fmt.Printf("  stall at %s:\n", time.Now().UTC().Format("15:04:05.000"))
	if counts, err := s.st.PhaseCounts(ctx, "leaf"); err == nil {
		fmt.Printf("    leaves by phase: %v (of %d applied)\n", counts, s.applied)
	}
	for _, h := range holders {
		holder := h.WorkerID
		if holder == "" {
			holder = "(unleased)"
		}
		fmt.Printf("    %s: %d rows, oldest lease %.1fs, newest heartbeat %.1fs ago, %d with a result in the outbox\n",
			holder, h.Rows, h.OldestLease.Seconds(), h.NewestBeat.Seconds(), h.WithResult)
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// logLines counts the lines of each converge process's log so far.
func (s *stack) logLines() []int {
	out := make([]int, len(s.servers))
	for i, p := range s.servers {
		b, err := os.ReadFile(p.log)
		if err == nil {
			out[i] = bytes.Count(b, []byte("\n"))
		}
	}
	return out
}
