package api_test

import (
	"errors"
	"io"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"
)

// closeCode waits for the server to close c and returns its close code.
func closeCode(t *testing.T, c *wsClient) int {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case <-c.in:
		case err := <-c.err:
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				return ce.Code
			}
			t.Fatalf("connection ended without a close frame: %v", err)
		case <-deadline:
			t.Fatal("the server did not close the connection")
		}
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(ents)
}

// A connection_init payload that is not an object is answered with close
// 4400 on both subprotocols, and nothing is left behind: no goroutine, no
// file descriptor per connection. Not parallel: it counts the process's
// goroutines and descriptors.
func TestWebsocket_InitPayloadNotAnObjectClosesWith4400AndLeaksNothing(t *testing.T) { //nolint:paralleltest // counts process-wide goroutines and fds
	e := newEnv(t, withTokens())
	// Warm up: the first connection starts the server's shared goroutines.
	warm := e.connect("graphql-transport-ws", map[string]any{"Authorization": "Bearer " + adminToken})
	_ = warm.conn.Close()
	time.Sleep(0) // yield
	baseG, baseFD := runtime.NumGoroutine(), openFDs(t)
	const n = 20
	for i := range n {
		proto := "graphql-transport-ws"
		if i%2 == 1 {
			proto = "graphql-ws"
		}
		payload := any("x")
		if i%4 >= 2 {
			payload = []int{1, 2}
		}
		c, _, err := e.dial(proto, nil)
		require.NoError(t, err)
		c.send(map[string]any{"type": "connection_init", "payload": payload})
		require.Equal(t, 4400, closeCode(t, c), "%s with payload %v", proto, payload)
		_ = c.conn.Close()
	}
	require.Eventually(t, func() bool {
		return runtime.NumGoroutine() <= baseG+4 && openFDs(t) <= baseFD+4
	}, 30*time.Second, 50*time.Millisecond, "goroutines %d (baseline %d), fds %d (baseline %d) after %d refused connections",
		runtime.NumGoroutine(), baseG, openFDs(t), baseFD, n)
}

// An operation id in use may not be started again (graphql-transport-ws:
// close 4409); once its operation completed the id is free again.
func TestWebsocket_DuplicateOperationIDClosesWith4409(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := `subscription { resourceChanged(kind: "leaf") { type } }`
	for _, proto := range []string{"graphql-transport-ws", "graphql-ws"} {
		c := e.connect(proto, nil)
		c.subscribe("a", `{ version }`, nil)
		c.nextFor("a", 10*time.Second) // its result; complete follows
		require.Eventually(t, func() bool {
			m, err := c.read(100 * time.Millisecond)
			return err == nil && m.Type == "complete"
		}, 10*time.Second, time.Millisecond, "the query completes")
		c.subscribe("a", q, nil) // the id is free again: accepted
		c.quiet(300 * time.Millisecond)
		c.subscribe("a", q, nil) // a duplicate of a live subscription
		require.Equal(t, 4409, closeCode(t, c), "%s: a duplicate id closes the connection", proto)
	}
}

// Neither subprotocol uses binary frames: one is answered with close 4400
// whatever it carries — a connection_init gqlgen could not decode (which
// used to leave the connection, its pinger and its descriptor open forever,
// before any authentication), a valid one, or a subscribe that would pass
// the duplicate-id check unseen — and nothing is left behind. Not parallel:
// it counts the process's goroutines and descriptors.
func TestWebsocket_BinaryFramesCloseWith4400AndLeakNothing(t *testing.T) { //nolint:paralleltest // counts process-wide goroutines and fds
	e := newEnv(t, withTokens())
	admin := map[string]any{"Authorization": "Bearer " + adminToken}
	warm := e.connect("graphql-transport-ws", admin)
	_ = warm.conn.Close()
	baseG, baseFD := runtime.NumGoroutine(), openFDs(t)
	cases := map[string]struct {
		reason string
		init   bool // a text connection_init is acknowledged first
		frame  string
	}{
		"InitNotAnObject": {reason: "gqlgen cannot decode it and used to return without closing",
			frame: `{"type":"connection_init","payload":[1,2]}`},
		"Init": {reason: "even a valid init must come as text",
			frame: `{"type":"connection_init","payload":{"Authorization":"Bearer ` + adminToken + `"}}`},
		"Subscribe": {reason: "an operation in binary would skip the duplicate-id check", init: true,
			frame: `{"type":"subscribe","id":"a","payload":{"query":"{ version }"}}`},
	}
	for name, tc := range cases {
		for _, proto := range []string{"graphql-transport-ws", "graphql-ws"} {
			var c *wsClient
			if tc.init {
				c = e.connect(proto, admin)
			} else {
				var err error
				c, _, err = e.dial(proto, nil)
				require.NoError(t, err)
			}
			frame := tc.frame
			if proto == "graphql-ws" {
				frame = strings.Replace(frame, `"subscribe"`, `"start"`, 1)
			}
			require.NoError(t, c.conn.WriteMessage(websocket.BinaryMessage, []byte(frame)))
			require.Equal(t, 4400, closeCode(t, c), "%s on %s: %s", name, proto, tc.reason)
			_ = c.conn.Close()
		}
	}
	require.Eventually(t, func() bool {
		return runtime.NumGoroutine() <= baseG+4 && openFDs(t) <= baseFD+4
	}, 30*time.Second, 50*time.Millisecond, "goroutines %d (baseline %d), fds %d (baseline %d) after the refused connections",
		runtime.NumGoroutine(), baseG, openFDs(t), baseFD)
}

// An operation refused with an error message is over (graphql-transport-ws:
// error terminates it): nothing more of it follows, so a client may start
// the next operation under its id at once. gqlgen wrote a complete after
// the error, which such a client took for the end of its next operation.
func TestWebsocket_NothingFollowsAnOperationsError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, proto := range []string{"graphql-transport-ws", "graphql-ws"} {
		c := e.connect(proto, nil)
		typ := map[string]string{"graphql-transport-ws": "subscribe", "graphql-ws": "start"}[proto]
		c.send(map[string]any{"type": typ, "id": "a", "payload": "not an object"})
		m := c.nextFor("a", 10*time.Second)
		require.Equal(t, "error", m.Type, "%s: %s", proto, m.Payload)
		c.subscribe("a", `{ version }`, nil)
		r := opResult(t, c.nextFor("a", 10*time.Second))
		require.Empty(t, r.Errors, proto)
		require.JSONEq(t, `{"version":"v-test"}`, string(r.Data), proto)
		require.Equal(t, "complete", c.nextFor("a", 10*time.Second).Type, proto)
		c.quiet(200 * time.Millisecond)
	}
}

// When the process begins to shut down, its subscription hub stops with its
// duties: a websocket kept open would stay silent until the process exits.
// Drain closes every open one with 1001 (going away), on both subprotocols,
// and refuses a new one with 503 UNAVAILABLE and Retry-After, so clients
// connect again where they will be served. Plain queries are still
// answered.
func TestWebsocket_DrainClosesEveryConnectionGoingAwayAndRefusesNewOnes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := `subscription { resourceChanged(kind: "leaf") { type } }`
	var open []*wsClient
	for _, proto := range []string{"graphql-transport-ws", "graphql-ws"} {
		c := e.connect(proto, nil)
		c.subscribe("1", q, nil)
		open = append(open, c)
	}
	// A connection mid-handshake (upgraded, no connection_init yet) goes too.
	bare, _, err := e.dial("graphql-transport-ws", nil)
	require.NoError(t, err)
	open = append(open, bare)

	e.h.Drain()
	for i, c := range open {
		require.Equal(t, websocket.CloseGoingAway, closeCode(t, c), "connection %d", i)
	}

	_, resp, err := e.dial("graphql-transport-ws", nil)
	require.Error(t, err, "a websocket opened while the server drains")
	require.NotNil(t, resp)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Contains(t, string(body), `"code":"UNAVAILABLE"`)
	require.Contains(t, string(body), "the server is shutting down")

	var out struct {
		Typename string `json:"__typename"`
	}
	e.ok(`{ __typename }`, nil, &out)
	require.Equal(t, "Query", out.Typename)
}
