package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/transport"
)

// countingListener counts the reads made on its connections: what the
// server asks of the socket.
type countingListener struct {
	net.Listener
	reads *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: c, reads: l.reads}, nil
}

type countingConn struct {
	net.Conn
	reads *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	c.reads.Add(1)
	return c.Conn.Read(p)
}

// startPlain serves a plaintext Server on a counting listener: the probes,
// an echo of a request body, and an upgrade that echoes what follows it.
func startPlain(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reads := new(atomic.Int64)
	s := New("api", ln.Addr().String(), nil, zerolog.Nop())
	Probes(s.Mux, func(context.Context) error { return nil })
	s.Mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body) // all of it first: HTTP/1 stops a body's reads once the response starts
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_, _ = w.Write(b)
	})
	s.Mux.HandleFunc("GET /upgrade", func(w http.ResponseWriter, _ *http.Request) {
		c, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer c.Close()
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		_ = rw.Flush()
		_, _ = io.Copy(c, io.MultiReader(io.LimitReader(rw, int64(rw.Reader.Buffered())), c)) // an echo
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.serve(ctx, countingListener{Listener: ln, reads: reads}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return ln.Addr().String(), reads
}

// dialPlain starts a plaintext Server (startPlain) and dials it raw, with
// a deadline on the test's reads.
func dialPlain(t *testing.T) (net.Conn, *atomic.Int64) {
	t.Helper()
	addr, reads := startPlain(t)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	return c, reads
}

// A burst of small HTTP/2 frames on a cleartext connection is read in a
// few reads, not two a frame (the header, then the payload), which is how
// net/http's HTTP/2 server reads a connection it is handed unbuffered.
func TestServer_CleartextHTTP2FramesAreReadInBursts(t *testing.T) {
	t.Parallel()
	c, reads := dialPlain(t)
	const pings = 200
	var out bytes.Buffer
	out.WriteString("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	out.Write(frameHeader(0, 0x4, 0)) // SETTINGS, empty
	for i := range pings {
		out.Write(frameHeader(8, 0x6, 0)) // PING
		_ = binary.Write(&out, binary.BigEndian, uint64(i))
	}
	if _, err := c.Write(out.Bytes()); err != nil {
		t.Fatal(err)
	}
	acks := 0
	for acks < pings {
		var h [9]byte
		if _, err := io.ReadFull(c, h[:]); err != nil {
			t.Fatalf("after %d ping acks: %v", acks, err)
		}
		payload := make([]byte, int(h[0])<<16|int(h[1])<<8|int(h[2]))
		if _, err := io.ReadFull(c, payload); err != nil {
			t.Fatalf("after %d ping acks: %v", acks, err)
		}
		if h[3] == 0x6 && h[4]&0x1 != 0 {
			if got := binary.BigEndian.Uint64(payload); got != uint64(acks) {
				t.Fatalf("ping ack %d carries %d", acks, got)
			}
			acks++
		}
	}
	// Unbuffered, the server makes at least two reads a frame: 400 here.
	if n := reads.Load(); n > pings/4 {
		t.Fatalf("the server made %d reads for %d frames written in one write; want at most %d", n, pings+1, pings/4)
	}
}

func frameHeader(length int, typ, flags byte) []byte {
	return []byte{byte(length >> 16), byte(length >> 8), byte(length), typ, flags, 0, 0, 0, 0}
}

// HTTP/1.1 and cleartext HTTP/2 requests, bodies included, are served
// through the buffered reads as before.
func TestServer_BufferedReadsServeHTTP1AndH2C(t *testing.T) {
	t.Parallel()
	addr, _ := startPlain(t)
	h2c, err := transport.ClientFor("http://"+addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	body := strings.Repeat("converge ", 10_000) // past one read buffer
	for _, tc := range []struct {
		name  string
		c     *http.Client
		proto int
	}{
		{"http/1.1", &http.Client{}, 1},
		{"h2c", h2c, 2},
	} {
		for _, req := range []struct{ method, path, body, want string }{
			{http.MethodGet, "/livez", "", "ok\n"},
			{http.MethodPost, "/echo", body, body},
			{http.MethodGet, "/healthz", "", "ok\n"},
		} {
			r, err := http.NewRequestWithContext(t.Context(), req.method, "http://"+addr+req.path, strings.NewReader(req.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := tc.c.Do(r)
			if err != nil {
				t.Fatalf("%s %s %s: %v", tc.name, req.method, req.path, err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatalf("%s %s %s: read: %v", tc.name, req.method, req.path, err)
			}
			if resp.StatusCode != http.StatusOK || resp.ProtoMajor != tc.proto || string(got) != req.want {
				t.Fatalf("%s %s %s: %s over HTTP/%d, %d bytes; want 200 over HTTP/%d, %d bytes",
					tc.name, req.method, req.path, resp.Status, resp.ProtoMajor, len(got), tc.proto, len(req.want))
			}
		}
	}
}

// A hijacked connection (a websocket's upgrade) keeps every byte the client
// sent behind its request, whether net/http's reader or the buffer under it
// had already read them.
func TestServer_HijackKeepsTheBytesBehindTheRequest(t *testing.T) {
	t.Parallel()
	c, _ := dialPlain(t)
	behind := strings.Repeat("frame;", 4000) // 24 KB: past net/http's 4 KiB reader and the 16 KiB buffer under it
	if _, err := io.WriteString(c, "GET /upgrade HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n"+behind); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %s", resp.Status)
	}
	got := make([]byte, len(behind))
	if _, err := io.ReadFull(br, got); err != nil {
		t.Fatalf("the echo of the bytes behind the request: %v", err)
	}
	if string(got) != behind {
		t.Fatal("the bytes behind the request came back changed")
	}
}
