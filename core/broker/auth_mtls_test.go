package broker_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/auth"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/tlsreload/tlstest"
	"github.com/converge-run/converge/core/transport"
	"github.com/converge-run/converge/core/worker"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
	"github.com/converge-run/converge/workerproto/gen/converge/worker/v1/workerv1connect"
)

// With mutual TLS and no token files, identities come from the client
// certificates: a converge-worker certificate serves work, a certificate
// without a plane OU (a dashboard's, say) is no worker-plane credential, and
// only a converge-broker certificate may relay.
func TestWorkerPlane_MutualTLSIdentitiesComeFromTheCertificate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlstest.NewCA(t)
	caFile := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(caFile, ca.PEM(), 0o600))
	srvCert, srvKey, _ := ca.Issue(t, dir, "converge", auth.BrokerOU, 2)
	_, _, workerPair := ca.Issue(t, dir, "worker-1", auth.WorkerOU, 3)
	_, _, plainPair := ca.Issue(t, dir, "dashboard", "", 4)
	_, _, brokerPair := ca.Issue(t, dir, "broker-2", auth.BrokerOU, 5)

	s := apptest.Start(t, apptest.Options{Manifests: []string{routeKind}, Config: func(c *config.Config) {
		c.ListenAddr = "https://127.0.0.1:0"
		c.TLSCertFile, c.TLSKeyFile, c.TLSClientCAFile = srvCert, srvKey, caFile
		c.WorkerTokens, c.MeshTokens = "", ""
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
			return worker.Outcome{Status: json.RawMessage(`{"route_id":"viaMTLS"}`)}, nil
		}))
	_, _, err := s.Store.ApplyResource(context.Background(), store.ApplyResourceInput{Kind: "route", Name: "r1", Spec: json.RawMessage(`{}`)})
	require.NoError(t, err)
	r := s.WaitPhase("route", "r1", resource.PhaseReady, 60*time.Second)
	require.JSONEq(t, `{"route_id":"viaMTLS"}`, string(r.Status), "a converge-worker certificate serves work")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	config := connect.NewRequest(&workerv1.GetProviderConfigRequest{Kind: "route"})
	_, err = clientFor(plainPair).GetProviderConfig(ctx, config)
	require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "a certificate without a plane OU: %v", err)
	_, err = clientFor(workerPair).GetProviderConfig(ctx, config)
	require.NoError(t, err, "a worker certificate reads configs")
	relay := connect.NewRequest(&workerv1.RelayStageRequest{OriginBroker: "broker-2",
		Task: &workerv1.StageTask{TaskId: "t", Resource: &workerv1.Resource{Kind: "nokind", Version: "v1"}}})
	_, err = clientFor(workerPair).RelayStage(ctx, relay)
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), "a worker certificate may not relay: %v", err)
	_, err = clientFor(brokerPair).RelayStage(ctx, relay)
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "a broker certificate passes (nothing serves nokind): %v", err)
}

// rotationStack starts a stack whose identities come from client
// certificates (no token files), re-reading its TLS files every 20 ms, and
// returns its https URL, its client CA file (for the test to rotate), the CA
// and a converge-worker keypair it issued.
func rotationStack(t *testing.T) (url, caFile string, ca *tlstest.CA, workerPair tls.Certificate) {
	t.Helper()
	dir := t.TempDir()
	ca = tlstest.NewCA(t)
	caFile = ca.WriteFile(t, dir)
	srvCert, srvKey, _ := ca.Issue(t, dir, "converge", auth.BrokerOU, 2)
	_, _, workerPair = ca.Issue(t, dir, "worker-1", auth.WorkerOU, 3)
	s := apptest.Start(t, apptest.Options{Manifests: []string{routeKind}, Config: func(c *config.Config) {
		c.ListenAddr = "https://127.0.0.1:0"
		c.TLSCertFile, c.TLSKeyFile, c.TLSClientCAFile = srvCert, srvKey, caFile
		c.WorkerTokens, c.MeshTokens = "", ""
		c.TLSReload = 20 * time.Millisecond
	}})
	return "https://" + s.Process.Addr("api").String(), caFile, ca, workerPair
}

// A client certificate is checked against the client CA bundle of the
// moment, on every call, not only at the handshake: once the CA that signed
// it is rotated out of TLS_CLIENT_CA_FILE, a worker keeping its HTTP/2
// connection open (as every client's pool does) is refused there too, and
// the connection is closed so the worker dials again with its current
// certificate.
func TestWorkerPlane_RotatedOutClientCAIsRefusedOnAnOpenConnection(t *testing.T) {
	t.Parallel()
	url, caFile, ca, workerPair := rotationStack(t)
	newClient := func() workerv1connect.WorkerServiceClient {
		hc, err := transport.ClientFor(url, &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: ca.Pool,
			Certificates: []tls.Certificate{workerPair}})
		require.NoError(t, err)
		return workerv1connect.NewWorkerServiceClient(hc, url)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	config := func() *connect.Request[workerv1.GetProviderConfigRequest] {
		return connect.NewRequest(&workerv1.GetProviderConfigRequest{Kind: "route"})
	}
	open := newClient() // keeps its connection between calls
	_, err := open.GetProviderConfig(ctx, config())
	require.NoError(t, err, "the worker's certificate verifies")

	// The bundle now trusts another CA only (the server's own certificate
	// still serves: only the client CA changes).
	require.NoError(t, os.WriteFile(caFile, tlstest.NewCA(t).PEM(), 0o600))
	apptest.WaitFor(t, 30*time.Second, "the rotated client CA bundle is served", func() bool {
		_, err := newClient().GetProviderConfig(ctx, config())
		return err != nil
	})
	_, err = open.GetProviderConfig(ctx, config())
	require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err),
		"a call on the connection opened under the retired CA: %v", err)
}

// A worker session opened with a client certificate ends once that
// certificate no longer verifies — its CA rotated out of TLS_CLIENT_CA_FILE
// (as here) or the certificate expired — rather than serving on until the
// worker leaves: the per-request check cannot reach a stream opened before.
func TestWorkerPlane_RotatedOutClientCAEndsALiveSession(t *testing.T) {
	t.Parallel()
	url, caFile, ca, workerPair := rotationStack(t)
	hc, err := transport.ClientFor(url, &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: ca.Pool,
		Certificates: []tls.Certificate{workerPair}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream := workerv1connect.NewWorkerServiceClient(hc, url).WorkStream(ctx)
	defer func() { _ = stream.CloseResponse() }()
	require.NoError(t, stream.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Subscribe{Subscribe: &workerv1.Subscribe{
		WorkerId: "w-cert", Kinds: []*workerv1.KindReadiness{{Kind: &workerv1.KindVersion{Kind: "route", Version: "v1"}}}}}}))
	first, err := stream.Receive()
	require.NoError(t, err)
	require.NotNil(t, first.GetSubscribed())
	ended := make(chan error, 1)
	go func() {
		for {
			if _, err := stream.Receive(); err != nil {
				ended <- err
				return
			}
		}
	}()

	require.NoError(t, os.WriteFile(caFile, tlstest.NewCA(t).PEM(), 0o600))
	select {
	case err := <-ended:
		require.Error(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the session of a certificate the client CA no longer verifies is still open 30 s after the rotation")
	}
}
