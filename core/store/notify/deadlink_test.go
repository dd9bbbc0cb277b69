package notify_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/store/notify"
	"github.com/converge-run/converge/db/pgpool"
	"github.com/converge-run/converge/db/pgtest"
)

// links dials the pool's connections and can cut the network under every
// connection made so far: what either end sends is then lost, and the
// socket stays open, as behind a dead link or an address that failed over,
// where no reset ever comes. Connections made after the cut work.
type links struct {
	mu    sync.Mutex
	cuts  []*atomic.Bool
	conns []net.Conn
}

func (l *links) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	cut := &atomic.Bool{}
	l.mu.Lock()
	l.cuts, l.conns = append(l.cuts, cut), append(l.conns, c)
	l.mu.Unlock()
	return cutConn{Conn: c, cut: cut}, nil
}

func (l *links) cutAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.cuts {
		c.Store(true)
	}
}

// closeAll closes every socket (pgx drains a dead connection it closes
// for up to 15 s before it lets go).
func (l *links) closeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		_ = c.Close()
	}
}

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

// A LISTEN connection whose network died without a reset would wait for a
// notification forever (TCP keepalive notices after minutes, or never):
// the listener probes a connection that has been silent for ProbeIdle, and
// one that does not answer within ProbeTimeout is re-made, with a
// Reconnected event to every subscriber.
func TestListener_ReconnectsFromASilentlyDeadConnection(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url := pgtest.URL(t)
	direct := pgtest.PoolFor(t, url)
	var link links
	cfg, err := pgpool.Config(url, 4)
	require.NoError(t, err)
	cfg.ConnConfig.DialFunc = link.dial
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	defer link.closeAll()

	l := notify.NewListener(pool, zerolog.Nop())
	l.ProbeIdle, l.ProbeTimeout = 100*time.Millisecond, 500*time.Millisecond
	s := l.Subscribe("work_ready", 4)
	done := make(chan struct{})
	go func() { defer close(done); _ = l.Run(ctx) }()
	defer func() { cancel(); <-done }() // before the pool closes: the listener holds a connection
	<-l.Ready()

	link.cutAll()
	require.True(t, recv(t, s, "the reconnect").Reconnected, "subscribers are told to re-read")
	_, err = direct.Exec(ctx, "SELECT pg_notify('work_ready', 'after')")
	require.NoError(t, err)
	require.Equal(t, "after", recv(t, s, "a notification after the reconnect").Payload)
}
