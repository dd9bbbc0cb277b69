// Package tlstest issues the certificates of a test's TLS and mutual TLS: a
// CA, and the keypairs it signs, written as PEM files where the code under
// test reads them from disk.
package tlstest

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
)

// CA is a test's certificate authority, valid from an hour ago for an hour.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	Pool *x509.CertPool // holding Cert alone
}

// NewCA makes a CA.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	check(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	check(t, err)
	c, err := x509.ParseCertificate(der)
	check(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(c)
	return &CA{Cert: c, Key: key, Pool: pool}
}

// PEM is the CA's certificate as PEM.
func (c *CA) PEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Cert.Raw})
}

// WriteFile writes the CA's certificate to dir/ca.pem and returns the path.
func (c *CA) WriteFile(t testing.TB, dir string) string {
	t.Helper()
	f := filepath.Join(dir, "ca.pem")
	check(t, os.WriteFile(f, c.PEM(), 0o600))
	return f
}

// Issue signs a keypair for name, with OU ou (none when ""), for server and
// client auth, and writes it to dir/name.pem and dir/name-key.pem. It
// covers hosts (IP addresses or DNS names; 127.0.0.1 when none is given).
func (c *CA) Issue(t testing.TB, dir, name, ou string, serial int64, hosts ...string) (certFile, keyFile string, pair tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	check(t, err)
	subj := pkix.Name{CommonName: name}
	if ou != "" {
		subj.OrganizationalUnit = []string{ou}
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: subj,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1"}
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.Cert, &key.PublicKey, c.Key)
	check(t, err)
	kb, err := x509.MarshalECPrivateKey(key)
	check(t, err)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	check(t, os.WriteFile(certFile, certPEM, 0o600))
	check(t, os.WriteFile(keyFile, keyPEM, 0o600))
	pair, err = tls.X509KeyPair(certPEM, keyPEM)
	check(t, err)
	return certFile, keyFile, pair
}

func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("tlstest: %v", err)
	}
}
