package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/rs/zerolog"
)

// sideServer is an HTTP listener beside the worker's stream: the probes
// (health.go) or the profiler (pprof.go). New binds it, so a bad or busy
// address fails at startup; Run serves it until Run returns. A nil
// *sideServer is an unset address: it serves nothing.
type sideServer struct {
	ln     net.Listener
	srv    *http.Server
	log    zerolog.Logger
	onFail string // logged if serving stops before Run ends
}

// listenSide binds addr, the value of env, for h.
func listenSide(env, addr string, h http.Handler, log zerolog.Logger, onFail string) (*sideServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s=%q: %w", env, addr, err)
	}
	return &sideServer{ln: ln, srv: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}, log: log, onFail: onFail}, nil
}

// serve answers requests until stop is called.
func (s *sideServer) serve() (stop func()) {
	if s == nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error().Err(err).Str("addr", s.ln.Addr().String()).Msg(s.onFail)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.srv.Shutdown(ctx)
		<-done
	}
}

// addr is the bound address, the port resolved ("" when unset).
func (s *sideServer) addr() string {
	if s == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// close releases a listener that will never be served (New failed).
func (s *sideServer) close() {
	if s != nil {
		_ = s.ln.Close()
	}
}
