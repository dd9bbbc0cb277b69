package broker

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/metrics"
	"github.com/converge-run/converge/core/store/notify"
	"github.com/converge-run/converge/core/store/pipeline"
	"github.com/converge-run/converge/db/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// pgQueue is a real database with the vpc kind applied, a LISTEN
// connection, and a dispatcher claiming from it whose runner records when
// each task was handed over.
type pgQueue struct {
	t    *testing.T
	pool *pgxpool.Pool
	d    *dispatcher
	mu   sync.Mutex
	at   map[uuid.UUID]time.Time
}

// startPgDispatcher starts the queue's dispatcher once configure (a test's
// own runner, cap or rollup bound) has changed it.
func startPgDispatcher(t *testing.T, configure ...func(*dispatcher)) *pgQueue {
	t.Helper()
	q := newPgQueue(t)
	q.start(configure...)
	return q
}

// newPgQueue is the database with the vpc kind applied and no dispatcher
// yet, for a test that seeds rows the dispatcher must see from its first
// sweep.
func newPgQueue(t *testing.T) *pgQueue {
	t.Helper()
	q := &pgQueue{t: t, pool: pgtest.Pool(t), at: map[uuid.UUID]time.Time{}}
	_, err := q.pool.Exec(context.Background(), `INSERT INTO kind_manifest (kind, version, manifest) VALUES ('vpc', 'v1',
	    '{"kind":"vpc","reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}')`)
	require.NoError(t, err)
	return q
}

// start runs the queue's dispatcher once configure has changed it.
func (q *pgQueue) start(configure ...func(*dispatcher)) {
	t := q.t
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	log := testLog(t)
	listener := notify.NewListener(q.pool, log)
	var wg sync.WaitGroup
	wg.Go(func() { _ = listener.Run(ctx) })
	d := &dispatcher{id: "broker-1", claims: pipeline.New(q.pool),
		routes: &fakeRoutes{PairsFn: func() []pairKey { return []pairKey{pairVPC} }},
		shards: fakeShards{0, 255, true}, tasks: newInflight(),
		runner: &fakeRunner{RunFn: func(_ context.Context, _ pipeline.Lease, task pipeline.Task) {
			q.mu.Lock()
			q.at[task.Key.ResourceID] = time.Now()
			q.mu.Unlock()
		}},
		wakes: listenerWaker{listener}, metrics: metrics.New(), clock: engine.RealClock, log: log,
		caps: pairCaps{base: 100}, pollMin: DefaultPollMin, pollMax: DefaultPollMax, drain: time.Second}
	for _, c := range configure {
		c(d)
	}
	q.d = d
	select {
	case <-listener.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("listener never ready")
	}
	wg.Go(func() { _ = d.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// pend inserts a vpc resource and schedules it in tx (schedule_eligible
// queues its reconcile row and calls notify_gated('work_ready')).
func (q *pgQueue) pend(ctx context.Context, tx pgx.Tx) uuid.UUID {
	q.t.Helper()
	id := uuid.New()
	_, err := tx.Exec(ctx, `INSERT INTO resources (id, kind, version, name, spec, labels, shard_id)
	                        VALUES ($1, 'vpc', 'v1', $2, '{}', '{}', shard_of($1))`, id, "vpc-"+id.String())
	require.NoError(q.t, err)
	var n int
	require.NoError(q.t, tx.QueryRow(ctx, `SELECT schedule_eligible(ARRAY[$1]::uuid[], now())`, id).Scan(&n))
	require.Equal(q.t, 1, n, "the pend is queued")
	return id
}

// waitClaimed returns how long after committed the task of id was handed over.
func (q *pgQueue) waitClaimed(id uuid.UUID, committed time.Time) time.Duration {
	q.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		q.mu.Lock()
		at, ok := q.at[id]
		q.mu.Unlock()
		if ok {
			return at.Sub(committed)
		}
		time.Sleep(5 * time.Millisecond)
	}
	q.t.Fatalf("pend %s never claimed", id)
	return 0
}

func (q *pgQueue) begin(ctx context.Context) pgx.Tx {
	q.t.Helper()
	tx, err := q.pool.Begin(ctx)
	require.NoError(q.t, err)
	return tx
}

// stallBound is what the dispatcher guarantees a pend whose wake was lost
// (PollMax), plus slack for a loaded test machine.
const stallBound = DefaultPollMax + loadSlack

// End to end on Postgres: pends committed where notify_gated loses their
// wake are still claimed within PollMax.
func TestDispatcher_NoStallsAgainstPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("CommittedAfterTheGateWinner", func(t *testing.T) {
		t.Parallel()
		q := startPgDispatcher(t)
		// The winner takes the gate and holds it; the pend's own notify
		// is suppressed; the winner commits (the wake sweeps, finding
		// nothing committed) and the pend commits after the trailing
		// sweeps have passed.
		winner := q.begin(ctx)
		var won bool
		require.NoError(t, winner.QueryRow(ctx, `SELECT notify_gated('work_ready')`).Scan(&won))
		require.True(t, won)
		loser := q.begin(ctx)
		id := q.pend(ctx, loser)
		require.NoError(t, winner.Commit(ctx))
		time.Sleep(300 * time.Millisecond)
		require.NoError(t, loser.Commit(ctx))
		got := q.waitClaimed(id, time.Now())
		t.Logf("claimed %s after its commit", got)
		require.LessOrEqual(t, got, stallBound)
	})

	t.Run("WakeLostAfterALongIdle", func(t *testing.T) {
		t.Parallel()
		q := startPgDispatcher(t)
		time.Sleep(4 * time.Second) // the idle backoff reaches its cap
		tx := q.begin(ctx)
		// Inside the gate's window: this transaction's notify is suppressed
		// and no other wake follows.
		_, err := tx.Exec(ctx, `INSERT INTO wake_state (channel, last_notified_at) VALUES ('work_ready', clock_timestamp())
		                        ON CONFLICT (channel) DO UPDATE SET last_notified_at = EXCLUDED.last_notified_at`)
		require.NoError(t, err)
		id := q.pend(ctx, tx)
		require.NoError(t, tx.Commit(ctx))
		got := q.waitClaimed(id, time.Now())
		t.Logf("claimed %s after its commit", got)
		require.LessOrEqual(t, got, stallBound)
	})

	t.Run("ConcurrentCommitsAroundTheGateWindow", func(t *testing.T) {
		t.Parallel()
		q := startPgDispatcher(t)
		const n = 20
		type pend struct {
			id        uuid.UUID
			committed time.Time
		}
		pends := make(chan pend, n)
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				tx := q.begin(ctx)
				id := q.pend(ctx, tx)
				time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond) // commits spread over three gate windows
				if assert.NoError(t, tx.Commit(ctx)) {
					pends <- pend{id, time.Now()}
				}
			})
		}
		wg.Wait()
		close(pends)
		require.Len(t, pends, n)
		for p := range pends {
			got := q.waitClaimed(p.id, p.committed)
			require.LessOrEqual(t, got, stallBound, "pend %s", p.id)
		}
	})
}

// The failsafe probe finds exactly the pairs with claimable rows in range.
func TestClaimableProbe_FindsPendingPairsInRange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	q := &pgQueue{t: t, pool: pool}
	_, err := pool.Exec(ctx, `INSERT INTO kind_manifest (kind, version, manifest) VALUES ('vpc', 'v1',
	    '{"kind":"vpc","reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}')`)
	require.NoError(t, err)
	tx := q.begin(ctx)
	id := q.pend(ctx, tx)
	require.NoError(t, tx.Commit(ctx))
	var shard int
	require.NoError(t, pool.QueryRow(ctx, `SELECT shard_id FROM work_queue WHERE resource_id = $1`, id).Scan(&shard))

	st := pipeline.New(pool)
	batches := []pipeline.Batch{
		{Kind: "vpc", Version: "v1", TaskType: pipeline.TaskReconcile},
		{Kind: "vpc", Version: "v1", TaskType: pipeline.TaskDelete},
		{Kind: "subnet", Version: "v1", TaskType: pipeline.TaskReconcile},
	}
	got, err := st.Claimable(ctx, 0, 255, batches)
	require.NoError(t, err)
	require.Equal(t, []bool{true, false, false}, got, "only the queued pair has work")

	lo, hi := 0, 255
	if shard < 128 {
		lo = 128
	} else {
		hi = 127
	}
	got, err = st.Claimable(ctx, lo, hi, batches)
	require.NoError(t, err)
	require.Equal(t, []bool{false, false, false}, got, "a row outside the range is not this broker's")

	_, err = pool.Exec(ctx, `UPDATE work_queue SET not_before = now() + interval '1 hour' WHERE resource_id = $1`, id)
	require.NoError(t, err)
	got, err = st.Claimable(ctx, 0, 255, batches)
	require.NoError(t, err)
	require.Equal(t, []bool{false, false, false}, got, "a row not yet due is not claimable")
}
