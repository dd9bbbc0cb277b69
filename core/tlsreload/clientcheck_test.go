package tlsreload

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// A client certificate that expires while its connection is open is refused
// on that connection from then on, and the connection is closed: the
// client's next request dials again (and, with the expired certificate,
// fails its handshake).
func TestClientCheck_ExpiredCertificateIsRefusedOnItsOpenConnection(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	root := newCA(t, "root")
	srvCert, srvKey := root.issue(t, 10, true)
	paths := map[string]string{}
	for name, b := range map[string][]byte{"srv.crt": srvCert, "srv.key": srvKey, "ca.crt": root.pem} {
		paths[name] = filepath.Join(dir, name)
		write(t, paths[name], b)
	}
	server, err := New(Files{CertFile: paths["srv.crt"], KeyFile: paths["srv.key"], CAFile: paths["ca.crt"]}, time.Hour, zerolog.Nop())
	require.NoError(t, err)
	check := server.ClientCheck()
	require.NotNil(t, check)

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	expires := time.Now().Add(1500 * time.Millisecond)
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(30),
		Subject: pkix.Name{CommonName: "short-lived"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: expires,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, root.cert, &key.PublicKey, root.key)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(der)
	require.NoError(t, err)

	srv := httptest.NewUnstartedServer(check.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})))
	srv.TLS = server.ServerConfig()
	srv.Config.ConnContext = check.ConnContext
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(root.cert)
	tr := &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, ServerName: "localhost",
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}}}}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	get := func() (status int, reused bool, err error) {
		req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}))
		res, err := hc.Do(req)
		if err != nil {
			return 0, reused, err
		}
		defer res.Body.Close()
		_, _ = io.ReadAll(res.Body)
		return res.StatusCode, reused, nil
	}

	status, _, err := get()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status, "the certificate verifies while it is valid")
	status, reused, err := get()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status)
	require.True(t, reused, "the client keeps its connection")

	for time.Now().Before(expires.Add(50 * time.Millisecond)) {
		time.Sleep(time.Until(expires.Add(50 * time.Millisecond))) // the clock is the condition: the certificate's expiry
	}
	status, reused, err = get()
	require.NoError(t, err)
	require.True(t, reused, "the request rode the connection opened while the certificate was valid")
	require.Equal(t, http.StatusUnauthorized, status, "an expired certificate is refused on its open connection")
	_, reused, err = get()
	require.Error(t, err, "the refused connection was closed; a new handshake with the expired certificate fails")
	require.False(t, reused)
}

// Verify checks a handshake's certificate against the bundle of now, and
// Changed wakes what outlives a request (a worker's session) when the
// bundle changes.
func TestClientCheck_VerifyFollowsTheBundle(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	root := newCA(t, "root")
	cliCert, cliKey := root.issue(t, 20, false)
	caFile := filepath.Join(dir, "ca.crt")
	write(t, caFile, root.pem)
	r, err := New(Files{CAFile: caFile}, time.Hour, zerolog.Nop())
	require.NoError(t, err)
	check := r.ClientCheck()
	pair, err := tls.X509KeyPair(cliCert, cliKey)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	require.NoError(t, err)
	cs := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}

	until, err := check.Verify(cs)
	require.NoError(t, err)
	first := leaf.NotAfter
	if root.cert.NotAfter.Before(first) {
		first = root.cert.NotAfter
	}
	require.Equal(t, first, until, "the chain's first expiry")
	changed := check.Changed()
	write(t, caFile, newCA(t, "other").pem)
	require.NoError(t, r.Reload())
	select {
	case <-changed:
	default:
		t.Fatal("a rotation closes Changed")
	}
	_, err = check.Verify(cs)
	require.ErrorContains(t, err, "no longer verifies against TLS_CLIENT_CA_FILE")

	var none *ClientCheck
	_, err = none.Verify(cs)
	require.NoError(t, err, "without mutual TLS there is nothing to verify")
	require.Nil(t, (*Reloader)(nil).ClientCheck())
}
