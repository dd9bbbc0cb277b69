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
	// message compresses msg as Connect's compression pool does: Reset to
	// the destination, Write, Close, then Reset(io.Discard) to drop the
	// reference before pooling the handle.
	message := func(c *pooledGzip, msg string) {
		t.Helper()
		var buf bytes.Buffer
		c.Reset(&buf)
		_, err := c.Write([]byte(msg))
		require.NoError(t, err)
		require.NoError(t, c.Close())
		c.Reset(io.Discard)
		require.Nil(t, c.w, "the handle holds no writer between messages")
		require.EqualValues(t, 4, buf.Bytes()[8], "XFL 4: the fastest level")
		r, err := gzip.NewReader(&buf)
		require.NoError(t, err)
		got, err := io.ReadAll(r)
		require.NoError(t, err)
		require.Equal(t, msg, string(got))
	}
	a := gp.compressor().(*pooledGzip)
	message(a, strings.Repeat("alpha,", 5000))
	require.Len(t, gp.free, 1, "the writer went back to the list")
	first := <-gp.free
	gp.free <- first

	runtime.GC()
	runtime.GC() // a sync.Pool would be empty now
	b := gp.compressor().(*pooledGzip)
	b.Reset(io.Discard)
	_, err := b.Write([]byte("x"))
	require.NoError(t, err)
	require.Same(t, first, b.w, "the next message borrows the same writer")
	b.Reset(io.Discard) // abandoned mid-message: the writer goes back, to be reset
	require.Len(t, gp.free, 1)
	message(b, "a second message on the reused writer")

	// An empty message is a valid, empty gzip stream.
	var buf bytes.Buffer
	b.Reset(&buf)
	require.NoError(t, b.Close())
	r, err := gzip.NewReader(&buf)
	require.NoError(t, err)
	got, err := io.ReadAll(r)
	require.NoError(t, err)
	require.Empty(t, got)

	// Three messages at once: three writers, of which the list keeps two.
	cs := []*pooledGzip{gp.compressor().(*pooledGzip), gp.compressor().(*pooledGzip), gp.compressor().(*pooledGzip)}
	for i, c := range cs {
		c.Reset(io.Discard)
		_, err := c.Write([]byte(strings.Repeat("x", i+1)))
		require.NoError(t, err)
	}
	for _, c := range cs {
		require.NoError(t, c.Close())
	}
	require.Len(t, gp.free, 2, "bounded")
}
