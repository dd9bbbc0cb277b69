package broker

import (
	"bytes"
	"compress/gzip"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The compressor Connect pools is a handle: each message borrows a
// BestSpeed writer and gives it back on Close, so a writer outlives the
// GCs that empty Connect's sync.Pool and the next message reuses it; every
// message decodes intact, and the list never holds more than its bound.
func TestPooledGzip_ReusesWritersAcrossGCs(t *testing.T) {
	t.Parallel()
	gp := &gzipPool{free: make(chan *gzip.Writer, 2)}
	roundTrip := func(c interface {
		Reset(io.Writer)
		io.WriteCloser
	}, msg string) {
		t.Helper()
		var buf bytes.Buffer
		c.Reset(&buf)
		_, err := c.Write([]byte(msg))
		require.NoError(t, err)
		require.NoError(t, c.Close())
		require.EqualValues(t, 4, buf.Bytes()[8], "XFL 4: the fastest level")
		r, err := gzip.NewReader(&buf)
		require.NoError(t, err)
		got, err := io.ReadAll(r)
		require.NoError(t, err)
		require.Equal(t, msg, string(got))
	}
	a := gp.compressor().(*pooledGzip)
	roundTrip(a, strings.Repeat("alpha,", 5000))
	require.Nil(t, a.w, "the writer went back to the list")
	require.Len(t, gp.free, 1)
	first := <-gp.free
	gp.free <- first

	runtime.GC()
	runtime.GC() // a sync.Pool would be empty now
	b := gp.compressor().(*pooledGzip)
	b.Reset(io.Discard)
	require.Same(t, first, b.w, "the next message borrows the same writer")
	require.NoError(t, b.Close())
	roundTrip(b, "a second message on the reused writer")

	// Three messages at once: three writers, of which the list keeps two.
	cs := []*pooledGzip{gp.compressor().(*pooledGzip), gp.compressor().(*pooledGzip), gp.compressor().(*pooledGzip)}
	for _, c := range cs {
		c.Reset(io.Discard)
	}
	for i, c := range cs {
		_, err := c.Write([]byte(strings.Repeat("x", i+1)))
		require.NoError(t, err)
		require.NoError(t, c.Close())
	}
	require.Len(t, gp.free, 2, "bounded")
	require.NoError(t, gp.compressor().Close(), "closing an unused handle is a no-op")
}
