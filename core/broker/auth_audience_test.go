package broker_test

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
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/tlsreload/tlstest"
	"github.com/converge-run/converge/core/transport"
	"github.com/converge-run/converge/core/worker"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
	"github.com/converge-run/converge/workerproto/gen/converge/worker/v1/workerv1connect"
)

// issueSPIFFE makes a client keypair whose only identity is a URI SAN (a
// SPIFFE ID, as SPIRE issues them: no OU).
func issueSPIFFE(t *testing.T, c *tlstest.CA, id string, serial int64) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	u, err := url.Parse(id)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "svid"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), URIs: []*url.URL{u},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.Cert, &key.PublicKey, c.Key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// With WORKER_CLIENT_IDENTITIES and MESH_CLIENT_IDENTITIES the audiences
// admit only their listed identities, whatever a certificate's OU says: a
// listed worker serves work but may not relay, a listed peer broker relays
// but may not pull work, and an API client's certificate (or an unlisted
// converge-worker one) is no worker-plane credential.
func TestWorkerPlane_EachAudienceRefusesTheOthersCertificates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlstest.NewCA(t)
	caFile := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(caFile, ca.PEM(), 0o600))
	srvCert, srvKey, _ := ca.Issue(t, dir, "converge", "", 2)
	const td = "spiffe://test.example/ns/converge/sa/"
	workerPair := issueSPIFFE(t, ca, td+"worker", 3)
	brokerPair := issueSPIFFE(t, ca, td+"broker", 4)
	apiPair := issueSPIFFE(t, ca, "spiffe://test.example/ns/ops/sa/conctl", 5)
	_, _, unlistedOU := ca.Issue(t, dir, "old-worker", "converge-worker", 6)

	s := apptest.Start(t, apptest.Options{Manifests: []string{routeKind}, Config: func(c *config.Config) {
		c.ListenAddr = "https://127.0.0.1:0"
		c.TLSCertFile, c.TLSKeyFile, c.TLSClientCAFile = srvCert, srvKey, caFile
		c.WorkerTokens, c.MeshTokens = "", ""
		c.WorkerClientIDs, c.MeshClientIDs = td+"worker", td+"broker"
	}})
	url := "https://" + s.Process.Addr("api").String()
	tlsFor := func(pair tls.Certificate) *tls.Config {
		return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: ca.Pool, Certificates: []tls.Certificate{pair}}
	}
	clientFor := func(pair tls.Certificate) workerv1connect.WorkerServiceClient {
		hc, err := transport.ClientFor(url, tlsFor(pair))
		require.NoError(t, err)
		return workerv1connect.NewWorkerServiceClient(hc, url)
	}

	apptest.StartWorker(t, url, worker.Options{TLS: tlsFor(workerPair)}, apptest.NewProvider("route",
		func(context.Context, worker.Request) (worker.Outcome, error) {
			return worker.Outcome{Status: json.RawMessage(`{"route_id":"viaSPIFFE"}`)}, nil
		}))
	_, _, err := s.Store.ApplyResource(context.Background(), store.ApplyResourceInput{Kind: "route", Name: "r1", Spec: json.RawMessage(`{}`)})
	require.NoError(t, err)
	r := s.WaitPhase("route", "r1", resource.PhaseReady, 60*time.Second)
	require.JSONEq(t, `{"route_id":"viaSPIFFE"}`, string(r.Status), "the listed worker identity serves work")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	config := connect.NewRequest(&workerv1.GetProviderConfigRequest{Kind: "route"})
	relay := connect.NewRequest(&workerv1.RelayStageRequest{OriginBroker: "broker-2",
		Task: &workerv1.StageTask{TaskId: "t", Resource: &workerv1.Resource{Kind: "nokind", Version: "v1"}}})

	_, err = clientFor(brokerPair).GetProviderConfig(ctx, config)
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), "a peer broker may not act as a worker: %v", err)
	_, err = clientFor(workerPair).RelayStage(ctx, relay)
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), "a worker may not relay: %v", err)
	_, err = clientFor(brokerPair).RelayStage(ctx, relay)
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "the listed broker relays (nothing serves nokind): %v", err)
	for name, pair := range map[string]tls.Certificate{"an API client's": apiPair, "an unlisted converge-worker": unlistedOU} {
		_, err = clientFor(pair).GetProviderConfig(ctx, config)
		require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "%s certificate is no worker-plane credential: %v", name, err)
	}
}
