package cli_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/cli"
	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/resolvers"
)

// An API websocket connection over mutual TLS ends once its client
// certificate no longer verifies (here its CA is rotated out of
// TLS_CLIENT_CA_FILE), its subscriptions with it: the listener's check of
// every request cannot reach a connection upgraded before.
func TestAPIWebsocket_EndsOnceItsClientCertificateNoLongerVerifies(t *testing.T) {
	p := newPKI(t)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		t.Helper()
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, b, 0o600))
		return path
	}
	keyDER, err := x509.MarshalECPrivateKey(p.server.PrivateKey.(*ecdsa.PrivateKey))
	require.NoError(t, err)
	srvCert := write("server.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.server.Certificate[0]}))
	srvKey := write("server-key.pem", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	caFile := write("ca.pem", p.caPEM)
	s := apptest.Start(t, apptest.Options{GraphQL: resolvers.Mount(resolvers.MountOptions{}), Config: func(c *config.Config) {
		c.ListenAddr = "https://127.0.0.1:0"
		c.TLSCertFile, c.TLSKeyFile, c.TLSClientCAFile = srvCert, srvKey, caFile
		c.APIClientIDs = "admin:CN=leaf"
		c.WorkerTokens, c.MeshTokens = "", ""
		c.TLSReload = 20 * time.Millisecond
	}})
	pair, err := tls.X509KeyPair(p.clientCert, p.clientKy)
	require.NoError(t, err)
	d := *websocket.DefaultDialer
	d.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: p.pool, Certificates: []tls.Certificate{pair}}
	ws := cli.NewWSClient(cli.WSOptions{Endpoint: "wss://" + s.Process.Addr("api").String() + "/graphql", Dialer: &d})
	errs, err := ws.Start(context.Background())
	require.NoError(t, err)
	defer func() { _ = ws.Close() }()
	ch, _, err := cli.WatchClusterMembers(context.Background(), ws)
	require.NoError(t, err)
	require.Empty(t, first(t, ch, "subscribed with a listed certificate").Errors)

	require.NoError(t, os.WriteFile(caFile, newPKI(t).caPEM, 0o600)) // another CA only
	deadline := time.After(30 * time.Second)
	for {
		select {
		case err := <-errs:
			if err != nil && strings.Contains(err.Error(), "4401") {
				return // closed by the server; its reconnects fail their handshake
			}
		case <-deadline:
			t.Fatal("the connection of a certificate the client CA no longer verifies was not closed with 4401")
		}
	}
}
