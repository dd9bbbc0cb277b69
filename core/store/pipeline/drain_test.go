package pipeline

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// resState is the part of a resources row the drain writes.
type resState struct {
	Status          string
	SyncedGen       int64
	Generation      int64
	HealthOK        bool
	FailureGen      int64
	FailureTerminal bool
	Phase           string
	UpdatedAt       time.Time
	Finalizers      []string
}

func (f *fx) state(id uuid.UUID) resState {
	f.t.Helper()
	var s resState
	require.NoError(f.t, f.pool.QueryRow(f.ctx, `
SELECT coalesce(status::text, ''), synced_gen, generation, health_ok, failure_gen, failure_terminal, phase, updated_at, finalizers
  FROM resources WHERE id = $1`, id).Scan(&s.Status, &s.SyncedGen, &s.Generation, &s.HealthOK, &s.FailureGen,
		&s.FailureTerminal, &s.Phase, &s.UpdatedAt, &s.Finalizers))
	return s
}

type condRow struct {
	Status, Reason, Message string
	LTT                     time.Time
}

func (f *fx) condition(id uuid.UUID, typ string) (condRow, bool) {
	f.t.Helper()
	var c condRow
	err := f.pool.QueryRow(f.ctx, `SELECT status, coalesce(reason, ''), coalesce(message, ''), last_transition_time
	                                 FROM resource_conditions WHERE resource_id = $1 AND type = $2`, id, typ).
		Scan(&c.Status, &c.Reason, &c.Message, &c.LTT)
	if err != nil {
		return condRow{}, false
	}
	return c, true
}

func (f *fx) events(id uuid.UUID) []string {
	f.t.Helper()
	rows, err := f.pool.Query(f.ctx, `SELECT type || ' ' || reason FROM resource_events WHERE resource_id = $1 ORDER BY id`, id)
	require.NoError(f.t, err)
	var out []string
	for rows.Next() {
		var s string
		require.NoError(f.t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(f.t, rows.Err())
	return out
}

// repend queues a reconcile of id at its current generation (a resync).
func (f *fx) repend(id uuid.UUID) {
	f.t.Helper()
	f.exec(`INSERT INTO work_queue (resource_id, task_type, shard_id, kind, version, generation, trigger)
	        SELECT id, 'reconcile', shard_id, kind, version, generation, 'resync' FROM resources WHERE id = $1`, id)
}

func healthy(b bool) *bool { return &b }

func TestDrain_SuccessAdvancesSyncAndDeletesTheTask(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	id := f.res("leaf", "a")
	f.schedule(id)
	task := f.claimOne("leaf")
	f.finish(task.Result(json.RawMessage(`{"vpc_id":"v-1"}`)))

	s := f.state(id)
	require.Equal(t, "Ready", s.Phase)
	require.EqualValues(t, 1, s.SyncedGen)
	require.JSONEq(t, `{"vpc_id":"v-1"}`, s.Status)
	require.False(t, f.isQueued(id), "the finished row is deleted")
	require.Empty(t, f.events(id), "no event for a plain leaf success")
	require.Zero(t, scalar[int](f, `SELECT count(*) FROM resource_conditions`), "nothing reported, no condition rows")
	require.Zero(t, scalar[int](f, `SELECT count(*) FROM work_outbox`))
}

func TestDrain_NoOpResultWritesNothing(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	id := f.res("leaf", "a")
	f.schedule(id)
	f.finish(f.claimOne("leaf").Result(json.RawMessage(`{"x":1}`)))
	before := f.state(id)
	xmin := scalar[string](f, `SELECT xmin::text FROM resources WHERE id = $1`, id)

	f.repend(id)
	f.finish(f.claimOne("leaf").Result(json.RawMessage(`{"x":1}`)))
	require.Equal(t, before, f.state(id))
	require.Equal(t, xmin, scalar[string](f, `SELECT xmin::text FROM resources WHERE id = $1`, id), "the no-op gate skipped the write")
	require.False(t, f.isQueued(id))
}

func TestDrain_FenceDiscardsAStaleResult(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	id := f.res("leaf", "a")
	f.schedule(id)
	task := f.claimOne("leaf")

	stale := task.Result(json.RawMessage(`{"stale":true}`))
	stale.ClaimEpoch = task.ClaimEpoch - 1
	f.finish(stale)
	require.Equal(t, "Reconciling", f.phase(id), "a result for another claim_epoch is discarded")
	q, ok := f.queued(id, TaskReconcile)
	require.True(t, ok)
	require.True(t, q.Leased, "the live claim keeps its row")
	require.Zero(t, scalar[int](f, `SELECT count(*) FROM work_outbox`), "the stale row was popped")

	f.finish(task.Result(json.RawMessage(`{"stale":false}`)))
	require.Equal(t, "Ready", f.phase(id))
}

func TestDrain_CoalescesSeveralResultsForOneResource(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactOperate)
	id := f.res("leaf", "a")
	f.schedule(id)
	op, err := f.st.EnqueueOperation(f.ctx, id, "flip", json.RawMessage(`{"to":"on"}`))
	require.NoError(t, err)
	task := f.claimOne("leaf")
	ops, err := f.st.Claim(f.ctx, all, Batch{Kind: "leaf", Version: "v1", TaskType: TaskOperate, Max: 10})
	require.NoError(t, err)
	require.Len(t, ops, 1)
	require.Equal(t, "Running", scalar[string](f, `SELECT state FROM resource_operations WHERE id = $1`, op))

	out := ops[0].Result(nil)
	out.OperationOutput = json.RawMessage(`{"flipped":true}`)
	dup := task.Result(json.RawMessage(`{"n":1}`))
	f.finish(task.Result(json.RawMessage(`{"n":1}`)), dup, out)

	require.Equal(t, "Ready", f.phase(id))
	require.Equal(t, "Succeeded", scalar[string](f, `SELECT state FROM resource_operations WHERE id = $1`, op))
	require.JSONEq(t, `{"flipped":true}`, scalar[string](f, `SELECT output::text FROM resource_operations WHERE id = $1`, op))
	require.Zero(t, scalar[int](f, `SELECT count(*) FROM work_queue`))
}

func TestDrain_FailedOperationRecordsTheError(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactOperate)
	id := f.res("leaf", "a")
	op, err := f.st.EnqueueOperation(f.ctx, id, "flip", nil)
	require.NoError(t, err)
	_, err = f.st.EnqueueOperation(f.ctx, id, "nope", nil)
	require.Error(t, err, "a verb the kind does not declare")
	ops, err := f.st.Claim(f.ctx, all, Batch{Kind: "leaf", Version: "v1", TaskType: TaskOperate, Max: 10})
	require.NoError(t, err)
	require.Len(t, ops, 1)
	require.Equal(t, op, ops[0].Key.OpID)
	require.Equal(t, "operation", ops[0].Trigger)
	f.finish(ops[0].Failure("device busy", false))
	var state, msg string
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT state, error FROM resource_operations WHERE id = $1 AND finished_at IS NOT NULL`, op).Scan(&state, &msg))
	require.Equal(t, "Failed", state)
	require.Equal(t, "device busy", msg)
}

func TestDrain_TransientFailureRetriesWithBackoffTerminalStops(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	f.st.Clock = func() time.Time { return now }

	id := f.res("leaf", "a")
	f.schedule(id)
	cases := []struct {
		reason   string
		terminal bool
		attempts int
		delay    time.Duration
	}{
		{reason: "first transient failure: retry after 1s", attempts: 1, delay: time.Second},
		{reason: "second transient failure: backoff doubles", attempts: 2, delay: 2 * time.Second},
		{reason: "third transient failure: doubles again", attempts: 3, delay: 4 * time.Second},
	}
	for _, tc := range cases {
		task := f.claimOne("leaf")
		f.finish(task.Failure("quota exceeded", tc.terminal))
		q, ok := f.queued(id, TaskReconcile)
		require.True(t, ok, tc.reason)
		require.False(t, q.Leased, tc.reason)
		require.Equal(t, tc.attempts, q.Attempts, tc.reason)
		require.Equal(t, now.Add(tc.delay), q.NotBefore.UTC(), tc.reason)
		require.Empty(t, f.claim("leaf", 1), "not due before the backoff elapses: %s", tc.reason)
		s := f.state(id)
		require.Equal(t, "Failed", s.Phase, tc.reason)
		require.False(t, s.FailureTerminal, tc.reason)
		now = now.Add(tc.delay)
	}
	require.Equal(t, []string{"Warning ReconcileFailed"}, f.events(id), "one Warning for the first failure of a generation")
	c, ok := f.condition(id, "Synced")
	require.True(t, ok)
	require.Equal(t, condRow{Status: "False", Reason: "ReconcileError", Message: "quota exceeded", LTT: c.LTT}, c)

	task := f.claimOne("leaf")
	f.finish(task.Failure("invalid cidr", true))
	require.False(t, f.isQueued(id), "a terminal failure stops the retries")
	s := f.state(id)
	require.True(t, s.FailureTerminal)
	require.Equal(t, "Failed", s.Phase)
	require.Zero(t, f.schedule(id), "the gate skips a terminal failure for the live spec")
	c2, _ := f.condition(id, "Synced")
	require.Equal(t, "invalid cidr", c2.Message)
	require.Equal(t, c.LTT, c2.LTT, "same status: last_transition_time unchanged")

	f.set(id, `spec = '{"cidr":"10.0.0.0/8"}'`)
	require.Equal(t, 1, f.schedule(id), "a spec fix clears the way")
	f.finish(f.claimOne("leaf").Result(json.RawMessage(`{}`)))
	s = f.state(id)
	require.Equal(t, "Ready", s.Phase)
	require.Zero(t, s.FailureGen)
	require.False(t, s.FailureTerminal)
	_, ok = f.condition(id, "Synced")
	require.False(t, ok, "a clean reconcile clears the stored Synced=False")
}

func TestDrain_ConditionsAreWrittenOnTransitionOnly(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	f.st.Clock = func() time.Time { return now }
	id := f.res("leaf", "a")

	report := func(status, msg string) condRow {
		t.Helper()
		f.repend(id)
		task := f.claimOne("leaf")
		r := task.Result(nil)
		r.HealthOK = healthy(status != "False")
		r.Conditions = []Condition{{Type: "Ready", Status: status, Reason: "Probe", Message: msg}}
		f.finish(r)
		c, ok := f.condition(id, "Ready")
		require.True(t, ok)
		return c
	}
	c1 := report("False", "unreachable")
	require.Equal(t, "Degraded", f.phase(id))
	now = now.Add(time.Minute)
	c2 := report("False", "still unreachable")
	require.Equal(t, c1.LTT, c2.LTT, "message changed, status did not: no transition")
	require.Equal(t, "still unreachable", c2.Message)
	now = now.Add(time.Minute)
	c3 := report("True", "ok")
	require.Equal(t, now, c3.LTT.UTC(), "status changed: a transition")
	require.Equal(t, "Ready", f.phase(id))
}

// A handler that reports one condition type twice in a result (a list
// built by appending, say) gets the last of them stored, whatever the
// list's length: the list reads as updates applied in turn.
func TestDrain_ARepeatedConditionTypeKeepsTheLastReported(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		reason string
		before int // conditions of other types before the repeated pair
	}{
		"alone":          {reason: "two entries of one type", before: 0},
		"in a long list": {reason: "among enough others that the sort is not an insertion sort", before: 12},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFx(t)
			f.kind("leaf", reactWorker)
			id := f.res("leaf", "a")
			f.schedule(id)
			r := f.claimOne("leaf").Result(nil)
			for i := range tc.before {
				r.Conditions = append(r.Conditions, Condition{Type: fmt.Sprintf("Extra%02d", i), Status: "True"})
			}
			r.Conditions = append(r.Conditions,
				Condition{Type: "Ready", Status: "False", Reason: "Probe", Message: "first"},
				Condition{Type: "Ready", Status: "True", Reason: "Probe", Message: "last"})
			f.finish(r)
			c, ok := f.condition(id, "Ready")
			require.True(t, ok)
			require.Equal(t, []string{"True", "last"}, []string{c.Status, c.Message}, tc.reason)
		})
	}
}

func TestDrain_ResourceThatMovedOnIsRescheduled(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	id := f.res("leaf", "a")
	f.schedule(id)
	task := f.claimOne("leaf")
	f.set(id, `spec = '{"v":2}'`)
	require.Zero(t, f.schedule(id), "leased: the gate leaves the running task alone")

	f.finish(task.Result(json.RawMessage(`{"seen":1}`)))
	s := f.state(id)
	require.EqualValues(t, 1, s.SyncedGen, "synced to the task's generation")
	require.Equal(t, "Reconciling", s.Phase)
	q, ok := f.queued(id, TaskReconcile)
	require.True(t, ok, "re-scheduled for the generation it moved on to")
	require.EqualValues(t, 2, q.Generation)
	require.False(t, q.Leased)
}

func TestDrain_DeleteTaskStripsItsFinalizerOrRetries(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("fin", reactFinalizer)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	f.st.Clock = func() time.Time { return now }
	id := f.res("fin", "a")
	f.set(id, `finalizers = '{test/teardown,other/keep}', deletion_requested_at = now()`)
	f.exec(`INSERT INTO work_queue (resource_id, task_type, shard_id, kind, version, generation, trigger)
	        SELECT id, 'delete', shard_id, kind, version, generation, 'deleteRequested' FROM resources WHERE id = $1`, id)
	claimDelete := func() Task {
		ts, err := f.st.Claim(f.ctx, all, Batch{Kind: "fin", Version: "v1", TaskType: TaskDelete, Max: 1})
		require.NoError(t, err)
		require.Len(t, ts, 1)
		return ts[0]
	}

	f.finish(claimDelete().Failure("api timeout", false))
	q, ok := f.queued(id, TaskDelete)
	require.True(t, ok, "a failed delete is re-pended")
	require.Equal(t, 1, q.Attempts)
	require.Equal(t, now.Add(time.Second), q.NotBefore.UTC())
	require.Equal(t, []string{"test/teardown", "other/keep"}, f.state(id).Finalizers)
	require.Equal(t, []string{"Warning DeleteFailed"}, f.events(id))

	now = now.Add(time.Second)
	f.finish(claimDelete().Result(nil))
	require.Equal(t, []string{"other/keep"}, f.state(id).Finalizers, "the kind's finalizer is stripped")
	_, ok = f.queued(id, TaskDelete)
	require.False(t, ok)
	require.Equal(t, "Deleting", f.phase(id), "a finalizer the task did not own keeps the row, for the reaper's sweep")
}

// TestDrain_ExplainPrunesANarrowRangeToOnePartition runs a drain of shards
// 0-5 under auto_explain (nested statements, logged to the client) and checks
// every plan that touches work_outbox or work_queue reads partition p0 only.
func TestDrain_ExplainPrunesANarrowRangeToOnePartition(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	var ids []uuid.UUID
	for i := range 3 {
		ids = append(ids, f.res("leaf", fmt.Sprintf("r%d", i), withID(f.idInShards(0, 5))))
	}
	f.schedule(ids...)
	ts := f.claim("leaf", 10)
	require.Len(t, ts, 3)
	var rs []Result
	for _, task := range ts {
		rs = append(rs, task.Result(json.RawMessage(`{"ok":true}`)))
	}
	require.NoError(t, f.st.AppendOutbox(f.ctx, rs...))

	conn, plans := explainedConn(f)
	var n int
	require.NoError(t, conn.QueryRow(f.ctx, `SELECT drain_outbox_batch(1000, 0, 5)`).Scan(&n))
	require.Equal(t, 3, n)
	require.Equal(t, "Ready", f.phase(ids[0]))

	touched := map[string]bool{}
	for _, p := range *plans {
		for _, table := range []string{"work_outbox", "work_queue"} {
			if strings.Contains(p, table+"_p") {
				touched[table] = true
				requireOnlyPartition(t, p, table, 0)
			}
		}
	}
	require.True(t, touched["work_outbox"], "the pop's plan was seen")
	require.True(t, touched["work_queue"], "the fence's plan was seen")
}
