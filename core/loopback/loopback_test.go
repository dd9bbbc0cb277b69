package loopback

import (
	"math/rand/v2"
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// The ports handed out are free, and below the ephemeral range the kernel
// binds outgoing connections from.
func TestFreePort_IsFreeAndBelowTheEphemeralRange(t *testing.T) {
	lo := ephemeralLow()
	for range 20 {
		p, err := FreePort("")
		require.NoError(t, err)
		if lo > below+1000 {
			require.GreaterOrEqual(t, p, below)
			require.Less(t, p, lo, "not a port an outgoing connection could be given")
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		require.NoError(t, err, "the port is free to bind")
		require.NoError(t, l.Close())
	}
	a, err := Addr()
	require.NoError(t, err)
	host, _, err := net.SplitHostPort(a)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", host)
}

// A port some other listener holds (not one FreePort handed out, which
// the given set alone would skip) is never handed out: the draw moves on to
// a free port of the range, or, when the range has none, the kernel picks.
func TestFreePort_SkipsPortsInUse(t *testing.T) {
	hold := func() (net.Listener, int) {
		t.Helper()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		return l, l.Addr().(*net.TCPAddr).Port
	}
	_, held := hold()
	for range 20 {
		p, err := freePortIn("127.0.0.1", held, held+1)
		require.NoError(t, err)
		require.NotEqual(t, held, p, "the range's only port is held: the kernel picks another")
	}

	// A range of two below the ephemeral range (no outgoing connection takes
	// its ports meanwhile), the first held by a listener and the second free.
	lo := ephemeralLow()
	require.Greater(t, lo, below+1000, "the ephemeral range leaves room below it")
	for {
		p := below + rand.IntN(lo-below-1)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue // p is taken: try another pair
		}
		next, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+1)))
		if err != nil {
			_ = l.Close() // p+1 is taken: try another pair
			continue
		}
		require.NoError(t, next.Close())
		got, err := freePortIn("127.0.0.1", p, p+2)
		require.NoError(t, l.Close())
		require.NoError(t, err)
		require.Equal(t, p+1, got, "the held port is skipped, the free one of the range handed out")
		return
	}
}

// A port handed out and not yet bound (its user is still starting) is
// free, but is never handed out again: two members started together do not
// get the same port.
func TestFreePort_NeverHandsOutAPortTwice(t *testing.T) {
	seen := map[int]bool{}
	for range 500 {
		p, err := FreePort("")
		require.NoError(t, err)
		require.False(t, seen[p], "port %d handed out twice", p)
		seen[p] = true
	}
}
