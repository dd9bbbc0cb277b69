package broker

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
	"github.com/converge-run/converge/workerproto/gen/converge/worker/v1/workerv1connect"
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

// tapBody records every byte of the response bodies read through it.
type tapBody struct {
	io.ReadCloser
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (b tapBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.mu.Lock()
	b.buf.Write(p[:n])
	b.mu.Unlock()
	return n, err
}

type tapTransport struct {
	next http.RoundTripper
	mu   sync.Mutex
	buf  bytes.Buffer
}

func (t *tapTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err == nil {
		resp.Body = tapBody{ReadCloser: resp.Body, mu: &t.mu, buf: &t.buf}
	}
	return resp, err
}

// A worker stream is not compressed unless the broker is given a floor
// (WORKER_COMPRESS_MIN_BYTES): then a message past it goes out gzipped at
// BestSpeed (the gzip header's XFL byte is 4), smaller ones plain, and
// every message decodes intact either way.
func TestWorkerServiceWorkStream_CompressesBigMessagesOnlyPastAFloor(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		floor, want int
	}{
		"Off":   {floor: 0, want: 0},
		"Floor": {floor: 8 << 10, want: 1},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, compressedBigTasks(t, tc.floor))
		})
	}
}

// compressedBigTasks sends one 48 KB task on a stream served with the
// broker's compression at floor and counts the compressed messages the
// worker's side received, checking each is gzip at the fastest level.
func compressedBigTasks(t *testing.T, floor int) int {
	t.Helper()
	b := setupHandler(t)
	h := b.srv.Client()
	tap := &tapTransport{next: h.Transport}
	h.Transport = tap
	// The test's handler has no compression options of its own: serve one
	// with the broker's.
	_, handler := workerv1connect.NewWorkerServiceHandler(b.svc, compression(floor)...)
	srv := httptest.NewUnstartedServer(withStreamAbort(handler))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	client := workerv1connect.NewWorkerServiceClient(h, srv.URL)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream := client.WorkStream(ctx)
	defer func() { _ = stream.CloseResponse() }()
	_, s := b.openSession(t, stream, &workerv1.Subscribe{WorkerId: "w1", Kinds: readiness("vpc")})
	spec := []byte(`{"cidr":"` + strings.Repeat("10.0.0.0/16,", 4000) + `"}`)
	require.NoError(t, s.send(ctx, &workerv1.WorkStreamResponse{Msg: &workerv1.WorkStreamResponse_Task{
		Task: &workerv1.StageTask{TaskId: "big", Resource: &workerv1.Resource{SpecJson: spec}}}}))
	m, err := stream.Receive()
	require.NoError(t, err)
	require.Equal(t, spec, m.GetTask().GetResource().GetSpecJson(), "the big task decodes intact")

	tap.mu.Lock()
	wire := tap.buf.Bytes()
	tap.mu.Unlock()
	compressed, messages := 0, 0
	for len(wire) >= 5 {
		flags, n := wire[0], int(binary.BigEndian.Uint32(wire[1:5]))
		require.LessOrEqual(t, 5+n, len(wire), "a whole envelope was read")
		payload := wire[5 : 5+n]
		messages++
		if flags&1 == 1 {
			compressed++
			require.Equal(t, []byte{0x1f, 0x8b}, payload[:2], "gzip")
			require.EqualValues(t, 4, payload[8], "XFL 4: compressed at the fastest level")
		}
		wire = wire[5+n:]
	}
	require.GreaterOrEqual(t, messages, 2, "the subscription's answer and the task were read off the wire")
	return compressed
}
