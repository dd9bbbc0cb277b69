package cli_test

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/Khan/genqlient/graphql"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/cli"
)

// wsGoroutines lists the goroutines that belong to websocket traffic, on
// either side: conctl's client, gorilla/websocket, and the server's
// transport (gqlgen, coder/websocket, core/api).
func wsGoroutines() []string {
	buf := make([]byte, 1<<22)
	n := runtime.Stack(buf, true)
	var out []string
	for _, g := range strings.Split(string(buf[:n]), "\n\n") {
		for _, marker := range []string{"converge/cli.(*WSClient)", "gorilla/websocket", "coder/websocket",
			"gqlgen/graphql/handler/transport", "converge/core/api."} {
			if strings.Contains(g, marker) {
				out = append(out, g)
				break
			}
		}
	}
	return out
}

// requireNoWSGoroutines waits (with a deadline) until every websocket
// goroutine of both sides has ended.
func requireNoWSGoroutines(t *testing.T, reason string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := wsGoroutines()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d websocket goroutines still running:\n\n%s", reason, len(left), strings.Join(left, "\n\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func wsEndpoint(server string) string { return "ws" + strings.TrimPrefix(server, "http") + "/graphql" }

// drained waits until ch is closed, discarding values.
func drained[T any](t *testing.T, ch chan T, reason string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatalf("%s: the subscription channel was not closed", reason)
		}
	}
}

// first waits for the first value of ch.
func first[T any](t *testing.T, ch chan T, reason string) T {
	t.Helper()
	select {
	case v, ok := <-ch:
		require.Truef(t, ok, "%s: the channel closed before a value", reason)
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no value within 10s", reason)
	}
	var zero T
	return zero
}

// These tests count goroutines process-wide, so they do not run in
// parallel with the others.
func TestWSClient_UnsubscribeAndCloseLeakNothing(t *testing.T) {
	s := startStack(t, stackOpts{noWorker: true})
	ctx := context.Background()
	requireNoWSGoroutines(t, "before any client")
	cases := []struct {
		reason string
		run    func(t *testing.T, ws *cli.WSClient)
	}{
		{"unsubscribing a live subscription closes its channel", func(t *testing.T, ws *cli.WSClient) {
			ch, id, err := cli.WatchClusterMembers(ctx, ws)
			require.NoError(t, err)
			m := first(t, ch, "members")
			require.Empty(t, m.Errors)
			require.NotEmpty(t, m.Data.ClusterMembers)
			require.NoError(t, ws.Unsubscribe(id))
			drained(t, ch, "unsubscribe")
			require.NoError(t, ws.Unsubscribe(id), "a second unsubscribe is a no-op")
		}},
		{"a consumer that never reads does not block unsubscribe", func(t *testing.T, ws *cli.WSClient) {
			ch, id, err := cli.WatchClusterMembers(ctx, ws)
			require.NoError(t, err)
			require.NoError(t, ws.Unsubscribe(id))
			drained(t, ch, "unread unsubscribe")
		}},
		{"the server ending a subscription with an error races unsubscribe without a panic", func(t *testing.T, ws *cli.WSClient) {
			ch, id, err := cli.WatchOperation(ctx, ws, "00000000-0000-0000-0000-000000000000")
			require.NoError(t, err)
			require.NoError(t, ws.Unsubscribe(id))
			drained(t, ch, "error vs unsubscribe")
		}},
		{"the server's error reaches the consumer, then the channel closes", func(t *testing.T, ws *cli.WSClient) {
			ch, _, err := cli.WatchOperation(ctx, ws, "00000000-0000-0000-0000-000000000000")
			require.NoError(t, err)
			m := first(t, ch, "not found")
			require.NotEmpty(t, m.Errors)
			require.Equal(t, "NOT_FOUND", m.Errors[0].Extensions["code"])
			drained(t, ch, "after the error")
		}},
		{"an invalid document is the server's error on the channel", func(t *testing.T, ws *cli.WSClient) {
			ch := make(chan cli.WatchClusterMembersWsResponse)
			_, err := ws.Subscribe(&graphql.Request{OpName: "Bad", Query: "subscription Bad { nope }"}, ch,
				cli.WatchClusterMembersForwardData)
			require.NoError(t, err)
			m := first(t, ch, "invalid document")
			require.NotEmpty(t, m.Errors)
			require.Contains(t, m.Errors[0].Message, "nope")
			drained(t, ch, "after the validation error")
		}},
		{"close ends every live subscription, read or not", func(t *testing.T, ws *cli.WSClient) {
			var chans []chan cli.WatchClusterMembersWsResponse
			for range 3 {
				ch, _, err := cli.WatchClusterMembers(ctx, ws)
				require.NoError(t, err)
				chans = append(chans, ch)
			}
			first(t, chans[0], "one read")
			require.NoError(t, ws.Close())
			for _, ch := range chans {
				drained(t, ch, "close")
			}
			_, _, err := cli.WatchClusterMembers(ctx, ws)
			require.Error(t, err, "subscribe after close")
		}},
	}
	for _, tc := range cases {
		for i := range 10 {
			ws := cli.NewWSClient(cli.WSOptions{Endpoint: wsEndpoint(s.server)})
			errs, err := ws.Start(ctx)
			require.NoError(t, err, tc.reason)
			tc.run(t, ws)
			require.NoError(t, ws.Close(), tc.reason)
			require.NoError(t, ws.Close(), "close is idempotent")
			for range errs { // closed by Close
			}
			if i == 9 {
				requireNoWSGoroutines(t, tc.reason)
			}
		}
	}
}

func TestWSClient_ReconnectsAndResubscribes(t *testing.T) {
	s := startStack(t, stackOpts{noWorker: true})
	proxy := startProxy(t, strings.TrimPrefix(s.server, "http://"))
	ctx := context.Background()
	ws := cli.NewWSClient(cli.WSOptions{Endpoint: wsEndpoint(proxy.URL()), MinBackoff: 20 * time.Millisecond,
		MaxBackoff: 200 * time.Millisecond})
	errs, err := ws.Start(ctx)
	require.NoError(t, err)
	ch, _, err := cli.WatchClusterMembers(ctx, ws)
	require.NoError(t, err)
	first(t, ch, "before the cut")
	for cut := 1; cut <= 3; cut++ {
		proxy.cut()
		select {
		case <-ws.Reconnected():
		case <-time.After(10 * time.Second):
			t.Fatalf("cut %d: no reconnect", cut)
		}
		m := first(t, ch, "after a reconnect the subscription is live again on the same channel")
		require.NotEmpty(t, m.Data.ClusterMembers)
		require.Equal(t, cut, ws.Reconnects())
		select {
		case err := <-errs:
			require.Contains(t, err.Error(), "connection lost")
		default:
			t.Fatal("the connection loss was not reported")
		}
	}
	require.NoError(t, ws.Close())
	drained(t, ch, "close after reconnects")
	proxy.close()
	requireNoWSGoroutines(t, "after reconnects and close")
}

func TestWSClient_StartErrors(t *testing.T) {
	s := startStack(t, stackOpts{noWorker: true, tokens: "admin-token-0123456789 admin alice\n"})
	cases := []struct {
		reason   string
		endpoint string
		header   http.Header
		init     map[string]any
		want     string
	}{
		{"nothing listens", "ws://127.0.0.1:1/graphql", nil, nil, "connection refused"},
		{"a wrong token on the upgrade is the server's UNAUTHENTICATED", wsEndpoint(s.server),
			http.Header{"Authorization": {"Bearer wrong"}}, nil, "UNAUTHENTICATED"},
		{"a wrong token in connection_init is refused with 4401", wsEndpoint(s.server),
			nil, map[string]any{"Authorization": "Bearer wrong"}, "4401"},
	}
	for _, tc := range cases {
		ws := cli.NewWSClient(cli.WSOptions{Endpoint: tc.endpoint, Header: tc.header, InitPayload: tc.init})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := ws.Start(ctx)
		cancel()
		require.Error(t, err, tc.reason)
		require.Containsf(t, err.Error(), tc.want, tc.reason)
		require.NoError(t, ws.Close())
	}
	ok := cli.NewWSClient(cli.WSOptions{Endpoint: wsEndpoint(s.server),
		InitPayload: map[string]any{"Authorization": "Bearer admin-token-0123456789"}})
	_, err := ok.Start(context.Background())
	require.NoError(t, err, "the right token in connection_init is accepted")
	ch, _, err := cli.WatchClusterMembers(context.Background(), ok)
	require.NoError(t, err)
	require.Empty(t, first(t, ch, "authenticated").Errors)
	require.NoError(t, ok.Close())
	requireNoWSGoroutines(t, "after the start errors")

	r := runConctl(context.Background(), s.server, "", "get", "kinds")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "UNAUTHENTICATED: a valid bearer token is required")
	r = runConctl(context.Background(), s.server, "", "get", "kinds", "--token", "admin-token-0123456789")
	require.Equal(t, 0, r.code, r.stderr)
	require.False(t, errors.Is(err, context.Canceled))
}
