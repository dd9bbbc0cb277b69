package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/examples/chaos/tcpproxy"
	"github.com/converge-run/converge/examples/stack"
)

// The cluster under test: the topology the fault schedule names.
var topology = stack.Topology{Controls: 2, Brokers: 3, Workers: 4}

// silenceTimeout is the brokers' WORKER_SILENCE_TIMEOUT: shorter than the
// worker-cut fault's 8 s silence, so the fault exercises it.
const silenceTimeout = 4 * time.Second

// suite is the running system under test.
type suite struct {
	dir   string
	st    *stack.Stack
	store *store.Store
	logs  *lineCounter

	mu sync.Mutex
	// proxies are each member's route: to Postgres for a converge process,
	// to the brokers' balancer for a worker.
	proxies map[string]*tcpproxy.Proxy
	turn    int // rotates the member a fault hits
	// applied counts the resources the waves made so far (roots and their
	// children), roots the roots.
	applied, roots int
}

func boot(ctx context.Context, running *atomic.Pointer[stack.Stack]) (*suite, error) {
	dir, err := os.MkdirTemp("", "converge-chaos-")
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "cluster.log"))
	if err != nil {
		return nil, err
	}
	s := &suite{dir: dir, proxies: map[string]*tcpproxy.Proxy{}, logs: &lineCounter{out: logf, lines: map[string]int{}}}
	fmt.Println("chaos: logs in", filepath.Join(dir, "cluster.log"))
	self, err := os.Executable()
	if err != nil {
		return s, err
	}
	s.st, err = stack.Start(ctx, stack.Options{
		Addr: "127.0.0.1:0", DataDir: filepath.Join(dir, "pg"), Topology: topology,
		WorkerBin: self, WorkerArgs: []string{"-worker"},
		// Fast (no fsync: only an OS crash would need it) but with
		// synchronous_commit on: a commit Postgres acknowledged survives
		// the immediate restart (a crash of the server process), as in
		// production.
		PGSettings: map[string]string{"fsync": "off", "full_page_writes": "off", "synchronous_commit": "on"},
		ConvergeEnv: []string{"LOG_FORMAT=json", "SHUTDOWN_DRAIN=5s",
			"WORKER_SILENCE_TIMEOUT=" + silenceTimeout.String()},
		WorkerEnv: []string{"WORKER_DRAIN_TIMEOUT=5s"},
		Output:    s.logs,
		Via:       s.via,
		Setup: func(ctx context.Context, st *stack.Stack) error {
			if err := applyKinds(ctx, st.Store); err != nil {
				return err
			}
			return st.Store.InstallApplyAudit(ctx)
		},
		// The stack's own lines (a restart's stop and start times) go to the
		// cluster's log beside the members'.
		Log: zerolog.New(&prefixed{prefix: "[stack] ", out: s.logs}).With().Timestamp().Logger().Level(zerolog.InfoLevel),
	})
	if err != nil {
		return s, err
	}
	running.Store(s.st)
	s.store = s.st.Store
	return s, nil
}

// via starts member's proxy in front of target.
func (s *suite) via(member, target string) (string, error) {
	p, err := tcpproxy.Start(target)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	s.proxies[member] = p
	s.mu.Unlock()
	return p.Addr(), nil
}

// pick is a live member of role, a different one each time.
func (s *suite) pick(role string) (*stack.Member, error) {
	live := s.st.Live(role)
	if len(live) == 0 {
		return nil, fmt.Errorf("no live %s", role)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.turn++
	return live[s.turn%len(live)], nil
}

// kill SIGKILLs a member of role: a crash.
func (s *suite) kill(role string) error {
	m, err := s.pick(role)
	if err != nil {
		return err
	}
	return s.st.Kill(m.Name)
}

// add starts one more member of role (a join): its replacement after a
// kill.
func (s *suite) add(ctx context.Context, role string) error {
	_, err := s.st.Add(ctx, role)
	return err
}

// rollover is a rolling update's step: a new member of role joins, then
// an old one drains (SIGTERM: a broker hands back its leases within
// SHUTDOWN_DRAIN, a worker finishes its handlers) and leaves.
func (s *suite) rollover(ctx context.Context, role string) error {
	old, err := s.pick(role)
	if err != nil {
		return err
	}
	if err := s.add(ctx, role); err != nil {
		return err
	}
	return s.st.Drain(old.Name, 30*time.Second)
}

// route is the proxy of a live member of role (a different one each
// time): its route to Postgres for a converge process, to the brokers for
// a worker.
func (s *suite) route(role string) (*tcpproxy.Proxy, error) {
	m, err := s.pick(role)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.proxies[m.Name]; p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("%s has no proxy", m.Name)
}

// partition pauses the route of a member of role for d (bytes wait in
// socket buffers, nothing is closed: a half-open connection to both ends),
// and heals it.
func (s *suite) partition(ctx context.Context, role string, d time.Duration) error {
	p, err := s.route(role)
	if err != nil {
		return err
	}
	p.Pause()
	return healAfter(ctx, p, d)
}

// slowLink holds the route of a member of role back by latency in each
// direction for d, and heals it.
func (s *suite) slowLink(ctx context.Context, role string, latency, d time.Duration) error {
	p, err := s.route(role)
	if err != nil {
		return err
	}
	p.Delay(latency)
	return healAfter(ctx, p, d)
}

// healAfter heals p after d (at once if ctx ends first): a link fault's
// inject returns when the link is whole again, so the next wave never
// starts on a faulty one.
func healAfter(ctx context.Context, p *tcpproxy.Proxy, d time.Duration) error {
	defer p.Heal()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// reset resets the route of every live member of role: each of its
// connections gets an RST at both ends of the proxy.
func (s *suite) reset(role string) error {
	live := s.st.Live(role)
	if len(live) == 0 {
		return fmt.Errorf("no live %s", role)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range live {
		p := s.proxies[m.Name]
		if p == nil {
			return fmt.Errorf("%s has no proxy", m.Name)
		}
		p.Reset()
	}
	return nil
}

// signal sends sig to a worker (the demo worker's hang and slow switches).
func (s *suite) signal(role string, sig syscall.Signal) error {
	live := s.st.Live(role)
	if len(live) == 0 {
		return fmt.Errorf("no live %s", role)
	}
	return live[0].Signal(sig)
}

// freezePostgres stops every Postgres process (SIGSTOP to the postmaster,
// then to each of its children: every backend calls setsid, so they are not
// in its process group) and resumes them after d: connections stay open,
// nothing answers.
func (s *suite) freezePostgres(d time.Duration) error {
	pid, err := s.st.PostgresPid()
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

func (s *suite) close() {
	if s.st != nil {
		if err := s.st.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "chaos: teardown:", err)
		}
	}
	s.mu.Lock()
	for _, p := range s.proxies {
		p.Close()
	}
	s.mu.Unlock()
	if f, ok := s.logs.out.(*os.File); ok {
		_ = f.Close()
	}
}

// mark writes a timestamped line of the suite's own to the cluster's log
// (a fault's start and end, a wave's end), so the members' lines around a
// fault can be read against it.
func (s *suite) mark(msg string) {
	fmt.Fprintf(s.logs, "[chaos] {\"time\":%q,\"message\":%q}\n", time.Now().UTC().Format(time.RFC3339Nano), msg)
}

// prefixed writes each write (one zerolog line) to out behind prefix.
type prefixed struct {
	prefix string
	out    io.Writer
}

func (p *prefixed) Write(b []byte) (int, error) {
	if _, err := p.out.Write(append([]byte(p.prefix), b...)); err != nil {
		return 0, err
	}
	return len(b), nil
}

// logLines counts the log lines of each converge process so far.
func (s *suite) logLines() map[string]int {
	out := map[string]int{}
	for _, m := range s.st.Members() {
		if m.Role != "worker" {
			out[m.Name] = s.logs.count(m.Name)
		}
	}
	return out
}

// lineCounter is the stack's log sink: every line goes to out, stamped,
// and counted by the "[member] " prefix the stack puts on it.
type lineCounter struct {
	mu    sync.Mutex
	out   io.Writer
	lines map[string]int
}

func (l *lineCounter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if rest, ok := bytes.CutPrefix(b, []byte("[")); ok {
		if name, _, ok := bytes.Cut(rest, []byte("] ")); ok {
			l.lines[string(name)] += bytes.Count(b, []byte("\n"))
		}
	}
	// Each line is stamped with the time the suite received it, to the
	// millisecond (the processes' own timestamps are whole seconds), so a
	// fault's lines can be timed against the suite's marks.
	stamp := []byte(time.Now().UTC().Format("15:04:05.000 "))
	if _, err := l.out.Write(append(stamp, b...)); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (l *lineCounter) count(member string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lines[member]
}
