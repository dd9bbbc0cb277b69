package cli_test

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
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pki is a throwaway CA with a server and a client certificate.
type pki struct {
	caPEM                []byte
	server               tls.Certificate
	clientCert, clientKy []byte
	pool                 *x509.CertPool
}

func newPKI(t *testing.T) pki {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	leaf := func(serial int64, usage x509.ExtKeyUsage) ([]byte, []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "leaf"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		require.NoError(t, err)
		kb, err := x509.MarshalECPrivateKey(key)
		require.NoError(t, err)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
	}
	sc, sk := leaf(2, x509.ExtKeyUsageServerAuth)
	server, err := tls.X509KeyPair(sc, sk)
	require.NoError(t, err)
	cc, ck := leaf(3, x509.ExtKeyUsageClientAuth)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pki{caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), server: server,
		clientCert: cc, clientKy: ck, pool: pool}
}

// TestTLS_MutualTLSOverHTTPAndWebsocket fronts the stack with a TLS
// terminator that requires client certificates (as converge does with
// TLS_CLIENT_CA_FILE) and drives queries and a subscription through it.
func TestTLS_MutualTLSOverHTTPAndWebsocket(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{noWorker: true})
	p := newPKI(t)
	target, err := url.Parse(s.server)
	require.NoError(t, err)
	front := httptest.NewUnstartedServer(httputil.NewSingleHostReverseProxy(target))
	front.TLS = &tls.Config{Certificates: []tls.Certificate{p.server}, ClientCAs: p.pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	front.StartTLS()
	t.Cleanup(front.Close)

	dir := t.TempDir()
	ca, cert, key := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	require.NoError(t, os.WriteFile(ca, p.caPEM, 0o600))
	require.NoError(t, os.WriteFile(cert, p.clientCert, 0o600))
	require.NoError(t, os.WriteFile(key, p.clientKy, 0o600))

	cases := []struct {
		reason string
		flags  []string
		ok     bool
		stderr string
	}{
		{"the CA and a client certificate get through", []string{"--tls-ca", ca, "--tls-cert", cert, "--tls-key", key}, true, ""},
		{"--insecure-skip-verify skips the server's verification", []string{"--insecure-skip-verify", "--tls-cert", cert, "--tls-key", key}, true, ""},
		{"without the CA the server is not trusted", []string{"--tls-cert", cert, "--tls-key", key}, false, "certificate signed by unknown authority"},
		{"without a client certificate the server refuses", []string{"--tls-ca", ca}, false, "certificate"},
	}
	for _, tc := range cases {
		r := runConctl(t.Context(), front.URL, "", append([]string{"get", "nodes"}, tc.flags...)...)
		if !tc.ok {
			require.Equal(t, 1, r.code, tc.reason)
			require.Contains(t, r.stderr, tc.stderr, tc.reason)
			continue
		}
		require.Equalf(t, 0, r.code, "%s: %s", tc.reason, r.stderr)
		require.Contains(t, r.stdout, "ALL", tc.reason)
		w := startWatch(t, front.URL, append([]string{"nodes"}, tc.flags...)...)
		w.waitLine(t, tc.reason+" (wss)", `^ADDED\s+\S+\s+ALL\s+READY`)
		require.Equal(t, 0, w.stop(t))
	}
}
