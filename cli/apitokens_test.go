package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/cli"
	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/resolvers"
)

// API_TOKENS_FILE is re-read like the other credential files: a token added
// to it is accepted and a token removed from it refused without a restart,
// and a websocket connection that authenticated with the removed token is
// closed (4401), its subscriptions with it. The tokens that stay keep
// working.
func TestAPITokens_RotationAppliesWithoutARestart(t *testing.T) {
	const keep, revoked, added = "keep-admin-token-0123456789", "revoked-viewer-token-0123456789", "added-admin-token-0123456789"
	path := filepath.Join(t.TempDir(), "api-tokens")
	require.NoError(t, os.WriteFile(path, []byte(keep+" admin keep\n"+revoked+" viewer leaked\n"), 0o600))
	s := apptest.Start(t, apptest.Options{GraphQL: resolvers.Mount(resolvers.MountOptions{}), Config: func(c *config.Config) {
		c.APITokensFile = path
		c.TLSReload = 20 * time.Millisecond
	}})
	server := s.APIURL()
	getKinds := func(token string) result {
		return runConctl(context.Background(), server, "", "get", "kinds", "--token", token)
	}
	require.Equal(t, 0, getKinds(revoked).code, "the viewer token reads before it is revoked")
	ws := cli.NewWSClient(cli.WSOptions{Endpoint: wsEndpoint(server),
		InitPayload: map[string]any{"Authorization": "Bearer " + revoked}})
	_, err := ws.Start(context.Background())
	require.NoError(t, err)
	defer func() { _ = ws.Close() }()
	ch, _, err := cli.WatchClusterMembers(context.Background(), ws)
	require.NoError(t, err)
	require.Empty(t, first(t, ch, "subscribed with the viewer token").Errors)

	require.NoError(t, os.WriteFile(path, []byte(keep+" admin keep\n"+added+" admin added\n"), 0o600))
	apptest.WaitFor(t, 30*time.Second, "a token added to API_TOKENS_FILE is accepted", func() bool {
		return getKinds(added).code == 0
	})
	r := getKinds(revoked)
	require.Equal(t, 1, r.code, "a token removed from API_TOKENS_FILE is refused")
	require.Contains(t, r.stderr, "UNAUTHENTICATED")
	require.Equal(t, 0, getKinds(keep).code, "a token that stays keeps working")
	drained(t, ch, "the revoked token's websocket subscription ends")
}
