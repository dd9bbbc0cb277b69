package server

import (
	"net/http/pprof"

	"github.com/rs/zerolog"
)

// Pprof is a listener serving net/http/pprof's handlers on addr (loopback
// only; config.Validate refuses any other address). It is off unless
// PPROF_ADDR is set: for profiling a benchmark or a live incident, e.g.
// `go tool pprof http://127.0.0.1:6060/debug/pprof/profile?seconds=30`.
func Pprof(addr string, log zerolog.Logger) *Server {
	s := New("pprof", addr, nil, log)
	s.Mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	s.Mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	s.Mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	s.Mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	s.Mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	return s
}
