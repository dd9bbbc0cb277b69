package ts_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/auth"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/tlsreload/tlstest"
)

// TestTSWorker_MutualTLS: with WORKER_TLS_CERT_FILE, WORKER_TLS_KEY_FILE and
// WORKER_TLS_CA_FILE the TypeScript worker dials an https:// broker that
// takes identities from client certificates (no token files): a
// converge-worker certificate serves work; a certificate without the
// worker OU is refused and gets none.
func TestTSWorker_MutualTLS(t *testing.T) {
	t.Parallel()
	build(t)
	dir := t.TempDir()
	ca := tlstest.NewCA(t)
	caFile := ca.WriteFile(t, dir)
	srvCert, srvKey, _ := ca.Issue(t, dir, "converge", auth.BrokerOU, 2)
	workerCert, workerKey, _ := ca.Issue(t, dir, "ts-worker", auth.WorkerOU, 3)
	plainCert, plainKey, _ := ca.Issue(t, dir, "dashboard", "", 4)
	s := apptest.Start(t, apptest.Options{Config: func(c *config.Config) {
		c.ListenAddr = "https://127.0.0.1:0"
		c.TLSCertFile, c.TLSKeyFile, c.TLSClientCAFile = srvCert, srvKey, caFile
		c.WorkerTokens, c.MeshTokens = "", ""
	}})
	applyManifests(t, s)
	url := "BROKER_URL=https://" + s.Process.Addr("api").String()

	refused := startWorker(t, url, "WORKER_TLS_CERT_FILE="+plainCert, "WORKER_TLS_KEY_FILE="+plainKey,
		"WORKER_TLS_CA_FILE="+caFile, "LOG_FORMAT=json")
	apptest.WaitFor(t, time.Minute, "the OU-less certificate is refused", func() bool {
		return refused.loggedWith("broker stream lost; reconnecting", "unauthenticated")
	})
	applyAll(t, s.Store, "tsgreeting", map[string]string{"tls": `{"name":"tls"}`})

	w := startWorker(t, url, "WORKER_TLS_CERT_FILE="+workerCert, "WORKER_TLS_KEY_FILE="+workerKey,
		"WORKER_TLS_CA_FILE="+caFile, "LOG_FORMAT=json")
	requireStatus(t, s.WaitPhase("tsgreeting", "tls", resource.PhaseReady, 2*time.Minute), `{"message":"Hello, tls!"}`)
	require.True(t, w.has(map[string]any{"event": "start", "name": "tls"}))
	require.False(t, refused.has(map[string]any{"event": "start"}), "the refused worker got no work")
	require.Zero(t, refused.logged("connected to broker"))
}

// loggedWith reports whether a log line with message msg mentions part.
func (w *nodeWorker) loggedWith(msg, part string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range w.logs {
		var rec map[string]any
		if json.Unmarshal([]byte(l), &rec) == nil && rec["message"] == msg && strings.Contains(fmt.Sprint(rec["error"]), part) {
			return true
		}
	}
	return false
}
