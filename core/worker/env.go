package worker

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/converge-run/converge/core/server"
	"github.com/converge-run/converge/core/tlsreload"
)

// OptionsFromEnv reads the worker's settings from the environment:
// WORKER_ID (default host-pid-random), WORKER_MAX_PARALLEL (default 64),
// WORKER_DRAIN_TIMEOUT (default 50s), WORKER_MAX_MESSAGE_BYTES (default
// 16 MiB), WORKER_HEALTH_ADDR (the probes' listen address; unset = no
// probes), WORKER_PPROF_ADDR (Go's profiler, on a loopback address only;
// unset = off), its credential, WORKER_TOKEN or WORKER_TOKEN_FILE (not
// both), and for https:// brokers the TLS files WORKER_TLS_CERT_FILE +
// WORKER_TLS_KEY_FILE (the client keypair for mutual TLS) and
// WORKER_TLS_CA_FILE (the CA that verifies the broker), re-read every
// TLS_RELOAD_INTERVAL (default 3m, at least 1s). The TypeScript SDK's optionsFromEnv
// reads the same names.
func OptionsFromEnv() (Options, error) { return OptionsFrom(os.Getenv) }

// OptionsFrom is OptionsFromEnv reading the environment through getenv.
func OptionsFrom(getenv func(string) string) (Options, error) {
	o := Options{WorkerID: getenv("WORKER_ID")}
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
	o.TLSFiles = tlsreload.Files{CertFile: getenv("WORKER_TLS_CERT_FILE"), KeyFile: getenv("WORKER_TLS_KEY_FILE"),
		CAFile: getenv("WORKER_TLS_CA_FILE")}
	if (o.TLSFiles.CertFile == "") != (o.TLSFiles.KeyFile == "") {
		return o, errors.New("WORKER_TLS_CERT_FILE and WORKER_TLS_KEY_FILE must be set together")
	}
	if v := getenv("TLS_RELOAD_INTERVAL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return o, fmt.Errorf("TLS_RELOAD_INTERVAL=%q: want a positive duration like 3m", v)
		}
		if d < tlsreload.MinInterval {
			return o, fmt.Errorf("TLS_RELOAD_INTERVAL=%q: want at least %s (each reload reads every certificate, key and token file)",
				v, tlsreload.MinInterval)
		}
		o.TLSReloadEvery = d
	}
	return o, nil
}
