package server

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"

	"github.com/rs/zerolog"
)

// Pprof is a listener serving net/http/pprof's handlers on addr (loopback
// only; config.Validate refuses any other address). It is off unless
// PPROF_ADDR is set: for profiling a benchmark or a live incident, e.g.
// `go tool pprof http://127.0.0.1:6060/debug/pprof/profile?seconds=30`.
func Pprof(addr string, log zerolog.Logger) *Server {
	s := New("pprof", addr, nil, log)
	MountPprof(s.Mux)
	return s
}

// MountPprof mounts net/http/pprof's handlers under /debug/pprof/. The Go
// worker SDK serves them too (WORKER_PPROF_ADDR).
func MountPprof(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}

// CheckPprofAddr accepts "" (off) or a loopback host:port, the address
// env names: profiles expose memory contents and cost CPU, so they are
// never served to the network.
func CheckPprofAddr(env, addr string) error {
	if addr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s=%q: want host:port", env, addr)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("%s=%q: profiling is served on loopback only (127.0.0.1, ::1 or localhost)", env, addr)
	}
	return nil
}
