package cli_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConn_TokenNeverFollowsARedirectToAnotherHost: a server (or a proxy in
// front of it) that redirects conctl elsewhere never receives its bearer
// token there; the API's own host still gets it.
func TestConn_TokenNeverFollowsARedirectToAnotherHost(t *testing.T) {
	t.Parallel()
	const token = "admin-token-0123456789"
	var mu sync.Mutex
	seen := map[string]string{} // which server saw which Authorization
	record := func(name string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen[name] = r.Header.Get("Authorization")
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"data":{"kinds":[]}}`))
		}
	}
	elsewhere := httptest.NewServer(record("elsewhere"))
	t.Cleanup(elsewhere.Close)
	// The same listener under another name: another host to the client.
	other := strings.Replace(elsewhere.URL, "127.0.0.1", "localhost", 1)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen["front"] = r.Header.Get("Authorization")
		mu.Unlock()
		http.Redirect(w, r, other+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(front.Close)

	r := runConctl(context.Background(), front.URL, "", "get", "kinds", "--token", token)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, "Bearer "+token, seen["front"], "the API's host gets the token\nstderr: %s", r.stderr)
	_, reached := seen["elsewhere"]
	require.True(t, reached, "the redirect was followed\nstderr: %s", r.stderr)
	require.Empty(t, seen["elsewhere"], "the bearer token was sent to the host a redirect named")
}
