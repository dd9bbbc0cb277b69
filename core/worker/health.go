package worker

import "net/http"

// The worker's probes, served on Options.HealthAddr (WORKER_HEALTH_ADDR)
// when it is set, for a Deployment's livenessProbe and readinessProbe:
//
//   - /livez answers 200 while Run runs. It never depends on a broker: a
//     broker outage must not restart every worker.
//   - /readyz answers 200 only while a session is subscribed to a broker and
//     the worker is not draining, 503 with the reason otherwise. A rolling
//     update then counts a new worker available once it takes work, and a
//     draining one drops out at once.
//
// The listener is bound by New, so a bad or busy address fails at startup.

// newHealthServer binds the probes' listener; nil when addr is empty.
func newHealthServer(addr string, w *Worker) (*sideServer, error) {
	if addr == "" {
		return nil, nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = rw.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if reason := w.unready(); reason != "" {
			rw.WriteHeader(http.StatusServiceUnavailable)
			_, _ = rw.Write([]byte(reason + "\n"))
			return
		}
		_, _ = rw.Write([]byte("ok\n"))
	})
	return listenSide("WORKER_HEALTH_ADDR", addr, mux, w.log,
		"health probes stopped serving; the pod will be restarted by its liveness probe")
}

// HealthAddr is the address the probes listen on ("" without HealthAddr),
// with the port resolved (HealthAddr may ask for port 0).
func (w *Worker) HealthAddr() string { return w.health.addr() }

// unready says why /readyz fails, "" when the worker is ready.
func (w *Worker) unready() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.draining:
		return "draining: finishing in-flight tasks, taking no new ones"
	case !w.subscribed:
		return "not connected to a broker"
	}
	return ""
}

// setSubscribed records whether a session is open and subscribed, and the
// message limit its broker named (0: none).
func (w *Worker) setSubscribed(on bool, brokerMax int64) {
	w.mu.Lock()
	w.subscribed = on
	w.brokerMax = int(min(brokerMax, int64(w.opts.MaxMessageBytes)))
	w.mu.Unlock()
}
