package live_test

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/live"
	"github.com/converge-run/converge/core/store/notify"
	"github.com/converge-run/converge/db/pgpool"
	"github.com/converge-run/converge/db/pgtest"
)

// readGate is the hub's read pool with a switch: while it is down, every
// new connection is refused (as by a replica that stopped) and the pool's
// connections are closed; the listener and the test's writes go through
// another pool and carry on.
type readGate struct {
	pool  *pgxpool.Pool
	down  atomic.Bool
	dials atomic.Int64 // connection attempts
}

func (g *readGate) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	g.dials.Add(1)
	if g.down.Load() {
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	return (&net.Dialer{}).DialContext(ctx, network, addr)
}

// close refuses connections from now on; open lets them through again.
func (g *readGate) close() { g.down.Store(true); g.pool.Reset() }
func (g *readGate) open()  { g.down.Store(false) }

// waitDials waits until the hub has tried to connect n more times.
func (g *readGate) waitDials(t *testing.T, n int64) {
	t.Helper()
	want := g.dials.Load() + n
	require.Eventually(t, func() bool { return g.dials.Load() >= want }, 30*time.Second, 5*time.Millisecond,
		"the hub's read attempts: want %d, have %d", want, g.dials.Load())
}

// lines is a log writer that keeps what was written, line by line.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lines) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(b)
}

func (l *lines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSpace(l.buf.String()), "\n")
}

// startGatedHub is startHubWith with the hub reading through a readGate
// and reporting to an outage whose log (and the hub's) goes to logs.
func startGatedHub(t *testing.T, opts live.Options) (*hubEnv, *readGate, *lines) {
	t.Helper()
	url := pgtest.URL(t)
	db := pgtest.PoolFor(t, url)
	g := &readGate{}
	cfg, err := pgpool.Config(url, 4)
	require.NoError(t, err)
	cfg.ConnConfig.DialFunc = g.dial
	g.pool, err = pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(g.pool.Close)
	logs := &lines{}
	log := zerolog.New(logs)
	l := notify.NewListener(db, zerolog.Nop())
	o := &engine.Outage{Log: log}
	h := live.NewHub(l, g.pool, log, live.WithOptions(opts), live.WithOutage(o))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	t.Cleanup(func() { cancel(); <-done; <-done }) // before the pools close
	go func() { _ = h.Run(ctx); done <- struct{}{} }()
	<-h.Started()
	go func() { _ = l.Run(ctx); done <- struct{}{} }()
	select {
	case <-l.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("the listener did not become ready")
	}
	e := &hubEnv{t: t, db: db, hub: h}
	e.exec(`INSERT INTO kind_manifest (kind, version, manifest) VALUES
		('tree', 'v1', '{"kind":"tree","reactions":[{"name":"c","trigger":"specChange","emits":["children","status"]}]}'),
		('leaf', 'v1', '{"kind":"leaf","reactions":[{"name":"w","trigger":"specChange","emits":["status"]}]}')`)
	return e, g, logs
}

// While its reads cannot reach the database, the hub retries a followed
// subtree's load every CountsInterval, quietly: the process's outage logs
// its one WARN, and the retries log nothing. Before, each retry logged an
// ERROR (four a second per followed root, for as long as the outage
// lasted).
func TestSubtreeProgress_RetriesQuietlyWhileTheDatabaseIsUnreachable(t *testing.T) {
	t.Parallel()
	e, g, logs := startGatedHub(t, live.Options{CountsInterval: 10 * time.Millisecond, MemberPoll: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := e.insert("tree", "root", uuid.Nil, uuid.Nil)
	g.close()
	ch := live.SubscribeSubtree(ctx, e.hub, root, func(p live.SubtreeProgress) live.SubtreeProgress { return p })
	g.waitDials(t, 10)
	for _, l := range logs.all() {
		require.NotContains(t, l, `"level":"error"`, "a retry during the outage logged: %v", logs.all())
	}

	g.open()
	p := next(t, ch, "the subtree once the database is back", func(live.SubtreeProgress) bool { return true })
	require.Equal(t, "root", p.Root.Name)
}
