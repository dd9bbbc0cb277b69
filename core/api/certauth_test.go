package api_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/auth"
)

// certCA issues the certificates of one mutual-TLS test.
type certCA struct {
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	pool   *x509.CertPool
	serial int64
}

func newCertCA(t *testing.T) *certCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "api-test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	c, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(c)
	return &certCA{cert: c, key: key, pool: pool, serial: 1}
}

// issue makes a keypair for common name cn, with uri as its URI SAN when
// set and ou as its OU when set.
func (c *certCA) issue(t *testing.T, cn, uri, ou string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	c.serial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(c.serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	if ou != "" {
		tmpl.Subject.OrganizationalUnit = []string{ou}
	}
	if uri != "" {
		u, err := url.Parse(uri)
		require.NoError(t, err)
		tmpl.URIs = []*url.URL{u}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// client presents pair (none when nil) to a server trusted through the CA.
func (c *certCA) client(pair *tls.Certificate) *http.Client {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: c.pool}
	if pair != nil {
		cfg.Certificates = []tls.Certificate{*pair}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 30 * time.Second}
}

// withClientCertificates serves the API over TLS that verifies client
// certificates against ca (when presented) and admits those ids lists.
func withClientCertificates(t *testing.T, ca *certCA, ids string) envOpt {
	t.Helper()
	certs, err := auth.ParseAPIIdentities(ids)
	require.NoError(t, err)
	server := ca.issue(t, "converge", "", auth.BrokerOU)
	return func(c *envConfig) {
		c.certs = certs
		c.serverTLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{server},
			ClientCAs: ca.pool, ClientAuth: tls.VerifyClientCertIfGiven}
	}
}

// With API_CLIENT_IDENTITIES a listed certificate is an API credential with
// its role; a worker's or a peer broker's certificate — verified by the same
// CA — is none, and neither is no certificate at all.
func TestAPI_ClientCertificatesPerAudience(t *testing.T) {
	t.Parallel()
	ca := newCertCA(t)
	e := newEnv(t, withClientCertificates(t, ca,
		"admin:spiffe://test.example/ns/ops/sa/conctl, viewer:CN=dashboard"))
	ops := ca.issue(t, "ops", "spiffe://test.example/ns/ops/sa/conctl", "")
	dash := ca.issue(t, "dashboard", "", "")
	worker := ca.issue(t, "worker-1", "spiffe://test.example/ns/converge/sa/worker", auth.WorkerOU)
	broker := ca.issue(t, "broker-2", "", auth.BrokerOU)
	const mutation = `mutation { applyResource(input: {kind: "nokind", name: "x", spec: {}}) { name } }`

	r := e.doAs(ca.client(&ops), "", `{ __typename }`, nil)
	require.Equal(t, http.StatusOK, r.status, "a listed admin identity queries: %+v", r.Errors)
	require.NotEqual(t, "FORBIDDEN", e.doAs(ca.client(&ops), "", mutation, nil).code(), "…and may mutate")

	r = e.doAs(ca.client(&dash), "", `{ __typename }`, nil)
	require.Equal(t, http.StatusOK, r.status, "a listed viewer identity queries: %+v", r.Errors)
	require.Equal(t, "FORBIDDEN", e.doAs(ca.client(&dash), "", mutation, nil).code(), "…but may not mutate")

	for name, pair := range map[string]*tls.Certificate{"worker": &worker, "peer broker": &broker, "none": nil} {
		r = e.doAs(ca.client(pair), "", `{ __typename }`, nil)
		require.Equal(t, http.StatusUnauthorized, r.status, "a %s certificate is no API credential", name)
		require.Equal(t, "UNAUTHENTICATED", r.code(), name)
	}
}
