package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestOptionsFromEnv(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	o, err := optionsFrom(env(map[string]string{"WORKER_MAX_PARALLEL": "8", "WORKER_DRAIN_TIMEOUT": "20s"}))
	require.NoError(t, err)
	require.Equal(t, 8, o.MaxParallel)
	require.Equal(t, 20*time.Second, o.DrainTimeout)
	_, err = optionsFrom(env(map[string]string{"WORKER_MAX_PARALLEL": "-1"}))
	require.ErrorContains(t, err, "WORKER_MAX_PARALLEL")
	_, err = optionsFrom(env(map[string]string{"WORKER_DRAIN_TIMEOUT": "soon"}))
	require.ErrorContains(t, err, "WORKER_DRAIN_TIMEOUT")
	o, err = optionsFrom(env(map[string]string{"WORKER_TOKEN_FILE": "/run/secrets/worker", "WORKER_MAX_MESSAGE_BYTES": "4096"}))
	require.NoError(t, err)
	require.Equal(t, "/run/secrets/worker", o.TokenFile)
	require.Equal(t, 4096, o.MaxMessageBytes)
	_, err = optionsFrom(env(map[string]string{"WORKER_TOKEN": "a", "WORKER_TOKEN_FILE": "b"}))
	require.ErrorContains(t, err, "both set", "two credentials are ambiguous")
	_, err = optionsFrom(env(map[string]string{"WORKER_MAX_MESSAGE_BYTES": "1"}))
	require.ErrorContains(t, err, "WORKER_MAX_MESSAGE_BYTES")

	for _, addr := range []string{"127.0.0.1:6062", "[::1]:6062", "localhost:0"} {
		o, err = optionsFrom(env(map[string]string{"WORKER_PPROF_ADDR": addr}))
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
		_, err = optionsFrom(env(map[string]string{"WORKER_PPROF_ADDR": addr}))
		require.ErrorContains(t, err, "WORKER_PPROF_ADDR", addr)
		require.ErrorContains(t, err, why, addr)
	}
}
