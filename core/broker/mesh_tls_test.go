package broker

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"math/big"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store/membership"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
	"github.com/converge-run/converge/workerproto/gen/converge/worker/v1/workerv1connect"
)

// A peer that advertises its BROKER_URL by address (a pod's IP, which no
// certificate names) and BROKER_TLS_SERVER_NAME beside it is dialled at the
// address and verified as the name; without the name, the same peer's
// certificate does not verify and nothing reaches it.
func TestMeshReact_APeerByAddressIsVerifiedAsItsAdvertisedServerName(t *testing.T) {
	t.Parallel()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mesh-test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "converge-peers.ns.svc"},
		DNSNames:  []string{"converge-peers.ns.svc"}, // no IP address
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	require.NoError(t, err)

	_, h := workerv1connect.NewWorkerServiceHandler(workerv1connect.UnimplementedWorkerServiceHandler{})
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(ca)

	relay := func(name string) error {
		t.Helper()
		m := newMesh("self", func() {}, testLog(t))
		m.TLS = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots}
		cfg, err := json.Marshal(map[string]any{"BROKER_URL": srv.URL, "BROKER_TLS_SERVER_NAME": name})
		require.NoError(t, err)
		peer := membership.Member{ID: "b", Role: membership.RoleBroker, Kinds: []string{"vpc/v1"}, Config: cfg}
		m.Members = &fakeMembers{ListLiveFn: func(context.Context, time.Duration) ([]membership.Member, error) {
			return []membership.Member{peer}, nil
		}}
		require.NoError(t, m.React(context.Background()))
		p := m.pick(manifest.KindVersion{Kind: "vpc", Version: "v1"})
		require.NotNil(t, p)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = p.client.RelayStage(ctx, connect.NewRequest(&workerv1.RelayStageRequest{}))
		return err
	}
	require.Equal(t, connect.CodeUnimplemented, connect.CodeOf(relay("converge-peers.ns.svc")),
		"verified as its advertised name, the call reaches the peer's handler")
	err = relay("")
	require.Error(t, err)
	require.NotEqual(t, connect.CodeUnimplemented, connect.CodeOf(err), "by its address alone, the handshake fails: %v", err)
	require.Contains(t, err.Error(), "certificate")
}
