package worker

import (
	"net/http"

	"github.com/converge-run/converge/core/server"
)

// The worker's profiler, served on Options.PprofAddr (WORKER_PPROF_ADDR)
// when it is set: Go's /debug/pprof/ handlers, as converge serves them on
// PPROF_ADDR, for profiling a worker under load or in an incident, e.g.
// `go tool pprof http://127.0.0.1:6062/debug/pprof/profile?seconds=30`.
// Loopback only: a non-loopback address is refused. Like the probes'
// listener, it is bound by New, so a bad or busy address fails at startup.

// newPprofServer binds the profiler's listener; nil when addr is empty.
func newPprofServer(addr string, w *Worker) (*sideServer, error) {
	if addr == "" {
		return nil, nil
	}
	if err := server.CheckPprofAddr("WORKER_PPROF_ADDR", addr); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	server.MountPprof(mux)
	return listenSide("WORKER_PPROF_ADDR", addr, mux, w.log, "profiler stopped serving")
}

// PprofAddr is the address the profiler listens on ("" without PprofAddr),
// with the port resolved (PprofAddr may ask for port 0).
func (w *Worker) PprofAddr() string { return w.pprof.addr() }
