package stack

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The stack's processes inherit the developer's environment less what the
// stack sets or provisions itself: an exported WORKER_TOKEN (as the docs have
// a standalone worker use) made devstack's worker refuse to start beside
// the stack's WORKER_TOKEN_FILE, and a DATABASE_READ_URL would have pointed
// its converge at another database.
func TestInheritedEnv_DropsWhatTheStackProvisions(t *testing.T) {
	t.Setenv("WORKER_TOKEN", "from-the-shell")
	t.Setenv("WORKER_TLS_CA_FILE", "/etc/ca.pem")
	t.Setenv("DATABASE_READ_URL", "postgres://prod/db")
	t.Setenv("TLS_CERT_FILE", "/etc/tls.crt")
	t.Setenv("API_CLIENT_IDENTITIES", "admin:CN=x")
	t.Setenv("LOG_LEVEL", "debug")
	names := func(env []string) map[string]bool {
		out := map[string]bool{}
		for _, kv := range env {
			name, _, _ := strings.Cut(kv, "=")
			out[name] = true
		}
		return out
	}
	w := names(inheritedEnv(stackWorkerVar))
	require.False(t, w["WORKER_TOKEN"])
	require.False(t, w["WORKER_TLS_CA_FILE"])
	require.True(t, w["LOG_LEVEL"], "the rest passes through")
	c := names(inheritedEnv(stackServerVar))
	require.False(t, c["DATABASE_READ_URL"])
	require.False(t, c["TLS_CERT_FILE"])
	require.False(t, c["API_CLIENT_IDENTITIES"])
	require.True(t, c["LOG_LEVEL"])
	require.True(t, c["WORKER_TOKEN"], "a converge process has no use for it, and nothing to clash with")
}
