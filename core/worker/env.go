package worker

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/converge-run/converge/core/server"
)

// OptionsFromEnv reads the worker's tunables from the environment:
// WORKER_MAX_PARALLEL (default 64), WORKER_DRAIN_TIMEOUT (default 50s),
// WORKER_MAX_MESSAGE_BYTES (default 16 MiB), WORKER_HEALTH_ADDR (the
// probes' listen address; unset = no probes), WORKER_PPROF_ADDR (Go's
// profiler, on a loopback address only; unset = off) and its credential,
// WORKER_TOKEN or WORKER_TOKEN_FILE (not both).
func OptionsFromEnv() (Options, error) { return optionsFrom(os.Getenv) }

func optionsFrom(getenv func(string) string) (Options, error) {
	var o Options
	if v := getenv("WORKER_MAX_PARALLEL"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return o, fmt.Errorf("WORKER_MAX_PARALLEL=%q: want a positive integer", v)
		}
		o.MaxParallel = n
	}
	if v := getenv("WORKER_DRAIN_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return o, fmt.Errorf("WORKER_DRAIN_TIMEOUT=%q: want a positive duration like 50s", v)
		}
		o.DrainTimeout = d
	}
	if v := getenv("WORKER_MAX_MESSAGE_BYTES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1024 {
			return o, fmt.Errorf("WORKER_MAX_MESSAGE_BYTES=%q: want a byte count of at least 1024", v)
		}
		o.MaxMessageBytes = n
	}
	o.HealthAddr = getenv("WORKER_HEALTH_ADDR")
	o.PprofAddr = getenv("WORKER_PPROF_ADDR")
	if err := server.CheckPprofAddr("WORKER_PPROF_ADDR", o.PprofAddr); err != nil {
		return o, err
	}
	o.Token, o.TokenFile = getenv("WORKER_TOKEN"), getenv("WORKER_TOKEN_FILE")
	if o.Token != "" && o.TokenFile != "" {
		return o, fmt.Errorf("WORKER_TOKEN and WORKER_TOKEN_FILE are both set: set one")
	}
	return o, nil
}
