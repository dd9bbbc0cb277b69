// Package pgtest gives each test its own freshly migrated database on a real
// Postgres: one private cluster per test binary (db/pgcluster), one migrated
// template database, and a database per test cloned from it with
// CREATE DATABASE … TEMPLATE. Parallel-safe.
//
// Every package that uses it declares
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// so the cluster is stopped and its data removed when the binary ends, also
// on SIGINT/SIGTERM. PGTEST_MIGRATIONS_DIR replaces the embedded migrations
// with a directory's (iterating on a migration). TEST_DATABASE_URL points the harness at an existing
// server instead of starting one; the harness then creates (and drops) its
// own uniquely named template and test databases there.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/converge-run/converge/db/migrate"
	"github.com/converge-run/converge/db/migrations"
	"github.com/converge-run/converge/db/pgcluster"
	"github.com/converge-run/converge/db/pgpool"
)

type server struct {
	cluster  *pgcluster.Cluster // nil with TEST_DATABASE_URL
	baseURL  *url.URL           // admin connection (database "postgres")
	template string
	prefix   string
	external bool
}

var (
	once     sync.Once
	srv      *server
	errSrv   error
	seq      atomic.Int64
	cloneMu  sync.Mutex
	shutdown sync.Once
)

// Main runs the package's tests, fails the binary if a goroutine outlived
// them (goleak, as River's WrapTestMain), and stops the private cluster
// afterwards. ignore adds a package's own process-lifetime goroutines.
func Main(m *testing.M, ignore ...goleak.Option) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		stop()
		// Hand the signal back: with this handler gone it ends the binary
		// as it would have, unless the binary handles it itself — a helper
		// process the tests re-execute (a converge server draining on
		// SIGTERM), which an exit here would cut short.
		signal.Stop(sig)
		if s, ok := s.(syscall.Signal); ok {
			_ = syscall.Kill(os.Getpid(), s)
		}
	}()
	code := m.Run()
	if code == 0 {
		// Idle keep-alive connections of http.DefaultTransport (http.Get in
		// tests) are pooled, not leaked: close them before looking.
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		if err := goleak.Find(append(lifetime(), ignore...)...); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	stop()
	os.Exit(code)
}

// lifetime are the goroutines that live as long as the test binary, each
// with why.
func lifetime() []goleak.Option {
	return []goleak.Option{
		// Main's own handler, waiting for SIGINT/SIGTERM to stop the cluster.
		goleak.IgnoreTopFunction("github.com/converge-run/converge/db/pgtest.Main.func1"),
		// The private cluster's postgres, waited on until stop() ends it
		// after this check.
		goleak.IgnoreAnyFunction("github.com/converge-run/converge/db/pgcluster.(*Cluster).start.func1"),
	}
}

func stop() {
	shutdown.Do(func() {
		if srv == nil {
			return
		}
		if srv.cluster != nil {
			_ = srv.cluster.Stop()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, srv.baseURL.String()); err == nil {
			_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{srv.template}.Sanitize()+" WITH (FORCE)")
			_ = conn.Close(ctx)
		}
	})
}

func start() (*server, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := &server{prefix: "t" + randHex(4)}
	if raw := os.Getenv("TEST_DATABASE_URL"); raw != "" {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("parse TEST_DATABASE_URL: %w", err)
		}
		s.baseURL, s.external = u, true
	} else {
		c, err := pgcluster.Start(ctx, pgcluster.Options{Fast: true, Logger: zerolog.Nop()})
		if err != nil {
			return nil, fmt.Errorf("start private postgres: %w", err)
		}
		s.cluster = c
		s.baseURL, _ = url.Parse(c.URL("postgres"))
	}
	s.template = s.prefix + "_template"
	admin, err := pgx.Connect(ctx, s.baseURL.String())
	if err != nil {
		return nil, fmt.Errorf("connect to test server: %w", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{s.template}.Sanitize()); err != nil {
		return nil, fmt.Errorf("create template database: %w", err)
	}
	// PGTEST_MIGRATIONS_DIR lets a developer iterate on a migration in a
	// scratch copy of db/migrations without breaking everyone else's runs.
	if err := migrate.UpFS(ctx, s.urlFor(s.template), migrationsFS()); err != nil {
		return nil, fmt.Errorf("migrate template database: %w", err)
	}
	return s, nil
}

func (s *server) urlFor(db string) string {
	u := *s.baseURL
	u.Path = "/" + db
	return u.String()
}

func get(t testing.TB) *server {
	t.Helper()
	once.Do(func() { srv, errSrv = start() })
	if errSrv != nil {
		t.Fatalf("pgtest: %v", errSrv)
	}
	return srv
}

// URL creates a fresh, fully migrated database for this test and returns its
// connection string. The database is dropped at cleanup on an external server
// (a private cluster is removed whole at exit).
func URL(t testing.TB) string {
	t.Helper()
	s := get(t)
	name := fmt.Sprintf("%s_%d", s.prefix, seq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, s.baseURL.String())
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer admin.Close(ctx)
	// Clones of one template are serialised: Postgres rejects a clone while
	// another session is connected to the template.
	cloneMu.Lock()
	_, err = admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s STRATEGY FILE_COPY",
		pgx.Identifier{name}.Sanitize(), pgx.Identifier{s.template}.Sanitize()))
	cloneMu.Unlock()
	if err != nil {
		t.Fatalf("pgtest: clone template: %v", err)
	}
	if s.external {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if c, err := pgx.Connect(ctx, s.baseURL.String()); err == nil {
				_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
				_ = c.Close(ctx)
			}
		})
	}
	return s.urlFor(name)
}

// Pool returns a pool on a fresh database for this test, closed at cleanup.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return PoolFor(t, URL(t))
}

// PoolFor opens a pool on an existing test database URL, closed at cleanup.
func PoolFor(t testing.TB, dbURL string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgpool.Config(dbURL, 20)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// EmptyURL creates an empty database (no migrations) for migration tests.
func EmptyURL(t testing.TB) string {
	t.Helper()
	s := get(t)
	name := fmt.Sprintf("%s_empty_%d", s.prefix, seq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, s.baseURL.String())
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	if s.external {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if c, err := pgx.Connect(ctx, s.baseURL.String()); err == nil {
				_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
				_ = c.Close(ctx)
			}
		})
	}
	return s.urlFor(name)
}

// AdminURL is a superuser connection to the server's maintenance database.
func AdminURL(t testing.TB) string {
	t.Helper()
	return get(t).baseURL.String()
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return strings.ToLower(hex.EncodeToString(b))
}

// migrationsFS is the migrations a database gets: the embedded set, or
// PGTEST_MIGRATIONS_DIR's.
func migrationsFS() fs.FS {
	if dir := os.Getenv("PGTEST_MIGRATIONS_DIR"); dir != "" {
		return os.DirFS(dir)
	}
	return migrations.FS
}

// QueueBenchSettings are the server settings of the write path's
// benchmarks (bench-sched, bench-delivery) on top of the default
// durability: room in memory for their tables, and checkpoints spaced out
// of a run. A new map each call, to add to.
func QueueBenchSettings() map[string]string {
	return map[string]string{"shared_buffers": "1GB", "max_wal_size": "8GB", "checkpoint_timeout": "30min"}
}

// BenchURL starts a private cluster for one benchmark, at Postgres' default
// durability (fsync, synchronous_commit and full_page_writes on, unlike the
// tests' cluster) with settings on top, creates and migrates a database
// "bench" on it, and returns its URL; the cluster and its data are removed
// when the benchmark ends. A benchmark measures what production runs, so it
// gets its own server rather than the tests' shared, fsync-less one.
func BenchURL(b testing.TB, settings map[string]string) string {
	b.Helper()
	ctx := context.Background()
	c, err := pgcluster.Start(ctx, pgcluster.Options{Settings: settings, Logger: zerolog.Nop(), StartTimeout: 2 * time.Minute})
	if err != nil {
		b.Fatalf("pgtest: start the benchmark's cluster: %v", err)
	}
	b.Cleanup(func() { _ = c.Stop() })
	if err := c.CreateDatabase(ctx, "bench"); err != nil {
		b.Fatalf("pgtest: create the benchmark's database: %v", err)
	}
	if err := migrate.UpFS(ctx, c.URL("bench"), migrationsFS()); err != nil {
		b.Fatalf("pgtest: migrate the benchmark's database: %v", err)
	}
	return c.URL("bench")
}
