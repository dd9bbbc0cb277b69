package loopback

import (
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

// A port some listener holds is never handed out.
func TestFreePort_SkipsPortsInUse(t *testing.T) {
	held := map[int]bool{}
	var ls []net.Listener
	t.Cleanup(func() {
		for _, l := range ls {
			_ = l.Close()
		}
	})
	for range 50 {
		p, err := FreePort("")
		require.NoError(t, err)
		require.False(t, held[p], "port %d handed out while held", p)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		require.NoError(t, err)
		ls = append(ls, l)
		held[p] = true
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
