package pgtest

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/converge-run/converge/db/pgpool"
)

// Links is the network under a pool's connections, with the switches a test
// of lost links throws: Cut silences every connection open now (what either
// end sends is lost and the sockets stay open, as behind a dead link or an
// address that failed over, where no reset ever comes), SetDown refuses new
// connections (ECONNREFUSED) and resets those open. Connections made while
// up and after a cut work.
type Links struct {
	dials atomic.Int64

	mu    sync.Mutex
	down  bool
	conns []net.Conn
	cuts  []*atomic.Bool
}

// PoolThrough opens a pool of size connections on url whose connections
// are dialled through the returned Links; both are closed when t ends (the
// sockets first: pgx drains a dead connection it closes for up to 15 s).
func PoolThrough(t testing.TB, url string, size int32) (*pgxpool.Pool, *Links) {
	t.Helper()
	l := &Links{}
	cfg, err := pgpool.Config(url, size)
	if err != nil {
		t.Fatalf("pgtest: pool config: %v", err)
	}
	cfg.ConnConfig.DialFunc = l.dial
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	t.Cleanup(l.closeAll)
	return pool, l
}

func (l *Links) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	l.dials.Add(1)
	refused := &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	l.mu.Lock()
	down := l.down
	l.mu.Unlock()
	if down {
		return nil, refused
	}
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down { // went down while dialing
		_ = c.Close()
		return nil, refused
	}
	cut := &atomic.Bool{}
	l.conns, l.cuts = append(l.conns, c), append(l.cuts, cut)
	return cutConn{Conn: c, cut: cut}, nil
}

// Dials is the number of connection attempts so far.
func (l *Links) Dials() int64 { return l.dials.Load() }

// Cut silences every connection open now.
func (l *Links) Cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.cuts {
		c.Store(true)
	}
}

// SetDown refuses connections from now on and resets those open (down), or
// lets new ones through again.
func (l *Links) SetDown(down bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = down
	if down {
		l.closeAllLocked()
	}
}

func (l *Links) closeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closeAllLocked()
}

func (l *Links) closeAllLocked() {
	for _, c := range l.conns {
		_ = c.Close()
	}
	l.conns, l.cuts = nil, nil
}

// cutConn is a connection Links.Cut can silence.
type cutConn struct {
	net.Conn
	cut *atomic.Bool
}

// Read drops what arrives once cut; deadlines and closes still end it.
func (c cutConn) Read(b []byte) (int, error) {
	for {
		n, err := c.Conn.Read(b)
		if err != nil || !c.cut.Load() {
			return n, err
		}
	}
}

// Write loses what is sent once cut.
func (c cutConn) Write(b []byte) (int, error) {
	if c.cut.Load() {
		return len(b), nil
	}
	return c.Conn.Write(b)
}
