package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestOptionsFromEnv(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	o, err := OptionsFrom(env(map[string]string{"WORKER_MAX_PARALLEL": "8", "WORKER_DRAIN_TIMEOUT": "20s"}))
	require.NoError(t, err)
	require.Equal(t, 8, o.MaxParallel)
	require.Equal(t, 20*time.Second, o.DrainTimeout)
	_, err = OptionsFrom(env(map[string]string{"WORKER_MAX_PARALLEL": "-1"}))
	require.ErrorContains(t, err, "WORKER_MAX_PARALLEL")
	_, err = OptionsFrom(env(map[string]string{"WORKER_DRAIN_TIMEOUT": "soon"}))
	require.ErrorContains(t, err, "WORKER_DRAIN_TIMEOUT")
	o, err = OptionsFrom(env(map[string]string{"WORKER_TOKEN_FILE": "/run/secrets/worker", "WORKER_MAX_MESSAGE_BYTES": "4096"}))
	require.NoError(t, err)
	require.Equal(t, "/run/secrets/worker", o.TokenFile)
	require.Equal(t, 4096, o.MaxMessageBytes)
	_, err = OptionsFrom(env(map[string]string{"WORKER_TOKEN": "a", "WORKER_TOKEN_FILE": "b"}))
	require.ErrorContains(t, err, "both set", "two credentials are ambiguous")
	_, err = OptionsFrom(env(map[string]string{"WORKER_MAX_MESSAGE_BYTES": "1"}))
	require.ErrorContains(t, err, "WORKER_MAX_MESSAGE_BYTES")
	o, err = OptionsFrom(env(map[string]string{"WORKER_ID": "w-1", "WORKER_TLS_CA_FILE": "/ca.pem", "TLS_RELOAD_INTERVAL": "30s"}))
	require.NoError(t, err)
	require.Equal(t, "w-1", o.WorkerID)
	require.Equal(t, "/ca.pem", o.TLSFiles.CAFile)
	require.Equal(t, 30*time.Second, o.TLSReloadEvery)
	_, err = OptionsFrom(env(map[string]string{"WORKER_TLS_CERT_FILE": "/c.pem"}))
	require.ErrorContains(t, err, "WORKER_TLS_CERT_FILE and WORKER_TLS_KEY_FILE must be set together")
	_, err = OptionsFrom(env(map[string]string{"TLS_RELOAD_INTERVAL": "often"}))
	require.ErrorContains(t, err, "TLS_RELOAD_INTERVAL")
	// converge's floor: a reload every nanosecond would read the files in a
	// loop. The floor itself is accepted.
	_, err = OptionsFrom(env(map[string]string{"TLS_RELOAD_INTERVAL": "999ms"}))
	require.ErrorContains(t, err, `TLS_RELOAD_INTERVAL="999ms": want at least 1s`)
	o, err = OptionsFrom(env(map[string]string{"TLS_RELOAD_INTERVAL": "1s"}))
	require.NoError(t, err)
	require.Equal(t, time.Second, o.TLSReloadEvery)

	for _, addr := range []string{"127.0.0.1:6062", "[::1]:6062", "localhost:0"} {
		o, err = OptionsFrom(env(map[string]string{"WORKER_PPROF_ADDR": addr}))
		require.NoError(t, err, addr)
		require.Equal(t, addr, o.PprofAddr)
	}
	for addr, why := range map[string]string{
		"0.0.0.0:6062":   "loopback only",
		":6062":          "loopback only",
		"10.0.0.7:6062":  "loopback only",
		"127.0.0.1":      "want host:port",
		"pprof.internal": "want host:port",
	} {
		_, err = OptionsFrom(env(map[string]string{"WORKER_PPROF_ADDR": addr}))
		require.ErrorContains(t, err, "WORKER_PPROF_ADDR", addr)
		require.ErrorContains(t, err, why, addr)
	}
}
