package broker

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store/membership"
	"github.com/converge-run/converge/core/tlsreload/tlstest"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
	"github.com/converge-run/converge/workerproto/gen/converge/worker/v1/workerv1connect"
)

// A peer that advertises its BROKER_URL by address (a pod's IP, which no
// certificate names) and BROKER_TLS_SERVER_NAME beside it is dialled at the
// address and verified as the name; without the name, the same peer's
// certificate does not verify and nothing reaches it.
func TestMeshReact_APeerByAddressIsVerifiedAsItsAdvertisedServerName(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t)
	// a peer's certificate names the peers' Service, not its address
	_, _, pair := ca.Issue(t, t.TempDir(), "converge-peers", "", 2, "converge-peers.ns.svc")

	_, h := workerv1connect.NewWorkerServiceHandler(workerv1connect.UnimplementedWorkerServiceHandler{})
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	relay := func(name string) error {
		t.Helper()
		m := newMesh("self", func() {}, testLog(t))
		m.TLS = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: ca.Pool}
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
	err := relay("")
	require.Error(t, err)
	require.NotEqual(t, connect.CodeUnimplemented, connect.CodeOf(err), "by its address alone, the handshake fails: %v", err)
	require.Contains(t, err.Error(), "certificate")
}
