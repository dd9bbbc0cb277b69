package cli_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/converge-run/converge/cli"
)

// fakeMemberAPI is a GraphQL endpoint where drainClusterMember answers and
// the member never leaves, and the server's version is v-server.
func fakeMemberAPI(t *testing.T) string {
	t.Helper()
	return fakeMemberAPIListing(t, func(member string) string { return `{"data":{"clusterMembers":[` + member + `}]}}` })
}

// fakeMemberAPIListing is fakeMemberAPI whose member listing answers list
// (given the member's object, less its closing brace).
func fakeMemberAPIListing(t *testing.T, list func(member string) string) string {
	t.Helper()
	member := `{"id":"m-1","role":"ALL","status":"DRAINING","kinds":[],"shardLo":null,"shardHi":null,"inFlight":0,"workers":0,` +
		`"version":"v","host":"h","pid":1,"startedAt":"2026-01-01T00:00:00Z","lastHeartbeat":"2026-01-01T00:00:00Z","config":null`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			OperationName string `json:"operationName"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "application/json")
		switch req.OperationName {
		case "DrainClusterMember":
			_, _ = io.WriteString(w, `{"data":{"drainClusterMember":`+member+`,"requestedAction":"DRAIN","requestedBy":"admin"}}}`)
		case "ServerVersion":
			_, _ = io.WriteString(w, `{"data":{"version":"v-server"}}`)
		case "ListClusterMembers":
			_, _ = io.WriteString(w, list(member))
		default:
			t.Errorf("unexpected operation %s", req.OperationName)
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// cluster drain --wait waits whatever -o says: with -o json|yaml the
// member's object is printed first (and nothing else on stdout), and a
// member that never leaves is a timeout, exit 1.
func TestMemberControl_WaitsWithStructuredOutput(t *testing.T) {
	t.Parallel()
	server := fakeMemberAPI(t)
	for _, o := range []string{"table", "json", "yaml"} {
		r := runConctl(context.Background(), server, "", "cluster", "drain", "m-1", "--wait", "--timeout", "1s", "-o", o)
		require.Equalf(t, 1, r.code, "-o %s: the member never leaves: stdout %q", o, r.stdout)
		require.Containsf(t, r.stderr, "member m-1 still registered after 1s", "-o %s", o)
		var m struct {
			ID     string `json:"id" yaml:"id"`
			Status string `json:"status" yaml:"status"`
		}
		switch o {
		case "json":
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &m), r.stdout)
		case "yaml":
			require.NoError(t, yaml.Unmarshal([]byte(r.stdout), &m), r.stdout)
		default:
			require.Equal(t, "member m-1: drain requested by admin (status DRAINING)\n", r.stdout)
			continue
		}
		require.Equalf(t, "m-1", m.ID, "-o %s", o)
		require.Equalf(t, "DRAINING", m.Status, "-o %s", o)
	}
}

// version -o json|yaml is one object; the table form names the endpoint.
func TestVersion_StructuredOutput(t *testing.T) {
	t.Parallel()
	server := fakeMemberAPI(t)
	r := must(t, runConctl(context.Background(), server, "", "version", "-o", "json"))
	var v map[string]string
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v), r.stdout)
	require.Equal(t, map[string]string{"client": "v-test", "server": "v-server", "endpoint": server + "/graphql"}, v)
	r = must(t, runConctl(context.Background(), server, "", "version"))
	require.Equal(t, "conctl: v-test\nserver: v-server ("+server+"/graphql)\n", r.stdout)

	r = runConctl(context.Background(), "http://127.0.0.1:1", "", "version", "-o", "yaml")
	require.Equal(t, 1, r.code, "the server cannot be asked")
	require.Equal(t, "client: v-test\n", r.stdout, "what is known, without the server's fields")
	require.Contains(t, r.stderr, "ask the server its version")
}

// A --server carrying a password is refused by every command, websocket
// ones too, and the password is never printed.
func TestServer_CredentialsRefusedNeverPrinted(t *testing.T) {
	t.Parallel()
	server := strings.Replace(fakeMemberAPI(t), "http://", "http://admin:s3cret@", 1)
	for _, args := range [][]string{{"version"}, {"version", "-o", "json"}, {"get", "nodes"}, {"watch", "res"}, {"watch", "nodes"}} {
		r := runConctl(context.Background(), "", "", append([]string{"--server", server}, args...)...)
		require.Equalf(t, cli.ExitUsage, r.code, "%v", args)
		require.Containsf(t, r.stderr, "credentials in the URL are not supported", "%v", args)
		require.Containsf(t, r.stderr, "--token or CONVERGE_TOKEN", "%v", args)
		require.NotContainsf(t, r.stdout+r.stderr, "s3cret", "%v", args)
	}
}

// A --wait whose membership reads the server refuses (here FORBIDDEN: a
// token that may drain but not list) ends at once with the server's error,
// not after --timeout as a member "still registered".
func TestMemberControl_WaitReportsAFailingRead(t *testing.T) {
	t.Parallel()
	server := fakeMemberAPIListing(t, func(string) string {
		return `{"errors":[{"message":"reading cluster members needs the viewer role","extensions":{"code":"FORBIDDEN"}}],"data":null}`
	})
	start := time.Now()
	r := runConctl(context.Background(), server, "", "cluster", "drain", "m-1", "--wait", "--timeout", "60s")
	require.Equal(t, 1, r.code, r.stdout)
	require.Contains(t, r.stderr, "FORBIDDEN: reading cluster members needs the viewer role")
	require.NotContains(t, r.stderr, "still registered")
	require.Less(t, time.Since(start), 30*time.Second, "at once, not at --timeout")
}

// Ctrl+C during a --wait ends conctl with 'interrupted', naming what was
// already requested, not Go's 'context canceled'.
func TestWait_InterruptSaysSo(t *testing.T) {
	t.Parallel()
	server := fakeMemberAPI(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(ctx, testEnv(server, "", &out, &errb), []string{"cluster", "drain", "m-1", "--wait", "--timeout", "5m"})
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "drain requested") { // the wait has begun
		require.True(t, time.Now().Before(deadline), "no request line: %q %q", out.String(), errb.String())
		time.Sleep(10 * time.Millisecond)
	}
	cancel() // what signal.NotifyContext does on SIGINT
	select {
	case code := <-done:
		require.Equal(t, 1, code)
	case <-time.After(30 * time.Second):
		t.Fatal("conctl did not end on the interrupt")
	}
	require.Equal(t, "Error: interrupted (what was already requested continues on the server)\n", errb.String())
}
