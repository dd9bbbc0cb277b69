package server

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/testlog"
	"github.com/converge-run/converge/core/tlsreload/tlstest"
)

func serverPair(t *testing.T) tls.Certificate {
	t.Helper()
	_, _, pair := tlstest.NewCA(t).Issue(t, t.TempDir(), "converge", "", 2)
	return pair
}

// What net/http reports about a connection (a TLS handshake that failed: a
// client certificate the CA does not verify, a client speaking plaintext)
// goes to the server's own logger, with its listener, not to the process's
// standard logger as an unstructured line on stderr.
func TestServer_ConnectionErrorsGoToItsLogger(t *testing.T) {
	t.Parallel()
	var logs testlog.Buffer
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := New("api", ln.Addr().String(), &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{serverPair(t)}},
		zerolog.New(&logs))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil { // plaintext to a TLS listener
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "TLS handshake error") {
		if time.Now().After(deadline) {
			t.Fatalf("the failed handshake was not logged through the server's logger; it logged:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), `"listener":"api"`) {
		t.Fatalf("the line names no listener:\n%s", logs.String())
	}
}
