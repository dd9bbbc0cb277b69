package api_test

import (
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
