package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// prefix is a Connect envelope prefix for a payload of n bytes.
func prefix(n int) []byte {
	p := make([]byte, 5)
	binary.BigEndian.PutUint32(p[1:], uint32(n))
	return p
}

// writeMessages writes each message as connect-go does: the prefix, then
// the payload, in two writes. gate, when set, is waited on before each
// message after the first.
func writeMessages(w *io.PipeWriter, gate chan struct{}, msgs ...[]byte) {
	for i, m := range msgs {
		if gate != nil && i > 0 {
			<-gate
		}
		if _, err := w.Write(prefix(len(m))); err != nil {
			return
		}
		if len(m) > 0 {
			if _, err := w.Write(m); err != nil {
				return
			}
		}
	}
	_ = w.Close()
}

func TestEnvelopeBody_ReadsAPrefixAndItsPayloadTogether(t *testing.T) {
	t.Parallel()
	pr, pw := io.Pipe()
	a, b := bytes.Repeat([]byte("a"), 300), bytes.Repeat([]byte("b"), 7)
	go writeMessages(pw, nil, a, b)
	body := &envelopeBody{r: pr}
	buf := make([]byte, 16<<10)

	n, err := body.Read(buf)
	require.NoError(t, err)
	require.Equal(t, append(prefix(300), a...), buf[:n], "one read: the prefix and its payload")
	n, err = body.Read(buf)
	require.NoError(t, err)
	require.Equal(t, append(prefix(7), b...), buf[:n])
	_, err = body.Read(buf)
	require.ErrorIs(t, err, io.EOF)
}

func TestEnvelopeBody_ReturnsAnEmptyMessageWithoutWaitingForTheNext(t *testing.T) {
	t.Parallel()
	pr, pw := io.Pipe()
	gate := make(chan struct{})
	go writeMessages(pw, gate, nil, []byte("next"))
	body := &envelopeBody{r: pr}
	buf := make([]byte, 64)

	got := make(chan []byte, 1)
	go func() {
		n, _ := body.Read(buf)
		got <- append([]byte(nil), buf[:n]...)
	}()
	select {
	case b := <-got:
		require.Equal(t, prefix(0), b, "the empty message alone: no payload follows its prefix")
	case <-time.After(10 * time.Second):
		t.Fatal("Read waited for the next message after an empty one")
	}
	close(gate)
	n, err := body.Read(buf)
	require.NoError(t, err)
	require.Equal(t, append(prefix(4), "next"...), buf[:n], "the framing is still followed after it")
}

func TestEnvelopeBody_FollowsTheFramingAcrossShortBuffers(t *testing.T) {
	t.Parallel()
	msgs := [][]byte{bytes.Repeat([]byte("x"), 40), nil, []byte("yz"), bytes.Repeat([]byte("w"), 9)}
	var want []byte
	for _, m := range msgs {
		want = append(append(want, prefix(len(m))...), m...)
	}
	for _, size := range []int{1, 3, 5, 6, 11, 64} {
		pr, pw := io.Pipe()
		go writeMessages(pw, nil, msgs...)
		body := &envelopeBody{r: pr}
		var got []byte
		buf := make([]byte, size)
		for {
			n, err := body.Read(buf)
			got = append(got, buf[:n]...)
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, "buffer of %d", size)
		}
		require.Equal(t, want, got, "buffer of %d: the stream is passed through unchanged", size)
		require.Zero(t, body.left, "buffer of %d", size)
		require.Zero(t, body.npre, "buffer of %d", size)
	}
}

func TestEnvelopeBody_PassesTheWritersErrorThrough(t *testing.T) {
	t.Parallel()
	pr, pw := io.Pipe()
	go func() {
		_, _ = pw.Write(prefix(10))
		pw.CloseWithError(io.ErrClosedPipe)
	}()
	body := &envelopeBody{r: pr}
	buf := make([]byte, 64)
	n, err := body.Read(buf)
	require.Equal(t, 5, n)
	require.ErrorIs(t, err, io.ErrClosedPipe, "the payload never came: the prefix and the error")
}

// countingConn counts the writes the client makes to the socket.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// A Connect-style stream through a real HTTP/2 (h2c) client and server:
// the server reads every message whole, and the client writes one frame
// per message to its socket, not two.
func TestEnvelopeFrames_StreamsEachMessageInOneWrite(t *testing.T) {
	t.Parallel()
	const messages = 50
	received := make(chan []byte, messages)
	srv := &http.Server{Protocols: ServerProtocols(), ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			received <- b
			w.WriteHeader(http.StatusOK)
		})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	run := func(contentType string, rt func(*http.Transport) http.RoundTripper) (writes int64) {
		var n atomic.Int64
		dialer := &net.Dialer{}
		tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			return countingConn{Conn: c, writes: &n}, err
		}}
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		tr.Protocols = &p
		defer tr.CloseIdleConnections()

		pr, pw := io.Pipe()
		msgs := make([][]byte, messages)
		for i := range msgs {
			msgs[i] = bytes.Repeat([]byte{byte('a' + i%26)}, 100+i)
		}
		// One write for the prefix, one for the payload: a pipe hands each
		// write to a separate read, as connect-go's request body does.
		go writeMessages(pw, nil, msgs...)
		req, err := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/s", pr)
		require.NoError(t, err)
		req.Header.Set("Content-Type", contentType)
		done := make(chan *http.Response, 1)
		go func() {
			resp, err := rt(tr).RoundTrip(req)
			if err == nil {
				done <- resp
			}
			close(done)
		}()
		resp := <-done
		require.NotNil(t, resp)
		_ = resp.Body.Close()
		var body []byte
		select {
		case body = <-received:
		case <-time.After(10 * time.Second):
			t.Fatal("the server never saw the stream's end")
		}
		var want []byte
		for _, m := range msgs {
			want = append(append(want, prefix(len(m))...), m...)
		}
		require.Equal(t, want, body, "the server read the stream unchanged")
		return n.Load()
	}

	plain := run("application/connect+proto", func(tr *http.Transport) http.RoundTripper { return tr })
	framed := run("application/connect+proto", func(tr *http.Transport) http.RoundTripper { return envelopeFrames{base: tr} })
	unary := run("application/proto", func(tr *http.Transport) http.RoundTripper { return envelopeFrames{base: tr} })
	t.Logf("socket writes for %d messages: %d plain, %d with envelopeFrames, %d for a non-enveloped content type", messages, plain, framed, unary)
	require.GreaterOrEqual(t, plain, int64(2*messages), "without it, two writes a message")
	require.Less(t, framed, int64(messages+messages/2), "with it, about one a message")
	require.GreaterOrEqual(t, unary, int64(2*messages), "a body that is not enveloped is left as it is")
}
