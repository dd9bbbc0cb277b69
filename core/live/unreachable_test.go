package live_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/live"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/notify"
	"github.com/converge-run/converge/core/testlog"
	"github.com/converge-run/converge/db/pgtest"
)

// readGate is the hub's read pool with a switch: while it is down, every
// connection is refused (as by a replica that stopped) and those open are
// reset; the listener and the test's writes go through another pool and
// carry on.
type readGate struct {
	pool  *pgxpool.Pool
	links *pgtest.Links
}

// newReadGate opens a pool on url through a gate, open.
func newReadGate(t *testing.T, url string) *readGate {
	t.Helper()
	pool, links := pgtest.PoolThrough(t, url, 4)
	return &readGate{pool: pool, links: links}
}

// cut silences every connection open now: what either end sends is lost
// and the sockets stay open, as behind a dead link where no reset comes.
// New connections work.
func (g *readGate) cut() { g.links.Cut() }

// close refuses connections from now on and resets those open; open lets
// new ones through again.
func (g *readGate) close() {
	g.links.SetDown(true)
	g.pool.Reset()
}

func (g *readGate) open() { g.links.SetDown(false) }

// waitDials waits until the hub has tried to connect n more times.
func (g *readGate) waitDials(t *testing.T, n int64) {
	t.Helper()
	want := g.links.Dials() + n
	require.Eventually(t, func() bool { return g.links.Dials() >= want }, 30*time.Second, 5*time.Millisecond,
		"the hub's read attempts: want %d, have %d", want, g.links.Dials())
}

// startGatedHub is startHubWith with the hub reading through a readGate
// and reporting to an outage whose log (and the hub's) goes to logs.
func startGatedHub(t *testing.T, opts live.Options) (*hubEnv, *readGate, *testlog.Buffer) {
	t.Helper()
	url := pgtest.URL(t)
	db := pgtest.PoolFor(t, url)
	g := newReadGate(t, url)
	logs := &testlog.Buffer{}
	log := zerolog.New(logs)
	// The kinds before the listener runs: their announcement is never
	// heard, so no later re-list can stand in for the one a test awaits.
	_, err := db.Exec(context.Background(), `INSERT INTO kind_manifest (kind, version, manifest) VALUES
		('tree', 'v1', '{"kind":"tree","reactions":[{"name":"c","trigger":"specChange","emits":["children","status"]}]}'),
		('leaf', 'v1', '{"kind":"leaf","reactions":[{"name":"w","trigger":"specChange","emits":["status"]}]}')`)
	require.NoError(t, err)
	l := notify.NewListener(db, zerolog.Nop())
	o := &engine.Outage{Log: log}
	h := live.NewHub(l, g.pool, log, live.WithOptions(opts), live.WithOutage(o))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	t.Cleanup(func() { cancel(); <-done; <-done }) // before the pools close
	go func() { _ = h.Run(ctx); done <- struct{}{} }()
	<-h.Started()
	go func() { _ = l.Run(ctx); done <- struct{}{} }()
	select {
	case <-l.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("the listener did not become ready")
	}
	// Run's first sample, so a test that closes the gate sees its own
	// read fail first.
	require.Eventually(t, func() bool { return len(h.Samples()) > 0 }, 30*time.Second, 5*time.Millisecond)
	return &hubEnv{t: t, db: db, hub: h}, g, logs
}

// waitLogged waits for a log line that holds want.
func waitLogged(t *testing.T, logs *testlog.Buffer, want string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, line := range logs.Lines() {
			if strings.Contains(line, want) {
				return true
			}
		}
		return false
	}, 30*time.Second, 5*time.Millisecond, "no log line with %s: %v", want, logs.Lines())
}

// While its reads cannot reach the database, the hub retries a followed
// subtree's load every CountsInterval, quietly: the process's outage logs
// its one WARN, and the retries log nothing. Before, each retry logged an
// ERROR (four a second per followed root, for as long as the outage
// lasted).
func TestSubtreeProgress_RetriesQuietlyWhileTheDatabaseIsUnreachable(t *testing.T) {
	t.Parallel()
	e, g, logs := startGatedHub(t, live.Options{CountsInterval: 10 * time.Millisecond, MemberPoll: time.Hour, SampleEvery: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := e.insert("tree", "root", uuid.Nil, uuid.Nil)
	g.close()
	ch := live.SubscribeSubtree(ctx, e.hub, root, func(p live.SubtreeProgress) live.SubtreeProgress { return p })
	g.waitDials(t, 10)
	for _, l := range logs.Lines() {
		require.NotContains(t, l, `"level":"error"`, "a retry during the outage logged: %v", logs.Lines())
	}

	g.open()
	p := next(t, ch, "the subtree once the database is back", func(live.SubtreeProgress) bool { return true })
	require.Equal(t, "root", p.Root.Name)
}

// A re-read that failed is retried until it succeeds: what it was to push
// comes once the database is back, although nothing changes any more.
// Before, the push waited for a further change that may never come: an
// operation's subscriber never saw the final state whose announcement
// came while the read failed, and a new counts or kinds subscriber never
// got its first push.
func TestHub_RetriesAFailedReadWithoutAFurtherChange(t *testing.T) {
	t.Parallel()
	opts := live.Options{CountsInterval: 10 * time.Millisecond, MemberPoll: time.Hour, SampleEvery: time.Hour}
	cases := map[string]struct {
		reason string
		// loop is the read's name in the outage's WARN (its first failure).
		loop string
		// follow subscribes (the read pool may be down) and changes what
		// the subscription reports; got waits for the push that says so.
		follow func(ctx context.Context, t *testing.T, e *hubEnv, g *readGate) (got func())
	}{
		"operation": {
			reason: "the final state announced while the re-read failed",
			loop:   "hub-operations",
			follow: func(ctx context.Context, t *testing.T, e *hubEnv, g *readGate) func() {
				id := e.insertOperation()
				ch, err := live.SubscribeOperation(ctx, e.hub, id, func(op resource.Operation) resource.Operation { return op })
				require.NoError(t, err)
				next(t, ch, "the current state", func(resource.Operation) bool { return true })
				g.close()
				e.exec(`UPDATE resource_operations SET state = 'Succeeded', finished_at = now(), updated_at = now() + interval '1 s'
					WHERE id = $1`, id)
				return func() {
					next(t, ch, "the final state", func(op resource.Operation) bool { return op.State == resource.OperationSucceeded })
				}
			},
		},
		"counts": {
			reason: "the first push of a subscriber that arrived while the read failed",
			loop:   "hub-counts",
			follow: func(ctx context.Context, t *testing.T, e *hubEnv, g *readGate) func() {
				g.close()
				ch := live.SubscribePhaseCounts(ctx, e.hub, "", func(cs []resource.PhaseCount) []resource.PhaseCount { return cs })
				return func() { next(t, ch, "the counts", func([]resource.PhaseCount) bool { return true }) }
			},
		},
		"kinds": {
			reason: "the first push of a subscriber that arrived while the read failed",
			loop:   "hub-catalog",
			follow: func(ctx context.Context, t *testing.T, e *hubEnv, g *readGate) func() {
				g.close()
				ch := live.SubscribeKinds(ctx, e.hub, func(ks []store.Kind) []store.Kind { return ks })
				return func() { next(t, ch, "the kinds", func(ks []store.Kind) bool { return len(ks) == 2 }) }
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e, g, logs := startGatedHub(t, opts)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			got := tc.follow(ctx, t, e, g)
			waitLogged(t, logs, `"loop":"`+tc.loop+`"`) // the read failed
			g.open()
			got()
		})
	}
}

// With a replica to read from, the replay check before each re-read asks
// the primary: while the primary is unreachable the retries are quiet too.
// Before, each retry's failed check logged a WARN (four a second per
// followed root).
func TestSubtreeProgress_RetriesQuietlyWhileThePrimaryIsUnreachable(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	db := pgtest.PoolFor(t, url)
	g := newReadGate(t, url)
	logs := &testlog.Buffer{}
	log := zerolog.New(logs)
	l := notify.NewListener(db, zerolog.Nop())
	// db stands for the replica, the gated pool for the primary
	h := live.NewHub(l, db, log, live.WithPrimary(g.pool), live.WithOutage(&engine.Outage{Log: log}),
		live.WithOptions(live.Options{CountsInterval: 10 * time.Millisecond, MemberPoll: time.Hour, SampleEvery: time.Hour}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	defer func() { cancel(); <-done }()
	go func() { defer close(done); _ = h.Run(ctx) }()
	<-h.Started()
	e := &hubEnv{t: t, db: db, hub: h}
	root := e.insert("tree", "root", uuid.Nil, uuid.Nil)

	g.close()
	live.SubscribeSubtree(ctx, h, root, func(p live.SubtreeProgress) live.SubtreeProgress { return p })
	g.waitDials(t, 10)
	for _, l := range logs.Lines() {
		require.NotContains(t, l, `"level":"warn","component":"live"`, "a retry during the outage logged: %v", logs.Lines())
		require.NotContains(t, l, `"level":"error"`, "a retry during the outage logged: %v", logs.Lines())
	}
}

// A re-read on a connection whose network died without a reset is bounded
// by ReadTimeout, then retried on a new connection: the hub goes on.
// Before, the read waited on the dead connection forever, and with it the
// hub's loop: no subscriber of any sort got another push.
func TestHub_AReadOnADeadConnectionTimesOutAndTheHubGoesOn(t *testing.T) {
	t.Parallel()
	e, g, _ := startGatedHub(t, live.Options{CountsInterval: 10 * time.Millisecond, MemberPoll: time.Hour,
		SampleEvery: time.Hour, ReadTimeout: 500 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reconciling := func(cs []resource.PhaseCount) int64 {
		for _, c := range cs {
			if c.Phase == resource.PhaseReconciling {
				return c.Count
			}
		}
		return 0
	}
	ch := live.SubscribePhaseCounts(ctx, e.hub, "", func(cs []resource.PhaseCount) []resource.PhaseCount { return cs })
	next(t, ch, "the counts at once", func(cs []resource.PhaseCount) bool { return reconciling(cs) == 0 })
	g.cut()
	e.insert("leaf", "after-the-cut", uuid.Nil, uuid.Nil)
	next(t, ch, "the counts with the new row", func(cs []resource.PhaseCount) bool { return reconciling(cs) == 1 })
}

// A read that fails for a reason other than an unreachable database (here
// an error its SQL raises) is retried every CountsInterval but logged once
// per streak of failures: on the first, and again only after a success.
func TestHub_AFailingReadLogsOncePerStreak(t *testing.T) {
	t.Parallel()
	e, _, logs := startGatedHub(t, live.Options{CountsInterval: 10 * time.Millisecond, MemberPoll: time.Hour, SampleEvery: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The counts read fails while resource_phase_deltas is a view over a
	// function that counts its calls and raises.
	e.exec(`CREATE SEQUENCE counts_read_failures`)
	e.exec(`CREATE FUNCTION failing_deltas() RETURNS SETOF resource_phase_deltas LANGUAGE plpgsql AS $$
		BEGIN PERFORM nextval('counts_read_failures'); RAISE EXCEPTION 'injected counts read failure'; END $$`)
	failures := func() int64 {
		var n int64
		require.NoError(t, e.db.QueryRow(ctx, `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM counts_read_failures`).Scan(&n))
		return n
	}
	logged := func() int {
		n := 0
		for _, l := range logs.Lines() {
			if strings.Contains(l, "recompute phase counts") {
				n++
			}
		}
		return n
	}
	breakRead := func() {
		e.exec(`ALTER TABLE resource_phase_deltas RENAME TO resource_phase_deltas_kept`)
		e.exec(`CREATE VIEW resource_phase_deltas AS SELECT * FROM failing_deltas()`)
	}
	healRead := func() {
		e.exec(`DROP VIEW resource_phase_deltas`)
		e.exec(`ALTER TABLE resource_phase_deltas_kept RENAME TO resource_phase_deltas`)
	}
	subscribe := func() <-chan []resource.PhaseCount {
		return live.SubscribePhaseCounts(ctx, e.hub, "", func(cs []resource.PhaseCount) []resource.PhaseCount { return cs })
	}
	waitFailures := func(n int64) {
		t.Helper()
		want := failures() + n
		require.Eventually(t, func() bool { return failures() >= want }, 30*time.Second, 5*time.Millisecond,
			"the counts read retried: want %d failed reads, have %d", want, failures())
	}

	breakRead()
	first := subscribe() // wakes the hub: the counts are read, and fail
	waitFailures(5)
	require.Equal(t, 1, logged(), "one line for a streak of failures: %v", logs.Lines())

	healRead()
	next(t, first, "the counts once the read succeeds", func([]resource.PhaseCount) bool { return true })
	breakRead()
	subscribe()
	waitFailures(5)
	require.Equal(t, 2, logged(), "a new streak after a success logs again: %v", logs.Lines())
}
