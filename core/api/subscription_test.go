package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/api"
	"github.com/converge-run/converge/core/store/membership"
	"github.com/converge-run/converge/core/store/pipeline"
)

const eventFields = `type id kind name previousPhase resource { name phase owner { name } }`

type event struct {
	Type, ID, Kind, Name string
	PreviousPhase        *string
	Resource             *struct {
		Name, Phase string
	}
}

type changed struct {
	ResourceChanged event `json:"resourceChanged"`
}

// runPipeline claims every pending reconcile task of kind and finishes it
// through the outbox and the drain: fail names the resources whose
// reconcile fails.
func (e *env) runPipeline(kind string, fail ...string) {
	e.t.Helper()
	ps := pipeline.New(e.pool)
	lease := pipeline.Lease{WorkerID: "test-worker", Lo: 0, Hi: 255}
	for {
		tasks, err := ps.Claim(e.ctx, lease, pipeline.Batch{Kind: kind, Version: "v1", TaskType: pipeline.TaskReconcile, Max: 100})
		require.NoError(e.t, err)
		if len(tasks) == 0 {
			return
		}
		var rs []pipeline.Result
		for _, task := range tasks {
			r := task.Result(json.RawMessage(`{"ok":true}`))
			for _, f := range fail {
				if task.Resource.Name == f {
					r = task.Failure("boom", true)
				}
			}
			rs = append(rs, r)
		}
		require.NoError(e.t, ps.AppendOutbox(e.ctx, rs...))
		for {
			n, err := ps.DrainOutboxBatch(e.ctx, 1000, 0, 255)
			require.NoError(e.t, err)
			if n == 0 {
				break
			}
		}
	}
}

// child inserts a composed child of owner (what a composer's apply writes)
// and hands it to the gate.
func (e *env) child(kind, name, ownerID string) string {
	e.t.Helper()
	id := uuid.New()
	_, err := e.pool.Exec(e.ctx, `INSERT INTO resources (id, kind, version, name, owner_id, root_id, shard_id)
		VALUES ($1, $2, 'v1', $3, $4, $4, shard_of($1))`, id, kind, name, ownerID)
	require.NoError(e.t, err)
	_, err = pipeline.New(e.pool).ScheduleEligible(e.ctx, []uuid.UUID{id})
	require.NoError(e.t, err)
	return id.String()
}

// collect reads resourceChanged events of id until want reports every
// expectation met (or fails at the deadline), then checks nothing more
// arrives for a short while.
func collect(t *testing.T, c *wsClient, id string, want func(last map[string]event) bool) (map[string]event, []event) {
	t.Helper()
	last := map[string]event{}
	var all []event
	deadline := time.Now().Add(10 * time.Second)
	for !want(last) {
		m, err := c.tryNextFor(id, time.Until(deadline))
		require.NoError(t, err, "subscription %s: what came before the wait ended: %s", id, describe(all))
		require.Contains(t, []string{"next", "data"}, m.Type, "message %s %s", m.Type, m.Payload)
		var r gqlResponse
		require.NoError(t, json.Unmarshal(m.Payload, &r))
		require.Empty(t, r.Errors)
		var ch changed
		require.NoError(t, json.Unmarshal(r.Data, &ch))
		all = append(all, ch.ResourceChanged)
		last[ch.ResourceChanged.Name] = ch.ResourceChanged
	}
	return last, all
}

// describe lists events one a line: type, name, phase before and after.
func describe(all []event) string {
	var b strings.Builder
	for _, ev := range all {
		phase, prev := "-", "-"
		if ev.Resource != nil {
			phase = ev.Resource.Phase
		}
		if ev.PreviousPhase != nil {
			prev = *ev.PreviousPhase
		}
		fmt.Fprintf(&b, "\n  %s %q %s -> %s", ev.Type, ev.Name, prev, phase)
	}
	return b.String()
}

func finalPhases(want map[string]string) func(map[string]event) bool {
	return func(last map[string]event) bool {
		if len(last) != len(want) {
			return false
		}
		for name, phase := range want {
			ev, ok := last[name]
			if !ok {
				return false
			}
			got := "DELETED"
			if ev.Resource != nil {
				got = ev.Resource.Phase
			}
			if got != phase {
				return false
			}
		}
		return true
	}
}

// TestSubscriptions_EachFilterGetsExactlyItsEvents drives resources through
// the real pipeline (apply, gate, claim, outbox, drain, delete) and checks
// each filter's subscriber sees exactly the matching changes, on both
// websocket subprotocols.
func TestSubscriptions_EachFilterGetsExactlyItsEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.manifest(workerKind)
	e.manifest(`{"kind":"other","reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`)
	root := e.apply("leaf", "root", `{}`)
	e.runPipeline("leaf")
	e.caughtUp() // root's changes reach no subscriber below

	modern := e.connect("graphql-transport-ws", nil)
	legacy := e.connect("graphql-ws", nil)
	q := `subscription($k: String, $n: String, $o: ID, $p: [Phase!]) {
		resourceChanged(kind: $k, name: $n, ownerId: $o, phases: $p) { ` + eventFields + ` } }`
	modern.subscribe("kind", q, map[string]any{"k": "leaf"})
	legacy.subscribe("name", q, map[string]any{"k": "leaf", "n": "a"})
	modern.subscribe("owner", q, map[string]any{"o": root})
	legacy.subscribe("failed", q, map[string]any{"p": []string{"FAILED"}})
	modern.subscribe("other", q, map[string]any{"k": "other"})
	require.Eventually(t, func() bool { n, _, _, _ := e.hub.SubscriberCount(); return n == 5 }, 5*time.Second, 5*time.Millisecond)

	e.apply("leaf", "a", `{size: 1}`)
	e.apply("leaf", "b", `{size: 2}`)
	e.child("leaf", "c", root)
	e.runPipeline("leaf", "b")
	e.ok(`mutation { deleteResource(kind: "leaf", name: "c") { id } }`, nil, nil)

	last, all := collect(t, modern, "kind", finalPhases(map[string]string{"a": "READY", "b": "FAILED", "c": "DELETED"}))
	for _, ev := range all {
		require.Equal(t, "leaf", ev.Kind)
	}
	require.Equal(t, "DELETED", last["c"].Type)
	require.Equal(t, "DELETING", *last["c"].PreviousPhase, "the deleted row's last phase")

	_, all = collect(t, legacy, "name", finalPhases(map[string]string{"a": "READY"}))
	require.Equal(t, "UPSERTED", all[0].Type)
	require.Nil(t, all[0].PreviousPhase, "a created row has no previous phase")

	_, all = collect(t, modern, "owner", finalPhases(map[string]string{"c": "DELETED"}))
	for _, ev := range all {
		require.Equal(t, "c", ev.Name, "only the root's child")
	}

	// One event: b's move into FAILED. (When the hub coalesces b's insert
	// and its failure into one wake, the phase before is the insert's: none.)
	_, all = collect(t, legacy, "failed", finalPhases(map[string]string{"b": "FAILED"}))
	require.Len(t, all, 1, "only b's move into FAILED")
	if p := all[0].PreviousPhase; p != nil {
		require.Equal(t, "RECONCILING", *p)
	}

	// Nothing else arrives: no event of "other", no extra events anywhere.
	modern.quiet(300 * time.Millisecond)
	legacy.quiet(50 * time.Millisecond)
}

// TestSubscriptions_PhaseCountsOperationsAndMembers covers the other three
// subscriptions.
func TestSubscriptions_PhaseCountsOperationsAndMembers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.manifest(workerKind)
	e.apply("leaf", "a", `{}`)
	c := e.connect("graphql-transport-ws", nil)

	type counts struct {
		PhaseCounts []struct {
			Phase string
			Count int
		}
	}
	c.subscribe("counts", `subscription { phaseCounts(kind: "leaf") { phase count } }`, nil)
	count := func() map[string]int {
		var v counts
		c.data("counts", 5*time.Second, &v)
		m := map[string]int{}
		for _, p := range v.PhaseCounts {
			m[p.Phase] = p.Count
		}
		return m
	}
	require.Equal(t, 1, count()["RECONCILING"], "the current counts come at once")
	e.runPipeline("leaf")
	for m := count(); m["READY"] != 1; {
		m = count()
	}

	var op struct{ RunOperation struct{ ID string } }
	e.ok(`mutation { runOperation(kind: "leaf", name: "a", verb: "flip") { id } }`, nil, &op)
	c.subscribe("op", `subscription($id: ID!) { operationUpdated(id: $id) { state output resource { name } } }`,
		map[string]any{"id": op.RunOperation.ID})
	type opState struct {
		OperationUpdated struct {
			State  string
			Output json.RawMessage
		}
	}
	var s opState
	c.data("op", 5*time.Second, &s)
	require.Equal(t, "PENDING", s.OperationUpdated.State)
	ps := pipeline.New(e.pool)
	tasks, err := ps.Claim(e.ctx, pipeline.Lease{WorkerID: "w", Lo: 0, Hi: 255},
		pipeline.Batch{Kind: "leaf", Version: "v1", TaskType: pipeline.TaskOperate, Max: 10})
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	c.data("op", 5*time.Second, &s)
	require.Equal(t, "RUNNING", s.OperationUpdated.State)
	res := tasks[0].Result(nil)
	res.OperationOutput = json.RawMessage(`{"flipped":true}`)
	require.NoError(t, ps.AppendOutbox(e.ctx, res))
	_, err = ps.DrainOutboxBatch(e.ctx, 100, 0, 255)
	require.NoError(t, err)
	c.data("op", 5*time.Second, &s)
	require.Equal(t, "SUCCEEDED", s.OperationUpdated.State)
	require.JSONEq(t, `{"flipped":true}`, string(s.OperationUpdated.Output))
	m := c.next(5 * time.Second)
	require.Equal(t, "complete", m.Type, "the subscription ends at the final state")

	type members struct {
		ClusterMembers []struct{ ID, Status string }
	}
	c.subscribe("mem", `subscription { clusterMembers { id status } }`, nil)
	var ms members
	c.data("mem", 5*time.Second, &ms)
	require.Empty(t, ms.ClusterMembers)
	mstore := membership.New(e.pool)
	_, err = mstore.Upsert(e.ctx, membership.Member{ID: "pod-9", Role: membership.RoleBroker})
	require.NoError(t, err)
	c.data("mem", 5*time.Second, &ms)
	require.Equal(t, []struct{ ID, Status string }{{"pod-9", "READY"}}, ms.ClusterMembers)
	_, err = e.pool.Exec(e.ctx, `UPDATE cluster_members SET last_heartbeat = now() - interval '1 minute'`)
	require.NoError(t, err)
	c.data("mem", 5*time.Second, &ms)
	require.Equal(t, "NOT_READY", ms.ClusterMembers[0].Status, "a stale heartbeat is pushed by the poll")
	_, err = mstore.Deregister(e.ctx, "pod-9")
	require.NoError(t, err)
	c.data("mem", 5*time.Second, &ms)
	require.Empty(t, ms.ClusterMembers)
}

// TestSubscriptions_UnsubscribeReleasesGoroutines: subscribing and
// completing leaves no goroutine behind, and the hub forgets the subscriber.
//
// Not parallel: it counts the process's goroutines.
func TestSubscriptions_UnsubscribeReleasesGoroutines(t *testing.T) {
	e := newEnv(t)
	e.manifest(workerKind)
	c := e.connect("graphql-transport-ws", nil)
	e.ok(`{ version }`, nil, nil)
	// The listener runs each wait for a notification in a goroutine of its
	// own, gone while it dispatches one: counted, a base taken in that gap
	// sat one below every later count (a failure under load).
	settle := func() int {
		runtime.GC()
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		return strings.Count(stacks, "\ngoroutine ") + 1 - strings.Count(stacks, "notify.(*Listener).wait.func1(")
	}
	base := settle()
	const n = 20
	for i := range n {
		c.subscribe(fmt.Sprint("s", i), `subscription { resourceChanged(kind: "leaf") { id } }`, nil)
	}
	c.subscribe("counts", `subscription { phaseCounts { count } }`, nil)
	require.Eventually(t, func() bool { r, k, _, _ := e.hub.SubscriberCount(); return r == n && k == 1 }, 5*time.Second, 5*time.Millisecond)
	require.Greater(t, settle(), base)
	for i := range n {
		c.stop(fmt.Sprint("s", i))
	}
	c.stop("counts")
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, k, _, _ := e.hub.SubscriberCount()
		if r == 0 && k == 0 && settle() <= base {
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: base %d, now %d (subscribers %d, %d)\n%s", base, settle(), r, k,
				buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSubscriptions_HubRecoversAfterItsListenConnectionIsKilled: the LISTEN
// backend is terminated; subscribers are told to resync and then receive
// changes again.
func TestSubscriptions_HubRecoversAfterItsListenConnectionIsKilled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.manifest(workerKind)
	c := e.connect("graphql-transport-ws", nil)
	c.subscribe("s", `subscription { resourceChanged(kind: "leaf") { `+eventFields+` } }`, nil)
	require.Eventually(t, func() bool { n, _, _, _ := e.hub.SubscriberCount(); return n == 1 }, 5*time.Second, 5*time.Millisecond)
	e.apply("leaf", "before", `{}`)
	var ch changed
	c.data("s", 5*time.Second, &ch)
	require.Equal(t, "before", ch.ResourceChanged.Name)

	var killed int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE 'LISTEN %'`).Scan(&killed))
	require.Equal(t, 1, killed)
	require.Eventually(t, func() bool { return e.listener.Reconnects() >= 1 }, 10*time.Second, 10*time.Millisecond)
	c.data("s", 5*time.Second, &ch)
	require.Equal(t, "RESYNC", ch.ResourceChanged.Type, "missed changes are announced as a resync")

	e.apply("leaf", "after", `{}`)
	c.data("s", 5*time.Second, &ch)
	require.Equal(t, "UPSERTED", ch.ResourceChanged.Type)
	require.Equal(t, "after", ch.ResourceChanged.Name)
}

// TestAuth_ViewerCannotMutateOverWebsocket: a viewer's connection_init
// token lets it subscribe but not mutate; no token closes the connection.
func TestAuth_ViewerCannotMutateOverWebsocket(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withTokens())
	e.manifest(workerKind)

	viewer := e.connect("graphql-transport-ws", map[string]any{"Authorization": "Bearer " + viewerToken})
	viewer.subscribe("m", `mutation { applyResource(input: {kind: "leaf", name: "x", spec: {}}) { id } }`, nil)
	m := viewer.next(5 * time.Second)
	var r gqlResponse
	require.NoError(t, json.Unmarshal(m.Payload, &r))
	require.Equal(t, "FORBIDDEN", r.code(), "%s %s", m.Type, m.Payload)
	viewer.subscribe("q", `{ viewer { role } }`, nil)
	var v struct{ Viewer struct{ Role string } }
	for {
		m = viewer.next(5 * time.Second)
		if m.ID == "q" && m.Type == "next" {
			break
		}
	}
	require.NoError(t, json.Unmarshal(m.Payload, &r))
	require.NoError(t, json.Unmarshal(r.Data, &v))
	require.Equal(t, "VIEWER", v.Viewer.Role)

	admin := e.connect("graphql-transport-ws", map[string]any{"authorization": "Bearer " + adminToken})
	admin.subscribe("m", `mutation { applyResource(input: {kind: "leaf", name: "x", spec: {}}) { name } }`, nil)
	m = admin.next(5 * time.Second)
	require.Equal(t, "next", m.Type, "%s", m.Payload)

	anon, _, err := e.dial("graphql-transport-ws", nil)
	require.NoError(t, err)
	anon.send(map[string]any{"type": "connection_init"})
	_, err = anon.read(5 * time.Second)
	require.Error(t, err)
	require.Contains(t, err.Error(), "4401")

	header := http.Header{"Authorization": {"Bearer " + viewerToken}}
	hv, _, err := e.dial("graphql-transport-ws", header)
	require.NoError(t, err)
	hv.send(map[string]any{"type": "connection_init"})
	require.Equal(t, "connection_ack", hv.next(5*time.Second).Type, "a header on the upgrade authenticates too")
}

// TestWebsocket_KeepAliveToleratesClientsThatNeverPong: a client that
// ignores pings (as genqlient's does) stays connected and keeps receiving.
func TestWebsocket_KeepAliveToleratesClientsThatNeverPong(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(testKeepAlive))
	e.manifest(workerKind)
	c, _, err := e.dial("graphql-transport-ws", nil)
	require.NoError(t, err)
	pings := make(chan struct{}, 100)
	c.conn.SetPingHandler(func(string) error { pings <- struct{}{}; return nil }) // never pong
	c.send(map[string]any{"type": "connection_init"})
	require.Equal(t, "connection_ack", c.next(5*time.Second).Type)
	c.subscribe("s", `subscription { resourceChanged(kind: "leaf") { name } }`, nil)
	for range 3 {
		select {
		case <-pings:
		case <-time.After(5 * time.Second):
			t.Fatal("no keep-alive ping")
		}
	}
	e.apply("leaf", "still-here", `{}`)
	var ch changed
	c.data("s", 5*time.Second, &ch)
	require.Equal(t, "still-here", ch.ResourceChanged.Name)
}

// TestWebsocket_RejectsCrossOriginUnlessAllowed: a browser upgrade from
// another origin is refused (403) unless API_ALLOWED_ORIGINS names it.
func TestWebsocket_RejectsCrossOriginUnlessAllowed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(api.Limits{AllowedOrigins: []string{"dash.example.com"}}))
	_, resp, err := e.dial("graphql-transport-ws", http.Header{"Origin": {"https://evil.example.com"}})
	require.Error(t, err)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	c, _, err := e.dial("graphql-transport-ws", http.Header{"Origin": {"https://dash.example.com"}})
	require.NoError(t, err)
	c.send(map[string]any{"type": "connection_init"})
	require.Equal(t, "connection_ack", c.next(5*time.Second).Type)
}

// TestWebsocket_SubscriptionCapAndPayloadLimit: a connection holds at most
// SubscriptionsPerConn subscriptions (a finished one frees its slot), and
// a message over WSPayloadBytes closes the connection.
func TestWebsocket_SubscriptionCapAndPayloadLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(api.Limits{SubscriptionsPerConn: 2, WSPayloadBytes: 2048}))
	c := e.connect("graphql-transport-ws", nil)
	q := `subscription { resourceChanged { id } }`
	c.subscribe("a", q, nil)
	c.subscribe("b", q, nil)
	require.Eventually(t, func() bool { n, _, _, _ := e.hub.SubscriberCount(); return n == 2 }, 5*time.Second, 5*time.Millisecond)
	c.subscribe("c", q, nil)
	m := c.nextFor("c", 5*time.Second)
	require.Contains(t, string(m.Payload), "at most 2 subscriptions per connection")
	require.Contains(t, string(m.Payload), "BAD_USER_INPUT")
	c.stop("a")
	require.Eventually(t, func() bool { n, _, _, _ := e.hub.SubscriberCount(); return n == 1 }, 5*time.Second, 5*time.Millisecond)
	c.subscribe("d", q, nil)
	require.Eventually(t, func() bool { n, _, _, _ := e.hub.SubscriberCount(); return n == 2 }, 5*time.Second, 5*time.Millisecond,
		"the completed subscription freed its slot")

	select {
	case err := <-c.err:
		t.Fatalf("connection closed early: %v", err)
	default:
	}
	// The write itself may fail: the server closes as soon as it reads the
	// frame header.
	_ = c.conn.WriteJSON(map[string]any{"type": "subscribe", "id": "big",
		"payload": map[string]any{"query": `{ version }` + strings.Repeat(" ", 4096)}})
	for {
		if _, err := c.read(5 * time.Second); err != nil {
			require.NotErrorIs(t, err, errQuiet, "the oversized message closed the connection")
			break
		}
	}
}
