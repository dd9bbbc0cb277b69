package ts_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/auth"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/resource"
)

// testCA issues one test's certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T, dir string) (testCA, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	c, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	caFile := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	return testCA{cert: c, key: key}, caFile
}

// issue writes a keypair for name (with OU ou, none when "") into dir.
func (c testCA) issue(t *testing.T, dir, name, ou string, serial int64) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	subj := pkix.Name{CommonName: name}
	if ou != "" {
		subj.OrganizationalUnit = []string{ou}
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: subj,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	require.NoError(t, err)
	kb, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600))
	return certFile, keyFile
}

// TestTSWorker_MutualTLS: with WORKER_TLS_CERT_FILE, WORKER_TLS_KEY_FILE and
// WORKER_TLS_CA_FILE the TypeScript worker dials an https:// broker that
// takes identities from client certificates (no token files): a
// converge-worker certificate serves work; a certificate without the
// worker OU is refused and gets none.
func TestTSWorker_MutualTLS(t *testing.T) {
	t.Parallel()
	build(t)
	dir := t.TempDir()
	ca, caFile := newTestCA(t, dir)
	srvCert, srvKey := ca.issue(t, dir, "converge", auth.BrokerOU, 2)
	workerCert, workerKey := ca.issue(t, dir, "ts-worker", auth.WorkerOU, 3)
	plainCert, plainKey := ca.issue(t, dir, "dashboard", "", 4)
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
