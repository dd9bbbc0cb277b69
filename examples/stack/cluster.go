package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/converge-run/converge/core/loopback"
)

// Topology is the shape of the local cluster: how many converge processes
// of each role and how many workers. The zero value is the single-process
// stack (one ROLE=all converge and one worker); any count set makes a
// cluster: Controls ROLE=control processes (ROLE=all when Brokers is 0,
// at least one), Brokers ROLE=broker processes (probes on their own
// HEALTH_ADDR, advertised to their peers by BROKER_URL), and Workers
// worker processes, which dial the brokers through a local round-robin
// TCP balancer that skips draining and dead brokers — what a Kubernetes
// Service does for the chart's worker Deployments.
type Topology struct {
	Controls, Brokers, Workers int
}

// MaxPerRole bounds each count (every process is a real child).
const MaxPerRole = 16

// Cluster reports whether the topology asks for more than the single stack.
func (t Topology) Cluster() bool { return t != Topology{} }

func (t Topology) validate() error {
	for name, n := range map[string]int{"controls": t.Controls, "brokers": t.Brokers, "workers": t.Workers} {
		if n < 0 || n > MaxPerRole {
			return fmt.Errorf("topology: %d %s, want 0 to %d", n, name, MaxPerRole)
		}
	}
	return nil
}

// normalized fills in the defaults: one control, one worker.
func (t Topology) normalized() Topology {
	t.Controls = max(t.Controls, 1)
	t.Workers = max(t.Workers, 1)
	return t
}

// Member is one process of the stack.
type Member struct {
	Name string
	// Role is all, control, broker or worker.
	Role string
	// URL is the API (all, control) or broker listener (broker); "" for workers.
	URL string
	// ReadyURL answers /readyz (HEALTH_ADDR on brokers); "" for workers.
	ReadyURL string

	proc *process
	// draining and gone are guarded by Stack.mu (the balancer reads them).
	draining, gone bool
}

// Pid is the member's process id.
func (m *Member) Pid() int { return m.proc.Pid() }

// servesWorkers reports whether workers can connect to the member.
func (m *Member) servesWorkers() bool { return m.Role == "all" || m.Role == "broker" }

// Members lists the stack's processes in start order (gone ones included).
func (s *Stack) Members() []*Member {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Member(nil), s.members...)
}

// Member finds a member by name.
func (s *Stack) Member(name string) (*Member, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.members {
		if m.Name == name {
			return m, nil
		}
	}
	return nil, fmt.Errorf("no member %q", name)
}

// Drain stops a member the way Kubernetes does: out of the balancer, then
// SIGTERM (a broker drains for SHUTDOWN_DRAIN, a worker for
// WORKER_DRAIN_TIMEOUT), waiting up to grace before killing it. It returns
// the process's exit error if it did not exit cleanly.
func (s *Stack) Drain(name string, grace time.Duration) error {
	m, err := s.Member(name)
	if err != nil {
		return err
	}
	s.mu.Lock()
	m.draining = true
	s.mu.Unlock()
	err = m.proc.stop(grace)
	s.mu.Lock()
	m.gone = true
	s.mu.Unlock()
	return err
}

// Kill ends a member with SIGKILL (a crash: no drain, no deregistration).
func (s *Stack) Kill(name string) error {
	m, err := s.Member(name)
	if err != nil {
		return err
	}
	s.mu.Lock()
	m.draining, m.gone = true, true
	s.mu.Unlock()
	m.proc.stopped = true
	if err := syscall.Kill(-m.Pid(), syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %s: %w", name, err)
	}
	<-m.proc.done
	return nil
}

// Reap reports the members that exited on their own since the last call
// (killed from outside, crashed) and takes them out of the balancer.
func (s *Stack) Reap() []*Member {
	var out []*Member
	for _, m := range s.Members() {
		if m.proc.stopped {
			continue
		}
		if ok, _ := m.proc.exited(); ok {
			m.proc.stopped = true
			s.mu.Lock()
			m.gone = true
			s.mu.Unlock()
			out = append(out, m)
		}
	}
	return out
}

// Exited reports whether the member's process has ended (on its own, or
// through Drain or Kill).
func (m *Member) Exited() bool {
	ok, _ := m.proc.exited()
	return ok
}

// ExitError is the exit error of a member that has ended.
func (m *Member) ExitError() error {
	if ok, err := m.proc.exited(); ok {
		return err
	}
	return nil
}

// Add starts one more member of the role (control, broker or worker) and,
// for a server, waits until it is ready.
func (s *Stack) Add(ctx context.Context, role string) (*Member, error) {
	if role == "control" && s.opts.Topology.Brokers == 0 {
		role = "all" // the controls are the brokers too
	}
	switch role {
	case "control", "broker", "all":
		m, err := s.startServer(role, "")
		if err != nil {
			return nil, err
		}
		return m, s.waitReady(ctx, m, s.opts.ReadyTimeout)
	case "worker":
		return s.startWorker()
	}
	return nil, fmt.Errorf("add %q: want control, broker or worker", role)
}

func (s *Stack) nextName(role string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 1
	for _, m := range s.members {
		if m.Role == role || (role == "control" && m.Role == "all") {
			n++
		}
	}
	return fmt.Sprintf("%s-%d", role, n)
}

// startServers starts the converge processes: the first one alone (it
// migrates the schema), then the rest together, each waited for until its
// /readyz answers.
func (s *Stack) startServers(ctx context.Context, listen string) error {
	top := s.opts.Topology.normalized()
	if !s.opts.Topology.Cluster() {
		env, err := s.serverEnv("converge", "all", listen, "")
		if err != nil {
			return err
		}
		m, err := s.startMember("converge", "all", s.opts.ConvergeBin, nil, env, s.BaseURL, s.BaseURL)
		if err != nil {
			return err
		}
		s.converge = m.proc
		return s.waitReady(ctx, m, s.opts.ReadyTimeout)
	}
	role := "control"
	if top.Brokers == 0 {
		role = "all"
	}
	first, err := s.startServer(role, listen)
	if err != nil {
		return err
	}
	s.converge = first.proc
	if err := s.waitReady(ctx, first, s.opts.ReadyTimeout); err != nil {
		return err
	}
	var rest []*Member
	for i := 1; i < top.Controls; i++ {
		m, err := s.startServer(role, "")
		if err != nil {
			return err
		}
		rest = append(rest, m)
	}
	for range top.Brokers {
		m, err := s.startServer("broker", "")
		if err != nil {
			return err
		}
		rest = append(rest, m)
	}
	for _, m := range rest {
		if err := s.waitReady(ctx, m, s.opts.ReadyTimeout); err != nil {
			return err
		}
	}
	return nil
}

// startServer starts one converge process of the role on listen (a free
// loopback port when empty).
func (s *Stack) startServer(role, listen string) (*Member, error) {
	if listen == "" {
		var err error
		if listen, err = loopback.Addr(); err != nil {
			return nil, err
		}
	}
	url := "http://" + listen
	ready := url
	var health string
	if role == "broker" {
		h, err := loopback.Addr()
		if err != nil {
			return nil, err
		}
		health, ready = h, "http://"+h
	}
	name := s.nextName(role)
	if role == "all" {
		name = s.nextName("control")
	}
	env, err := s.serverEnv(name, role, listen, health)
	if err != nil {
		return nil, err
	}
	return s.startMember(name, role, s.opts.ConvergeBin, nil, env, url, ready)
}

func (s *Stack) serverEnv(name, role, listen, health string) ([]string, error) {
	dbURL, err := s.databaseURLFor(name)
	if err != nil {
		return nil, err
	}
	env := append(inheritedEnv(stackServerVar), "DATABASE_URL="+dbURL, "ROLE="+role, "LISTEN_ADDR="+listen)
	if s.opts.Topology.Cluster() && role != "control" {
		env = append(env, "BROKER_URL=http://"+listen)
	}
	if health != "" {
		env = append(env, "HEALTH_ADDR="+health)
	}
	env = append(env, s.creds.convergeEnv...)
	return append(env, s.opts.ConvergeEnv...), nil
}

// databaseURLFor is the converge database's URL as member dials it
// (through Options.Via when set).
func (s *Stack) databaseURLFor(member string) (string, error) {
	if s.opts.Via == nil {
		return s.DatabaseURL, nil
	}
	u, err := url.Parse(s.DatabaseURL)
	if err != nil {
		return "", fmt.Errorf("database url: %w", err)
	}
	if u.Host, err = s.opts.Via(member, u.Host); err != nil {
		return "", fmt.Errorf("%s's route to postgres: %w", member, err)
	}
	return u.String(), nil
}

func (s *Stack) startMember(name, role, bin string, args, env []string, url, ready string) (*Member, error) {
	p, err := startProcess(name, bin, args, env, s.opts.Output)
	if err != nil {
		return nil, err
	}
	m := &Member{Name: name, Role: role, URL: url, ReadyURL: ready, proc: p}
	s.mu.Lock()
	s.members = append(s.members, m)
	s.mu.Unlock()
	return m, nil
}

// startWorkers starts the workers: against converge itself in the single
// stack, through the balancer in a cluster.
func (s *Stack) startWorkers() error {
	n := s.opts.Topology.normalized().Workers
	if s.opts.Topology.Cluster() {
		b, err := newBalancer(s.liveBrokers)
		if err != nil {
			return err
		}
		s.balancer = b
	}
	for range n {
		m, err := s.startWorker()
		if err != nil {
			return err
		}
		if s.worker == nil {
			s.worker = m.proc
		}
	}
	return nil
}

func (s *Stack) startWorker() (*Member, error) {
	brokerURL, name := s.BaseURL, "worker"
	if s.balancer != nil {
		brokerURL, name = "http://"+s.balancer.addr(), s.nextName("worker")
	}
	if s.opts.Via != nil {
		addr, err := s.opts.Via(name, strings.TrimPrefix(brokerURL, "http://"))
		if err != nil {
			return nil, fmt.Errorf("%s's route to the brokers: %w", name, err)
		}
		brokerURL = "http://" + addr
	}
	env := append(inheritedEnv(stackWorkerVar), "BROKER_URL="+brokerURL)
	if s.balancer != nil {
		env = append(env, "WORKER_ID="+name)
	}
	env = append(env, s.creds.workerEnv...)
	return s.startMember(name, "worker", s.opts.WorkerBin, s.opts.WorkerArgs, append(env, s.opts.WorkerEnv...), "", "")
}

// liveBrokers are the host:port of the members workers may connect to now.
func (s *Stack) liveBrokers() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, m := range s.members {
		if m.servesWorkers() && !m.draining && !m.gone {
			out = append(out, m.URL[len("http://"):])
		}
	}
	return out
}

// waitReady polls the member's /readyz until it answers 200, the process
// exits, or the timeout passes.
func (s *Stack) waitReady(ctx context.Context, m *Member, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, m.ReadyURL+"/readyz", nil)
		if res, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-m.proc.done:
			return fmt.Errorf("%s exited during start-up: %w", m.Name, m.proc.err)
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s/readyz: %w", m.Name, m.ReadyURL, ctx.Err())
		case <-tick.C:
		}
	}
}

// stopMembers stops every member still running, last started first
// (workers, then brokers, then controls), each with grace.
func (s *Stack) stopMembers(grace time.Duration) error {
	var errs []error
	ms := s.Members()
	for i := len(ms) - 1; i >= 0; i-- {
		if m := ms[i]; !m.proc.stopped {
			errs = append(errs, m.proc.stop(grace))
		}
	}
	if s.balancer != nil {
		s.balancer.close()
	}
	return errors.Join(errs...)
}

// balancer is a round-robin TCP proxy in front of the live brokers: each
// new connection (a worker's session) goes to the next one that accepts.
type balancer struct {
	ln      net.Listener
	targets func() []string
	next    atomic.Uint64
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
}

func newBalancer(targets func() []string) (*balancer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("the workers' balancer: %w", err)
	}
	b := &balancer{ln: ln, targets: targets, conns: map[net.Conn]struct{}{}}
	b.wg.Add(1)
	go b.serve()
	return b, nil
}

func (b *balancer) addr() string { return b.ln.Addr().String() }

func (b *balancer) serve() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.handle(c)
		}()
	}
}

func (b *balancer) track(c net.Conn, add bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if add {
		b.conns[c] = struct{}{}
	} else {
		delete(b.conns, c)
	}
}

func (b *balancer) handle(c net.Conn) {
	b.track(c, true)
	defer func() { b.track(c, false); c.Close() }()
	ts := b.targets()
	start := int(b.next.Add(1))
	for i := range ts {
		up, err := net.DialTimeout("tcp", ts[(start+i)%len(ts)], 2*time.Second)
		if err != nil {
			continue
		}
		b.track(up, true)
		done := make(chan struct{}, 2)
		go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
		go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
		<-done
		up.Close()
		b.track(up, false)
		return
	}
}

// close stops accepting and cuts every proxied connection.
func (b *balancer) close() {
	b.ln.Close()
	b.mu.Lock()
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// inheritedEnv is this process's environment less the variables drop names:
// what the stack sets itself, or provisions (credentials, TLS, its own
// database). A developer's shell may hold a production DATABASE_READ_URL or
// the WORKER_TOKEN the docs have them export for a standalone worker; passed
// on, one would point the stack at another database and the other would sit
// beside the stack's WORKER_TOKEN_FILE, which a worker refuses.
func inheritedEnv(drop func(name string) bool) []string {
	var out []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !drop(name) {
			out = append(out, kv)
		}
	}
	return out
}

// stackServerVar names what the stack decides for a converge process.
func stackServerVar(name string) bool {
	switch name {
	case "DATABASE_URL", "DATABASE_READ_URL", "DB_IAM_AUTH", "ROLE", "LISTEN_ADDR", "HEALTH_ADDR", "BROKER_ADDR",
		"BROKER_URL", "BROKER_TLS_SERVER_NAME", "API_TOKENS_FILE", "WORKER_TOKENS_FILE", "MESH_TOKENS_FILE",
		"API_AUTH", "WORKER_AUTH":
		return true
	}
	return strings.HasPrefix(name, "TLS_") || strings.HasSuffix(name, "_CLIENT_IDENTITIES")
}

// stackWorkerVar names what the stack decides for a worker process.
func stackWorkerVar(name string) bool {
	switch name {
	case "BROKER_URL", "WORKER_ID", "WORKER_TOKEN", "WORKER_TOKEN_FILE":
		return true
	}
	return strings.HasPrefix(name, "WORKER_TLS_")
}
