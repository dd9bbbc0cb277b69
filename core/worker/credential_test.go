package worker_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/testlog"
	"github.com/converge-run/converge/core/worker"
)

// TestServe_AnUnreadableTokenFileEndsTheSessionNamingTheFile: a session is
// not opened without the credential the worker was given: the read error
// (naming WORKER_TOKEN_FILE) is what the reconnect warning says. The
// stream went out with no Authorization header before, and the operator
// read the broker's "missing token" instead of why.
func TestServe_AnUnreadableTokenFileEndsTheSessionNamingTheFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(empty, []byte("\n"), 0o600))
	for name, tc := range map[string]struct {
		reason, file, want string
	}{
		"missing": {reason: "a file that cannot be read", file: filepath.Join(dir, "missing"), want: "read WORKER_TOKEN_FILE"},
		"empty":   {reason: "a file with no token (a secret not yet written)", file: empty, want: "its first line is empty"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := newScriptBroker(t)
			logs := &testlog.Buffer{}
			startWorker(t, b, worker.Options{TokenFile: tc.file, Logger: zerolog.New(logs)}, okProvider())
			deadline := time.Now().Add(20 * time.Second)
			for !strings.Contains(logs.String(), `"message":"broker stream lost; reconnecting"`) {
				require.True(t, time.Now().Before(deadline), "no reconnect warning; logs:\n%s", logs.String())
				time.Sleep(10 * time.Millisecond)
			}
			require.Contains(t, logs.String(), tc.want, tc.reason)
			b.mu.Lock()
			defer b.mu.Unlock()
			require.Zero(t, b.sessions, "no session is opened without the credential: %s", tc.reason)
		})
	}
}
