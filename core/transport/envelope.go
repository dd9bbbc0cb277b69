package transport

import (
	"encoding/binary"
	"io"
	"net/http"
	"strings"
)

// envelopeFrames is the client round tripper that sends each message of a
// streaming request in one HTTP/2 DATA frame.
//
// Connect (and gRPC) frame a streamed message as a 5-byte prefix — a flags
// byte and the payload's length — followed by the payload, and connect-go
// writes the two separately into the request body's pipe. HTTP/2's client
// sends a DATA frame, and flushes it to the socket, for every read of the
// body, so each message went out as two frames and two writes: a 5-byte
// frame, then the payload's, and the server read each frame's header and
// payload apart (four reads a message instead of two). The body is read
// through envelopeBody instead, which, when a read ends on a prefix, reads
// on for the payload written right behind it.
type envelopeFrames struct {
	base http.RoundTripper
}

func (t envelopeFrames) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody || !enveloped(req.Header.Get("Content-Type")) {
		return t.base.RoundTrip(req)
	}
	r := req.Clone(req.Context())
	r.Body = &envelopeBody{r: req.Body}
	return t.base.RoundTrip(r)
}

// enveloped reports whether a request body is a stream of enveloped
// messages: Connect streaming or gRPC. A unary Connect body is the bare
// message and is sent as it is.
func enveloped(contentType string) bool {
	return strings.HasPrefix(contentType, "application/connect+") || strings.HasPrefix(contentType, "application/grpc")
}

// envelopeBody tracks the envelope framing of what it reads, so it knows
// when a read ended right after a whole prefix.
type envelopeBody struct {
	r    io.ReadCloser
	left uint64  // payload bytes of the current message still to come
	pre  [5]byte // the prefix being read
	npre int     // its bytes read so far
}

// Read reads what the writer has written; if that ends on a whole prefix
// whose payload is not empty and p has room, it reads once more, for the
// payload the writer writes right behind its prefix. An empty message's
// prefix is returned alone: no payload follows it.
func (b *envelopeBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if b.track(p[:n]) && err == nil && n < len(p) {
		m, err := b.r.Read(p[n:])
		b.track(p[n : n+m])
		return n + m, err
	}
	return n, err
}

func (b *envelopeBody) Close() error { return b.r.Close() }

// track follows the framing over data and reports whether it ended on a
// whole prefix announcing a payload not yet read.
func (b *envelopeBody) track(data []byte) bool {
	onPrefix := false
	for len(data) > 0 {
		onPrefix = false
		if b.left > 0 {
			k := min(b.left, uint64(len(data)))
			b.left -= k
			data = data[k:]
			continue
		}
		k := copy(b.pre[b.npre:], data)
		b.npre += k
		data = data[k:]
		if b.npre == len(b.pre) {
			b.npre = 0
			b.left = uint64(binary.BigEndian.Uint32(b.pre[1:]))
			onPrefix = b.left > 0
		}
	}
	return onPrefix
}

// CloseIdleConnections closes the base transport's idle connections, as
// http.Client.CloseIdleConnections expects of its transport.
func (t envelopeFrames) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
