package tcpproxy_test

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/converge-run/converge/examples/chaos/tcpproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// patience bounds every wait for bytes that should arrive: far above any
// delay a test sets, so a loaded machine never fails a test, and a
// hang still does.
const patience = 10 * time.Second

// link is one connection through a proxy: the client's end and the end the
// target accepted.
type link struct {
	p              *tcpproxy.Proxy
	client, server net.Conn
}

// start starts a target listener and a proxy in front of it.
func start(t *testing.T) (*tcpproxy.Proxy, net.Listener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	p, err := tcpproxy.Start(ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p, ln
}

// through connects to the target ln through p.
func through(t *testing.T, p *tcpproxy.Proxy, ln net.Listener) link {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), patience)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, ln.(*net.TCPListener).SetDeadline(time.Now().Add(patience)))
	s, err := ln.Accept()
	require.NoError(t, err, "the proxy dials the target when a client connects")
	t.Cleanup(func() { _ = s.Close() })
	return link{p: p, client: c, server: s}
}

// dial is one connection through a new proxy.
func dial(t *testing.T) link {
	t.Helper()
	p, ln := start(t)
	return through(t, p, ln)
}

// readWithin reads exactly len(want) bytes from c before deadline.
func readWithin(t *testing.T, c net.Conn, deadline time.Time, want []byte) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(deadline))
	got := make([]byte, len(want))
	_, err := io.ReadFull(c, got)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// requireNothingBy checks that nothing arrives on c before deadline.
func requireNothingBy(t *testing.T, c net.Conn, deadline time.Time) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(deadline))
	n, err := c.Read(make([]byte, 1))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "read %d bytes before the deadline", n)
}

// Each direction's bytes arrive no sooner than the delay after they were
// sent (the proxy reads them after the send, so the bound is exact), and
// nothing shows up at half the delay.
func TestDelay_HoldsEachDirectionBack(t *testing.T) {
	t.Parallel()
	const delay = 400 * time.Millisecond
	for name, dir := range map[string]func(link) (from, to net.Conn){
		"client to target": func(l link) (net.Conn, net.Conn) { return l.client, l.server },
		"target to client": func(l link) (net.Conn, net.Conn) { return l.server, l.client },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := dial(t)
			from, to := dir(l)
			l.p.Delay(delay)
			sent := time.Now()
			_, err := from.Write([]byte("ping"))
			require.NoError(t, err)
			requireNothingBy(t, to, sent.Add(delay/2))
			readWithin(t, to, sent.Add(patience), []byte("ping"))
			require.GreaterOrEqual(t, time.Since(sent), delay, "the bytes waited the delay")
		})
	}
}

// A round trip through a delayed proxy pays the delay twice.
func TestDelay_AddsTwiceTheDelayToARoundTrip(t *testing.T) {
	t.Parallel()
	const delay = 250 * time.Millisecond
	l := dial(t)
	l.p.Delay(delay)
	sent := time.Now()
	_, err := l.client.Write([]byte("ping"))
	require.NoError(t, err)
	readWithin(t, l.server, sent.Add(patience), []byte("ping"))
	_, err = l.server.Write([]byte("pong"))
	require.NoError(t, err)
	readWithin(t, l.client, sent.Add(patience), []byte("pong"))
	require.GreaterOrEqual(t, time.Since(sent), 2*delay)
}

// A stream written while the delay goes up, down and away arrives whole and
// in order.
func TestDelay_KeepsTheStreamInOrder(t *testing.T) {
	t.Parallel()
	l := dial(t)
	const n = 3000
	want := make([]byte, 4*n)
	for i := range n {
		binary.BigEndian.PutUint32(want[4*i:], uint32(i))
	}
	written := make(chan error, 1)
	go func() {
		for i := range n {
			switch i {
			case n / 4:
				l.p.Delay(20 * time.Millisecond)
			case n / 2:
				l.p.Delay(60 * time.Millisecond)
			case 3 * n / 4:
				l.p.Heal()
			}
			if _, err := l.client.Write(want[4*i : 4*i+4]); err != nil {
				written <- err
				return
			}
		}
		written <- nil
	}()
	readWithin(t, l.server, time.Now().Add(patience), want)
	require.NoError(t, <-written)
}

// Heal releases bytes held by a long delay at once.
func TestHeal_ReleasesDelayedBytesAtOnce(t *testing.T) {
	t.Parallel()
	l := dial(t)
	l.p.Delay(time.Hour)
	_, err := l.client.Write([]byte("held"))
	require.NoError(t, err)
	requireNothingBy(t, l.server, time.Now().Add(100*time.Millisecond))
	l.p.Heal()
	readWithin(t, l.server, time.Now().Add(patience), []byte("held"))
}

// A paused proxy forwards nothing, and the bytes arrive intact after Heal.
func TestPause_HoldsBytesUntilHeal(t *testing.T) {
	t.Parallel()
	l := dial(t)
	l.p.Pause()
	_, err := l.client.Write([]byte("wait"))
	require.NoError(t, err)
	requireNothingBy(t, l.server, time.Now().Add(100*time.Millisecond))
	l.p.Heal()
	readWithin(t, l.server, time.Now().Add(patience), []byte("wait"))
}

// Reset ends an established connection at both ends with an RST, and the
// proxy takes the next connection.
func TestReset_EndsBothEndsAndAcceptsANewConnection(t *testing.T) {
	t.Parallel()
	p, ln := start(t)
	l := through(t, p, ln)
	_, err := l.client.Write([]byte("up"))
	require.NoError(t, err)
	readWithin(t, l.server, time.Now().Add(patience), []byte("up"))

	p.Reset()
	for name, c := range map[string]net.Conn{"client": l.client, "target": l.server} {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(patience)))
		_, err := c.Read(make([]byte, 1))
		require.ErrorIs(t, err, syscall.ECONNRESET, "%s: an RST, at once", name)
	}

	again := through(t, p, ln)
	_, err = again.client.Write([]byte("back"))
	require.NoError(t, err)
	readWithin(t, again.server, time.Now().Add(patience), []byte("back"))
}

// A half-close travels through: the client's FIN reaches the target as EOF,
// the target's answer still reaches the client, and the target's own FIN
// then ends the client's stream.
func TestHalfClose_TheOtherDirectionKeepsFlowing(t *testing.T) {
	t.Parallel()
	l := dial(t)
	_, err := l.client.Write([]byte("req"))
	require.NoError(t, err)
	require.NoError(t, l.client.(*net.TCPConn).CloseWrite())
	require.NoError(t, l.server.SetReadDeadline(time.Now().Add(patience)))
	got, err := io.ReadAll(l.server)
	require.NoError(t, err, "the target reads the request, then EOF")
	require.Equal(t, "req", string(got))

	_, err = l.server.Write([]byte("answer"))
	require.NoError(t, err, "the target's direction is still open")
	require.NoError(t, l.server.(*net.TCPConn).CloseWrite())
	require.NoError(t, l.client.SetReadDeadline(time.Now().Add(patience)))
	got, err = io.ReadAll(l.client)
	require.NoError(t, err, "the client reads the answer, then EOF")
	require.Equal(t, "answer", string(got))
}

// A reset by one end reaches the other end as a reset, not as a clean end
// of stream, in both directions; also when the other end's bytes are in
// flight toward the end that reset (held by a delay, and read by the proxy
// well before the reset), so the proxy's write to the reset end is what
// fails first.
func TestPeerReset_ReachesTheOtherEndAsAReset(t *testing.T) {
	t.Parallel()
	const delay = time.Second
	for name, ends := range map[string]func(link) (resetter, other net.Conn){
		"target resets": func(l link) (net.Conn, net.Conn) { return l.server, l.client },
		"client resets": func(l link) (net.Conn, net.Conn) { return l.client, l.server },
	} {
		for _, delayed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/delayed=%t", name, delayed), func(t *testing.T) {
				t.Parallel()
				l := dial(t)
				resetter, other := ends(l)
				if delayed {
					l.p.Delay(delay)
				}
				sent := time.Now()
				_, err := other.Write([]byte("in flight"))
				require.NoError(t, err)
				if delayed {
					// The bytes are held; the reset comes a fifth of the
					// delay after the proxy read them.
					requireNothingBy(t, resetter, sent.Add(delay/5))
				}
				require.NoError(t, resetter.(*net.TCPConn).SetLinger(0))
				require.NoError(t, resetter.Close())
				require.NoError(t, other.SetReadDeadline(time.Now().Add(patience)))
				_, err = io.ReadAll(other)
				require.ErrorIs(t, err, syscall.ECONNRESET, "a reset, not an EOF")
			})
		}
	}
}

// A connection the proxy cannot forward (its target refuses) is reset, as
// a refused connection would be, not ended as if the target had answered
// and closed.
func TestDialFailure_ResetsTheClient(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	target := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	p, err := tcpproxy.Start(target)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	c, err := net.DialTimeout("tcp", p.Addr(), patience)
	if err == nil { // else the reset came before the connect returned
		t.Cleanup(func() { _ = c.Close() })
		require.NoError(t, c.SetReadDeadline(time.Now().Add(patience)))
		_, err = io.ReadAll(c)
	}
	require.ErrorIs(t, err, syscall.ECONNRESET, "a reset, not an EOF")
}

// Close ends every connection, also one it accepted a moment before (its
// forwarding not started yet), and returns: a client that keeps its end
// open does not hold Close.
func TestClose_EndsAConnectionAcceptedJustBefore(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	var mu sync.Mutex
	var accepted []net.Conn // the target keeps every connection open
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range accepted {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepted = append(accepted, c)
			mu.Unlock()
		}
	}()
	for range 300 {
		p, err := tcpproxy.Start(ln.Addr().String())
		require.NoError(t, err)
		c, err := net.DialTimeout("tcp", p.Addr(), patience)
		require.NoError(t, err)
		closed := make(chan struct{})
		go func() { p.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(patience):
			t.Fatal("Close is held by a connection it accepted just before")
		}
		_ = c.Close()
	}
}
