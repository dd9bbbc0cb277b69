// Package pgcluster starts a private Postgres cluster from the machine's
// server binaries: for the local stack (cmd/devstack), for benchmarks and for
// the test harness (db/pgtest).
//
// The cluster listens on a unix socket in a private directory and on a free
// loopback TCP port. When the process runs as root the server runs as the
// unprivileged "postgres" OS user, since Postgres refuses to run as root. The
// server is tied to this process: it gets SIGQUIT if this process dies
// (PR_SET_PDEATHSIG), and temporary data directories left behind by a killed
// process are swept by the next Start.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
)

// Options configures a cluster.
type Options struct {
	// DataDir keeps the cluster's data between runs. Empty: a temporary
	// directory that Stop removes.
	DataDir string
	// Port is the loopback TCP port; 0 picks a free one.
	Port int
	// Fast trades durability for speed (fsync, synchronous_commit and
	// full_page_writes off). Only for tests: a crash can lose data.
	Fast bool
	// Settings are extra server settings passed as -c name=value.
	Settings map[string]string
	// StartTimeout bounds initdb + start-up; default 60s.
	StartTimeout time.Duration
	Logger       zerolog.Logger
}

// Cluster is a running private Postgres server.
type Cluster struct {
	opts     Options
	bins     Binaries
	root     string // temp root to remove on Stop ("" when DataDir was given)
	dataDir  string
	sockDir  string
	port     int
	cmd      *exec.Cmd
	exited   chan struct{}
	exitErr  error
	logFile  *os.File
	stopOnce sync.Once
}

const tempPrefix = "converge-pg-"

// Start initialises (when the data directory is empty) and starts a cluster,
// returning once it accepts connections.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 60 * time.Second
	}
	bins, err := findBinaries()
	if err != nil {
		return nil, err
	}
	if major, err := serverMajor(bins.Postgres); err != nil {
		return nil, err
	} else if major < 15 {
		return nil, fmt.Errorf("postgres %d at %s is too old: converge needs 15 or newer", major, bins.Postgres)
	}
	sweepStaleTempDirs(opts.Logger)

	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()

	owner, err := serverUser()
	if err != nil {
		return nil, err
	}
	if opts.Port != 0 {
		if err := portFree(opts.Port); err != nil {
			return nil, err
		}
	}
	c := &Cluster{opts: opts, bins: bins, exited: make(chan struct{})}
	if err := c.prepareDirs(owner); err != nil {
		c.removeTemp()
		return nil, err
	}
	if err := c.initdb(ctx, owner); err != nil {
		c.removeTemp()
		return nil, err
	}
	// A free port can be taken between probing and binding; retry a few times.
	for attempt := 0; ; attempt++ {
		port := opts.Port
		if port == 0 {
			if port, err = freePort(); err != nil {
				c.removeTemp()
				return nil, err
			}
		}
		c.port = port
		err = c.start(ctx, owner)
		if err == nil {
			return c, nil
		}
		c.kill()
		if opts.Port != 0 || attempt >= 3 || ctx.Err() != nil {
			c.removeTemp()
			return nil, err
		}
		c.exited = make(chan struct{})
	}
}

// credential is the OS identity the server runs as; nil means "this process".
type credential struct{ uid, gid uint32 }

func serverUser() (*credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root: postgres refuses root and the unprivileged OS user %q was not found "+
			"(create it, e.g. apt-get install postgresql-common, or run as a normal user): %w", "postgres", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &credential{uid: uint32(uid), gid: uint32(gid)}, nil
}

func (c *Cluster) prepareDirs(owner *credential) error {
	if c.opts.DataDir == "" {
		root, err := os.MkdirTemp("", tempPrefix)
		if err != nil {
			return fmt.Errorf("create temp dir: %w", err)
		}
		c.root = root
		c.dataDir = filepath.Join(root, "data")
		c.sockDir = filepath.Join(root, "sock")
		// Record the owning pid so a later Start can sweep this directory if
		// this process is killed before it can clean up.
		if err := os.WriteFile(filepath.Join(root, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			return fmt.Errorf("write owner pid: %w", err)
		}
	} else {
		abs, err := filepath.Abs(c.opts.DataDir)
		if err != nil {
			return fmt.Errorf("resolve data dir: %w", err)
		}
		c.dataDir = abs
		// Unix socket paths are limited to ~107 bytes: keep the socket in a
		// short private temp dir rather than beside a possibly deep data dir.
		sock, err := os.MkdirTemp("", tempPrefix+"sock-")
		if err != nil {
			return fmt.Errorf("create socket dir: %w", err)
		}
		c.sockDir = sock
		c.root = ""
	}
	for _, d := range []string{c.dataDir, c.sockDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	if owner == nil {
		return nil
	}
	// The server user must be able to reach its directories: every parent
	// must be traversable and the leaves must be owned by it.
	for _, d := range []string{c.dataDir, c.sockDir} {
		if err := os.Chown(d, int(owner.uid), int(owner.gid)); err != nil {
			return fmt.Errorf("chown %s to the postgres user: %w", d, err)
		}
		for p := filepath.Dir(d); p != "/" && p != "."; p = filepath.Dir(p) {
			st, err := os.Stat(p)
			if err != nil {
				return fmt.Errorf("stat %s: %w", p, err)
			}
			if st.Mode().Perm()&0o001 == 0 {
				if err := os.Chmod(p, st.Mode().Perm()|0o011); err != nil {
					return fmt.Errorf("make %s traversable for the postgres user: %w", p, err)
				}
			}
		}
	}
	return nil
}

func (c *Cluster) initdb(ctx context.Context, owner *credential) error {
	if _, err := os.Stat(filepath.Join(c.dataDir, "PG_VERSION")); err == nil {
		return nil // existing cluster
	}
	cmd := exec.CommandContext(ctx, c.bins.Initdb,
		"-D", c.dataDir, "-U", "postgres", "-A", "trust", "-E", "UTF8",
		"--locale=C.UTF-8", "--no-sync", "--no-instructions")
	c.sysProc(cmd, owner)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("initdb %s: %w\n%s", c.dataDir, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (c *Cluster) sysProc(cmd *exec.Cmd, owner *credential) {
	cmd.Dir = c.sockDir
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8", "LANG=C.UTF-8")
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGQUIT}
	if owner != nil {
		attr.Credential = &syscall.Credential{Uid: owner.uid, Gid: owner.gid, NoSetGroups: true}
	}
	cmd.SysProcAttr = attr
}

func (c *Cluster) start(ctx context.Context, owner *credential) error {
	args := []string{
		"-D", c.dataDir,
		"-k", c.sockDir,
		"-p", strconv.Itoa(c.port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "max_connections=300",
		"-c", "logging_collector=off",
		"-c", "log_min_messages=warning",
	}
	if c.opts.Fast {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	for k, v := range c.opts.Settings {
		args = append(args, "-c", k+"="+v)
	}
	logPath := filepath.Join(c.sockDir, "postgres.log")
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open server log: %w", err)
	}
	c.logFile = lf
	cmd := exec.Command(c.bins.Postgres, args...)
	c.sysProc(cmd, owner)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	c.cmd = cmd
	go func() {
		c.exitErr = cmd.Wait()
		close(c.exited)
	}()

	// Ready is asked over the private socket: only this server answers
	// there, while on the loopback port another server (the port taken
	// between probing and binding, or given twice) would answer first.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		conn, err := pgx.Connect(ctx, c.SocketURL("postgres"))
		if err == nil {
			_ = conn.Close(ctx)
			c.opts.Logger.Debug().Str("data_dir", c.dataDir).Int("port", c.port).Msg("private postgres ready")
			return nil
		}
		select {
		case <-c.exited:
			exit := c.exitErr
			if exit == nil {
				exit = errors.New("exit status 0")
			}
			return fmt.Errorf("postgres exited during start-up (%w); log:\n%s", exit, tail(logPath, 20))
		case <-ctx.Done():
			return fmt.Errorf("postgres not ready in time: %w; log:\n%s", ctx.Err(), tail(logPath, 20))
		case <-tick.C:
		}
	}
}

// URL is a connection string over TCP loopback for the given database.
func (c *Cluster) URL(dbname string) string {
	u := url.URL{Scheme: "postgres", User: url.User("postgres"), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)), Path: "/" + dbname}
	u.RawQuery = "sslmode=disable"
	return u.String()
}

// SocketURL is a connection string over the private unix socket.
func (c *Cluster) SocketURL(dbname string) string {
	return fmt.Sprintf("postgres://postgres@/%s?host=%s&port=%d&sslmode=disable", url.PathEscape(dbname), url.QueryEscape(c.sockDir), c.port)
}

// CreateDatabase creates a database unless it exists.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return fmt.Errorf("connect to private postgres: %w", err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return fmt.Errorf("look up database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// Port is the TCP port the server listens on.
func (c *Cluster) Port() int { return c.port }

// DataDir is the cluster's data directory.
func (c *Cluster) DataDir() string { return c.dataDir }

// BinDir is the directory of the server binaries the cluster runs (symlinks
// resolved, so a PATH link leads to Debian's versioned bin directory); the
// matching client programs (pg_dump, psql) live beside them.
func (c *Cluster) BinDir() string {
	p := c.bins.Postgres
	if r, err := filepath.EvalSymlinks(p); err == nil {
		p = r
	}
	return filepath.Dir(p)
}

// Stop shuts the server down (fast shutdown, then SIGKILL of its process
// group after a grace period) and removes temporary data. Safe to call twice.
func (c *Cluster) Stop() error {
	var err error
	c.stopOnce.Do(func() {
		if c.cmd != nil && c.cmd.Process != nil {
			_ = c.cmd.Process.Signal(syscall.SIGINT) // fast shutdown
			select {
			case <-c.exited:
			case <-time.After(10 * time.Second):
				c.kill()
				<-c.exited
				err = errors.New("postgres did not stop within 10s; killed")
			}
		}
		if c.logFile != nil {
			_ = c.logFile.Close()
		}
		c.removeTemp()
	})
	return err
}

func (c *Cluster) kill() {
	if c.cmd == nil || c.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-c.exited:
	case <-time.After(5 * time.Second):
	}
}

func (c *Cluster) removeTemp() {
	if c.root != "" {
		_ = os.RemoveAll(c.root)
	} else if c.sockDir != "" {
		_ = os.RemoveAll(c.sockDir)
	}
}

// sweepStaleTempDirs removes temp clusters whose owning process is gone
// (a test binary killed with SIGKILL cannot clean up after itself).
func sweepStaleTempDirs(log zerolog.Logger) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempPrefix+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "owner.pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || processAlive(pid) {
			continue
		}
		// The server itself got SIGQUIT through PDEATHSIG; give it a moment
		// only if its pid file is still there.
		if err := os.RemoveAll(d); err == nil {
			log.Debug().Str("dir", d).Int("owner_pid", pid).Msg("removed stale private postgres")
		}
	}
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// portFree refuses a loopback port something already listens on.
func portFree(port int) error {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("loopback port %d is in use (another Postgres, or another stack given the same port?): %w", port, err)
	}
	return l.Close()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log)"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
