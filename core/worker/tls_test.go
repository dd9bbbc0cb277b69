package worker_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/tlsreload"
	"github.com/converge-run/converge/core/worker"
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

// issue writes a keypair for name into dir.
func (c testCA) issue(t *testing.T, dir, name string, serial int64) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
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

// newMTLSBroker is a script broker on https that verifies the broker
// against nothing but the test's CA and requires a client certificate it
// issued.
func newMTLSBroker(t *testing.T) (b *scriptBroker, caFile, certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	ca, caFile := newTestCA(t, dir)
	srvCert, srvKey := ca.issue(t, dir, "broker", 2)
	certFile, keyFile = ca.issue(t, dir, "worker", 3)
	pair, err := tls.LoadX509KeyPair(srvCert, srvKey)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	b = newUnstartedScriptBroker(t)
	b.srv.TLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool, NextProtos: []string{"h2"}}
	b.srv.StartTLS()
	t.Cleanup(b.srv.Close)
	return b, caFile, certFile, keyFile
}

// TestServe_OptionsFromTheEnvironmentDialAMutualTLSBroker follows the
// provider guide: WORKER_ID and the TLS files (WORKER_TLS_CERT_FILE,
// WORKER_TLS_KEY_FILE, WORKER_TLS_CA_FILE) are read by OptionsFrom, so a
// worker built from it alone (the greeter's main) subscribes, under that
// id, to an https:// broker that requires a client certificate. They were
// ignored: the id was random and the handshake failed.
func TestServe_OptionsFromTheEnvironmentDialAMutualTLSBroker(t *testing.T) {
	t.Parallel()
	b, caFile, certFile, keyFile := newMTLSBroker(t)
	env := map[string]string{"WORKER_ID": "greeter-1", "WORKER_TLS_CA_FILE": caFile,
		"WORKER_TLS_CERT_FILE": certFile, "WORKER_TLS_KEY_FILE": keyFile}
	opts, err := worker.OptionsFrom(func(k string) string { return env[k] })
	require.NoError(t, err)
	startWorker(t, b, opts, okProvider())
	sub := b.next(t, "a subscribe over mutual TLS", isSubscribe).GetSubscribe()
	require.Equal(t, "greeter-1", sub.GetWorkerId())

	b.send(task("t1", "vpc", 1, 0))
	b.next(t, "the task's result", isComplete("t1"))
}

// TestNew_TLSFilesWithAPlainBrokerURLAreRefused: TLS material for an
// http:// broker would be ignored (the stream is cleartext), so the
// operator's mutual TLS silently is not: New refuses it, naming both.
func TestNew_TLSFilesWithAPlainBrokerURLAreRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, caFile := newTestCA(t, dir)
	_, err := worker.New("http://127.0.0.1:1", worker.Options{TLSFiles: tlsreload.Files{CAFile: caFile}}, okProvider())
	require.ErrorContains(t, err, "WORKER_TLS_")
	require.ErrorContains(t, err, "https://")
}
