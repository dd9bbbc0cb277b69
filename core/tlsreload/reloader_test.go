package tlsreload

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) ca {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	c, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return ca{cert: c, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (c ca) issue(t *testing.T, serial int64, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "leaf"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"127.0.0.1", "localhost"}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = nil
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	require.NoError(t, err)
	kb, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, b, 0o600))
}

func TestReloader_MutualTLSAndLiveRotation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	root := newCA(t, "root")
	srvCert, srvKey := root.issue(t, 10, true)
	cliCert, cliKey := root.issue(t, 20, false)
	paths := map[string]string{}
	for name, b := range map[string][]byte{"srv.crt": srvCert, "srv.key": srvKey, "cli.crt": cliCert, "cli.key": cliKey, "ca.crt": root.pem} {
		paths[name] = filepath.Join(dir, name)
		write(t, paths[name], b)
	}
	server, err := New(Files{CertFile: paths["srv.crt"], KeyFile: paths["srv.key"], CAFile: paths["ca.crt"]}, time.Hour, zerolog.Nop())
	require.NoError(t, err)
	client, err := New(Files{CertFile: paths["cli.crt"], KeyFile: paths["cli.key"], CAFile: paths["ca.crt"]}, time.Hour, zerolog.Nop())
	require.NoError(t, err)

	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.TLS.PeerCertificates[0].SerialNumber.String())
	}))
	srv.TLS = server.ServerConfig()
	srv.StartTLS()
	defer srv.Close()

	get := func(cfg *tls.Config) (serverSerial int64, clientSeen string, err error) {
		tr := &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}
		defer tr.CloseIdleConnections()
		res, err := (&http.Client{Transport: tr}).Get(srv.URL)
		if err != nil {
			return 0, "", err
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.TLS.PeerCertificates[0].SerialNumber.Int64(), string(b), nil
	}

	s, seen, err := get(client.ClientConfig())
	require.NoError(t, err)
	require.Equal(t, int64(10), s)
	require.Equal(t, "20", seen, "the server saw the client certificate")

	noCert := &tls.Config{RootCAs: x509.NewCertPool()}
	noCert.RootCAs.AppendCertsFromPEM(root.pem)
	_, _, err = get(noCert)
	require.Error(t, err, "mTLS rejects a client without a certificate")

	// Rotate the server certificate in place: the next handshake serves it.
	newCert, newKey := root.issue(t, 11, true)
	write(t, paths["srv.crt"], newCert)
	write(t, paths["srv.key"], newKey)
	require.NoError(t, server.Reload())
	require.EqualValues(t, 1, server.Swaps())
	require.NoError(t, server.Reload())
	require.EqualValues(t, 1, server.Swaps(), "unchanged files swap nothing")
	s, _, err = get(client.ClientConfig())
	require.NoError(t, err)
	require.Equal(t, int64(11), s, "rotated without a restart")

	// A half-written file keeps the last good material.
	write(t, paths["srv.crt"], newCert[:len(newCert)/2])
	require.Error(t, server.Reload())
	s, _, err = get(client.ClientConfig())
	require.NoError(t, err)
	require.Equal(t, int64(11), s, "the last good keypair is still served")

	// Rotating the client CA to a new root locks out certificates of the old one.
	other := newCA(t, "other")
	write(t, paths["srv.crt"], newCert)
	write(t, paths["ca.crt"], other.pem)
	require.NoError(t, server.Reload())
	_, _, err = get(client.ClientConfig())
	require.Error(t, err, "a client signed by the retired CA is refused")
}

func TestNew_FailsFastOnUnusableFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, err := New(Files{CertFile: filepath.Join(dir, "missing.crt"), KeyFile: filepath.Join(dir, "missing.key")}, 0, zerolog.Nop())
	require.ErrorContains(t, err, "missing.crt")
	bad := filepath.Join(dir, "ca.crt")
	write(t, bad, []byte("not pem"))
	_, err = New(Files{CAFile: bad}, 0, zerolog.Nop())
	require.ErrorContains(t, err, "no PEM certificate")
}
