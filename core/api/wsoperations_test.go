package api_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/api"
)

// A websocket connection runs at most OperationsPerConn queries and
// mutations at once: one more is refused naming API_WS_MAX_OPERATIONS,
// subscriptions keep their own limit, and a finished operation frees its
// slot.
func TestWebsocket_OperationsPerConnectionAreCapped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(api.Limits{OperationsPerConn: 1}))
	e.manifest(workerKind)
	e.apply("leaf", "a", `{size: 1}`)
	release := e.holdRow("a")
	c := e.connect("graphql-transport-ws", nil)

	c.subscribe("m", touchA, nil) // waits on the row: in flight
	e.waitBlocked(1)
	c.subscribe("q", `{ version }`, nil)
	r := opResult(t, c.nextFor("q", 10*time.Second))
	require.Equal(t, "BAD_USER_INPUT", r.code(), "%+v", r.Errors)
	require.Equal(t, "operations", r.Errors[0].Extensions["limit"])
	require.Contains(t, r.Errors[0].Message, "at most 1 queries and mutations at once per connection (API_WS_MAX_OPERATIONS)")
	require.Equal(t, "complete", c.nextFor("q", 10*time.Second).Type)

	c.subscribe("s", `subscription { resourceChanged(kind: "leaf") { name } }`, nil)
	require.Eventually(t, func() bool { n, _, _, _ := e.hub.SubscriberCount(); return n == 1 }, 10*time.Second, 5*time.Millisecond,
		"a subscription is not counted against the operations")

	release()
	r = opResult(t, c.nextFor("m", 10*time.Second))
	require.Empty(t, r.Errors, "the mutation in flight finishes")
	require.Equal(t, "complete", c.nextFor("m", 10*time.Second).Type)
	c.subscribe("q2", `{ version }`, nil)
	r = opResult(t, c.nextFor("q2", 10*time.Second))
	require.Empty(t, r.Errors, "its slot is free again")
}

// A connection whose SubscriptionsPerConn + OperationsPerConn operations
// are all unfinished is read no further until one ends: a client that sends
// without reading stalls itself, instead of making the server hold a
// goroutine and an answer for every message it sent (one connection sending
// 3,000 queries used to hold 30,000 goroutines and 677 MiB). The query sent
// while the connection is full is read, and so admitted, only once a
// mutation finished: it succeeds instead of being refused.
func TestWebsocket_FullConnectionIsReadNoFurther(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(api.Limits{OperationsPerConn: 2, SubscriptionsPerConn: 2}))
	e.manifest(workerKind)
	e.apply("leaf", "a", `{size: 1}`)
	release := e.holdRow("a")
	c := e.connect("graphql-transport-ws", nil)
	for _, id := range []string{"s1", "s2"} {
		c.subscribe(id, `subscription { resourceChanged(kind: "quiet") { name } }`, nil) // a kind nothing changes
	}
	require.Eventually(t, func() bool { n, _, _, _ := e.hub.SubscriberCount(); return n == 2 }, 10*time.Second, 5*time.Millisecond)
	c.subscribe("m1", touchA, nil)
	c.subscribe("m2", touchA, nil)
	e.waitBlocked(2) // four operations unfinished: the connection is full

	c.subscribe("q", `{ version }`, nil)
	c.quiet(300 * time.Millisecond) // not read, so not answered, while full
	release()
	for _, id := range []string{"m1", "m2"} {
		require.Empty(t, opResult(t, c.nextFor(id, 10*time.Second)).Errors, "mutation %s", id)
	}
	r := opResult(t, c.nextFor("q", 10*time.Second))
	require.Empty(t, r.Errors, "the query waited for a slot instead of being refused")
	require.Contains(t, string(r.Data), "version")
}

// A client may stop an operation and start another under the same id at
// once (graphql-transport-ws allows an id again once the client completed
// it): the new operation is the one its next stop ends, whatever the order
// in which the server finishes the old one. gqlgen forgot an operation by
// its id after writing its complete, so an old operation finishing after
// the new one started under its id removed the new one's entry: the client
// could no longer stop it, and each such subscription held a slot of the
// connection (and a hub subscription) until it closed, which so reached
// its SubscriptionsPerConn. (Before the fix this failed in nearly every
// run: a few of the 1,000 reuses race.)
func TestWebsocket_IDReusedAtOnceLeaksNoOperation(t *testing.T) {
	t.Parallel()
	const limit, rounds = 8, 1000
	for _, proto := range []string{"graphql-transport-ws", "graphql-ws"} {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, withLimits(api.Limits{SubscriptionsPerConn: limit}))
			e.manifest(workerKind)
			c := e.connect(proto, nil)
			quiet := `subscription { resourceChanged(kind: "quiet") { name } }` // a kind nothing changes
			c.subscribe("x", quiet, nil)
			for range rounds {
				c.stop("x")
				c.subscribe("x", quiet, nil)
			}
			c.stop("x")
			c.subscribe("sync", `{ version }`, nil)
			require.Empty(t, opResult(t, c.nextFor("sync", 30*time.Second)).Errors, "every message before was read")
			require.Eventually(t, func() bool { n, _, _, _ := e.hub.SubscriberCount(); return n == 0 }, 10*time.Second,
				5*time.Millisecond, "every subscription under x was stopped")

			// Every slot is free again: limit subscriptions run at once. One
			// refused because a stopped operation had not given its slot back
			// yet is tried again.
			probe := 0
			for i := range limit {
				for try := 0; ; try++ {
					require.Less(t, try, 100, "the connection's %d subscription slots are free: %d run", limit, i)
					id := fmt.Sprintf("y%d.%d", i, try)
					c.subscribe(id, `subscription { resourceChanged(kind: "leaf") { name } }`, nil)
					if runs(t, e, c, id, &probe) {
						break
					}
				}
			}
		})
	}
}

// runs reports whether subscription id runs: a change of leaf/probe reaches
// it (changes are made until one does, as it may not listen yet), or it is
// refused.
func runs(t *testing.T, e *env, c *wsClient, id string, probe *int) bool {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		*probe++
		e.apply("leaf", "probe", fmt.Sprintf("{size: %d}", *probe))
		if q := c.held[id]; len(q) > 0 {
			return len(opResult(t, q[0]).Errors) == 0
		}
		for {
			m, err := c.read(100 * time.Millisecond)
			if err != nil {
				break
			}
			if m.ID == id {
				return len(opResult(t, m).Errors) == 0
			}
			c.held[m.ID] = append(c.held[m.ID], m)
		}
	}
	t.Fatalf("subscription %s neither saw a change nor was refused", id)
	return false
}
