package worker_test

import (
	"crypto/tls"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/tlsreload"
	"github.com/converge-run/converge/core/tlsreload/tlstest"
	"github.com/converge-run/converge/core/worker"
)

// newMTLSBroker is a script broker on https that verifies the broker
// against nothing but the test's CA and requires a client certificate it
// issued.
func newMTLSBroker(t *testing.T) (b *scriptBroker, caFile, certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	ca := tlstest.NewCA(t)
	caFile = ca.WriteFile(t, dir)
	_, _, pair := ca.Issue(t, dir, "broker", "", 2)
	certFile, keyFile, _ = ca.Issue(t, dir, "worker", "", 3)
	b = newUnstartedScriptBroker(t)
	b.srv.TLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool, NextProtos: []string{"h2"}}
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
	caFile := tlstest.NewCA(t).WriteFile(t, dir)
	_, err := worker.New("http://127.0.0.1:1", worker.Options{TLSFiles: tlsreload.Files{CAFile: caFile}}, okProvider())
	require.ErrorContains(t, err, "WORKER_TLS_")
	require.ErrorContains(t, err, "https://")
}
