// Package server wires the process's HTTP listeners: the main API mux
// (GraphQL, dashboard, Connect broker, probes, metrics) and, on broker-only
// pods, a probe-only listener. Plain HTTP serves HTTP/1.1 and cleartext
// HTTP/2 (h2c, for Connect streams); TLS serves h2 with hot-reloaded
// material.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/tlsreload"
	"github.com/converge-run/converge/core/transport"
)

// Server is one HTTP listener with graceful shutdown.
type Server struct {
	Name string
	Addr string
	// TLS, when set, serves HTTPS (h2) with this config.
	TLS *tls.Config
	// ClientCheck, with TLS, verifies each request's client certificate
	// again against the client CA bundle of the moment (nil: the
	// handshake's verification stands for the connection's life).
	ClientCheck *tlsreload.ClientCheck
	Mux         *http.ServeMux
	// ShutdownGrace bounds the graceful shutdown (default 10s).
	ShutdownGrace time.Duration
	Log           zerolog.Logger

	bound chan net.Addr
}

// New returns a server on addr with an empty mux.
func New(name, addr string, tlsCfg *tls.Config, log zerolog.Logger) *Server {
	return &Server{Name: name, Addr: addr, TLS: tlsCfg, Mux: http.NewServeMux(), Log: log, bound: make(chan net.Addr, 1)}
}

// Bound yields the listening address once the listener is open (useful with
// port 0).
func (s *Server) Bound() <-chan net.Addr { return s.bound }

// Run listens until ctx ends, then shuts down gracefully: in-flight requests
// finish, open streams are closed.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("listen %s on %s: %w", s.Name, s.Addr, err)
	}
	return s.serve(ctx, ln)
}

// serve serves ln (a TCP listener) as Run does.
func (s *Server) serve(ctx context.Context, ln net.Listener) error {
	s.bound <- ln.Addr()
	srv := &http.Server{
		Handler:           s.Mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		Protocols:         transport.ServerProtocols(),
		ErrorLog:          log.New(errorLog{log: s.Log.With().Str("listener", s.Name).Logger()}, "", 0),
	}
	if s.TLS != nil {
		srv.TLSConfig = s.TLS
		ln = tls.NewListener(ln, s.TLS)
		if s.ClientCheck != nil {
			srv.Handler = s.ClientCheck.Handler(s.Mux)
			srv.ConnContext = s.ClientCheck.ConnContext
		}
	} else {
		ln = readBufferedListener{ln}
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	s.Log.Info().Str("listener", s.Name).Str("addr", ln.Addr().String()).Bool("tls", s.TLS != nil).Msg("listening")
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", s.Name, err)
	case <-ctx.Done():
	}
	grace := s.ShutdownGrace
	if grace <= 0 {
		grace = 10 * time.Second
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		s.Log.Warn().Err(err).Str("listener", s.Name).Msg("graceful shutdown")
	}
	_ = srv.Close()
	return nil
}

// errorLog is net/http's error log on the server's logger: what it reports
// about a connection (a TLS handshake that failed — a client certificate the
// CA does not verify, a client speaking plaintext —, a handler's panic),
// one line per report. A handshake a client dropped without a word (EOF: a
// TCP probe, a scanner) is debug; the rest warn.
type errorLog struct{ log zerolog.Logger }

func (e errorLog) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(strings.TrimPrefix(string(p), "http: "))
	ev := e.log.Warn()
	if strings.HasPrefix(msg, "TLS handshake error") && strings.HasSuffix(msg, ": EOF") {
		ev = e.log.Debug()
	}
	ev.Msg(msg)
	return len(p), nil
}

// NotReadyError is a reason /readyz serves as it is: the process's own words.
// Any other error of its ping (a driver's, which names the database's host,
// user and database) is served as "the primary database does not answer":
// /readyz answers every caller, credentials or not.
type NotReadyError string

func (n NotReadyError) Error() string { return string(n) }

// Probes mounts the Kubernetes probes: /livez and /healthz answer without
// touching the database (a Postgres blip must not restart the pod); /readyz
// pings the primary so a pod that cannot reach it leaves the endpoints.
func Probes(mux *http.ServeMux, pingPrimary func(context.Context) error) {
	ok := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	}
	mux.HandleFunc("GET /livez", ok)
	mux.HandleFunc("GET /healthz", ok)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := pingPrimary(ctx); err != nil {
			reason := "the primary database does not answer"
			var nr NotReadyError
			if errors.As(err, &nr) {
				reason = string(nr)
			}
			http.Error(w, "not ready: "+reason, http.StatusServiceUnavailable)
			return
		}
		ok(w, r)
	})
}
