package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/api"
	"github.com/converge-run/converge/core/testlog"
)

// holdRow locks resource name's row in a transaction of its own until the
// returned release is called (or the test ends), and returns once a write
// of that row would wait for it.
func (e *env) holdRow(name string) (release func()) {
	e.t.Helper()
	tx, err := e.pool.BeginTx(e.ctx, pgx.TxOptions{})
	require.NoError(e.t, err)
	var n int
	require.NoError(e.t, tx.QueryRow(e.ctx, `SELECT count(*) FROM (SELECT 1 FROM resources WHERE name = $1 FOR UPDATE) l`, name).Scan(&n))
	require.Equal(e.t, 1, n, "resource %s exists", name)
	done := false
	release = func() {
		if !done {
			done = true
			_ = tx.Rollback(context.Background())
		}
	}
	e.t.Cleanup(release)
	return release
}

// waitBlocked waits until n statements of this database wait on a lock.
func (e *env) waitBlocked(n int) {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		var waiting int
		err := e.pool.QueryRow(e.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		return err == nil && waiting >= n
	}, 30*time.Second, 10*time.Millisecond, "%d statements waiting on a lock", n)
}

const touchA = `mutation { applyResource(input: {kind: "leaf", name: "a", spec: {size: 2}}) { id } }`

// A query or mutation that outlives API_REQUEST_TIMEOUT is ended and
// refused naming the limit, over HTTP and over a websocket alike (a
// websocket operation used to run unbounded), and writes nothing.
func TestLimits_RequestTimeoutEndsOperationsOverHTTPAndWebsocket(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(api.Limits{RequestTimeout: 3 * time.Second})) // slack for the set-up requests on a loaded machine
	e.manifest(workerKind)
	e.apply("leaf", "a", `{size: 1}`)
	release := e.holdRow("a")

	timedOut := func(r gqlResponse, how string) {
		t.Helper()
		require.Equal(t, "BAD_USER_INPUT", r.code(), "%s: %+v", how, r.Errors)
		require.Equal(t, "timeout", r.Errors[0].Extensions["limit"], how)
		require.Contains(t, r.Errors[0].Message, "API_REQUEST_TIMEOUT", how)
	}
	start := time.Now()
	timedOut(e.do("", touchA, nil), "HTTP")
	require.Less(t, time.Since(start), 20*time.Second)

	c := e.connect("graphql-transport-ws", nil)
	start = time.Now()
	c.subscribe("m", touchA, nil)
	timedOut(opResult(t, c.nextFor("m", 20*time.Second)), "websocket")
	require.Less(t, time.Since(start), 20*time.Second)

	release()
	var got struct {
		Resource struct{ Spec json.RawMessage }
	}
	e.ok(`{ resource(kind: "leaf", name: "a") { spec } }`, nil, &got)
	require.JSONEq(t, `{"size":1}`, string(got.Resource.Spec), "the timed-out mutations wrote nothing")
}

// A client that sends its headers and part of a body, then stalls, is
// answered 408 naming API_REQUEST_TIMEOUT once it has passed, instead of
// holding its goroutine and connection for as long as it likes.
func TestLimits_StalledBodyIsAnsweredWith408(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(api.Limits{RequestTimeout: 500 * time.Millisecond}))
	conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write([]byte("POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"query\":"))
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err, "the server answers a stalled body")
	defer resp.Body.Close()
	require.Equal(t, http.StatusRequestTimeout, resp.StatusCode)
	var r gqlResponse
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&r))
	require.Equal(t, "BAD_USER_INPUT", r.code())
	require.Equal(t, "timeout", r.Errors[0].Extensions["limit"])
	require.True(t, strings.Contains(r.Errors[0].Message, "API_REQUEST_TIMEOUT"), r.Errors[0].Message)
}

// An operation whose fields outlive API_REQUEST_TIMEOUT together is
// refused once: one timeout error in its response and one log line, not one
// of each per field still resolving at the deadline (a page of 40 rows
// whose history read waits gave 40 of both: on a slow database, a log flood
// of every request's every field).
func TestLimits_ATimedOutOperationIsReportedAndLoggedOnce(t *testing.T) {
	t.Parallel()
	var logs testlog.Buffer
	e := newEnv(t, withLimits(api.Limits{RequestTimeout: 2 * time.Second}), withLog(zerolog.New(&logs)))
	e.manifest(workerKind)
	for i := range 40 {
		e.apply("leaf", fmt.Sprintf("r%02d", i), `{}`)
	}
	// every history read waits on this lock until the deadline
	tx, err := e.pool.Begin(e.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(e.ctx, `LOCK TABLE resource_events IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	check := func(r gqlResponse, how string) {
		t.Helper()
		require.Len(t, r.Errors, 1, "%s: %+v", how, r.Errors)
		require.Equal(t, "timeout", r.Errors[0].Extensions["limit"], how)
		require.Contains(t, r.Errors[0].Message, "API_REQUEST_TIMEOUT", how)
	}
	const page = `{ resources(first: 40) { items { name history(first: 1) { nextCursor } } } }`
	check(e.do("", page, nil), "HTTP")
	require.Equal(t, 1, logs.Count("graphql request timed out"), logs.String())

	c := e.connect("graphql-transport-ws", nil)
	c.subscribe("q", page, nil)
	check(opResult(t, c.nextFor("q", 30*time.Second)), "websocket")
	require.Equal(t, 2, logs.Count("graphql request timed out"), logs.String())
}
