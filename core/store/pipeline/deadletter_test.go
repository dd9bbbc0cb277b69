package pipeline

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDrain_TransientFailuresDeadLetterAtTheKindsBound: the
// max_transient_attempts-th transient failure in a row finishes the task as
// a terminal failure (no queue row, nothing re-pends it), with a
// DeadLettered condition and event; 0 never dead-letters; a delete task is
// never dead-lettered; a spec edit is a fresh budget.
func TestDrain_TransientFailuresDeadLetterAtTheKindsBound(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	f.kind("fin", reactFinalizer)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	f.st.Clock = func() time.Time { return now }
	f.exec(`UPDATE kind_config SET max_transient_attempts = 3 WHERE kind IN ('leaf', 'fin')`)

	id := f.res("leaf", "a")
	f.schedule(id)
	for attempt := 1; attempt <= 2; attempt++ {
		f.finish(f.claimOne("leaf").Failure("upstream 503", false))
		q, ok := f.queued(id, TaskReconcile)
		require.True(t, ok, "attempt %d re-pends", attempt)
		require.Equal(t, attempt, q.Attempts)
		now = q.NotBefore.UTC()
	}
	f.finish(f.claimOne("leaf").Failure("upstream 503", false))
	require.False(t, f.isQueued(id), "the third transient failure is the last")
	s := f.state(id)
	require.Equal(t, "Failed", s.Phase)
	require.True(t, s.FailureTerminal, "dead-lettered: terminal for this generation")
	require.Zero(t, f.schedule(id), "the gate skips it")
	want := "dead-lettered after 3 transient failures in a row (max_transient_attempts 3): upstream 503"
	c, ok := f.condition(id, "Synced")
	require.True(t, ok)
	require.Equal(t, condRow{Status: "False", Reason: "DeadLettered", Message: want, LTT: c.LTT}, c)
	require.Equal(t, []string{"Warning ReconcileFailed", "Warning DeadLettered"}, f.events(id))

	f.set(id, `spec = '{"fixed":true}'`)
	require.Equal(t, 1, f.schedule(id), "a spec edit is a new generation with a fresh budget")
	f.finish(f.claimOne("leaf").Failure("upstream 503", false))
	q, ok := f.queued(id, TaskReconcile)
	require.True(t, ok)
	require.Equal(t, 1, q.Attempts)
	now = q.NotBefore.UTC()
	f.finish(f.claimOne("leaf").Result(json.RawMessage(`{}`)))
	require.Equal(t, "Ready", f.state(id).Phase)

	// 0 = never: well past any bound, it still re-pends.
	f.exec(`UPDATE kind_config SET max_transient_attempts = 0 WHERE kind = 'leaf'`)
	b := f.res("leaf", "b")
	f.schedule(b)
	for attempt := 1; attempt <= 5; attempt++ {
		f.finish(f.claimOne("leaf").Failure("flaky", false))
		q, ok := f.queued(b, TaskReconcile)
		require.True(t, ok, "attempt %d", attempt)
		now = q.NotBefore.UTC()
	}
	require.False(t, f.state(b).FailureTerminal)

	// A teardown is never dead-lettered: it keeps its resource DELETING.
	d := f.res("fin", "d")
	f.set(d, `finalizers = '{test/teardown}', deletion_requested_at = now()`)
	f.exec(`INSERT INTO work_queue (resource_id, task_type, shard_id, kind, version, generation, trigger)
	        SELECT id, 'delete', shard_id, kind, version, generation, 'deleteRequested' FROM resources WHERE id = $1`, d)
	for attempt := 1; attempt <= 4; attempt++ {
		ts, err := f.st.Claim(f.ctx, all, Batch{Kind: "fin", Version: "v1", TaskType: TaskDelete, Max: 1})
		require.NoError(t, err)
		require.Len(t, ts, 1, fmt.Sprintf("attempt %d is claimable", attempt))
		f.finish(ts[0].Failure("api timeout", false))
		q, ok := f.queued(d, TaskDelete)
		require.True(t, ok, "a failed delete always re-pends (attempt %d)", attempt)
		now = q.NotBefore.UTC()
	}
	require.Equal(t, "Deleting", f.phase(d))
}

// TestRecordLostAttempt: a worker lost mid-stage counts one attempt against
// the kind's live max_transient_attempts while the lease is the caller's;
// the max-th loss leaves attempts as is and says so, and the transient
// failure written then is dead-lettered by the drain (the bound counts lost
// workers and failures alike). A moved-on lease is ErrFenced; 0 counts and
// never says last.
func TestRecordLostAttempt(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	f.exec(`UPDATE kind_config SET max_transient_attempts = 3 WHERE kind = 'leaf'`)
	id := f.res("leaf", "poison")
	f.schedule(id)
	task := f.claimOne("leaf")

	for want := 1; want <= 2; want++ {
		n, limit, last, err := f.st.RecordLostAttempt(f.ctx, task)
		require.NoError(t, err)
		require.Equal(t, []any{want, 3, false}, []any{n, limit, last}, "loss %d", want)
	}
	n, _, last, err := f.st.RecordLostAttempt(f.ctx, task)
	require.NoError(t, err)
	require.True(t, last, "the third loss is the last")
	require.Equal(t, 2, n, "left for the drain to count the failure written now")
	f.finish(task.Failure("worker lost", false))
	require.False(t, f.isQueued(id))
	c, ok := f.condition(id, "Synced")
	require.True(t, ok)
	require.Equal(t, "DeadLettered", c.Reason)
	require.Equal(t, "dead-lettered after 3 transient failures in a row (max_transient_attempts 3): worker lost", c.Message)

	_, _, _, err = f.st.RecordLostAttempt(f.ctx, task)
	require.ErrorIs(t, err, ErrFenced, "the task is finished: its lease is gone")

	f.exec(`UPDATE kind_config SET max_transient_attempts = 0 WHERE kind = 'leaf'`)
	other := f.res("leaf", "other")
	f.schedule(other)
	task = f.claimOne("leaf")
	for want := 1; want <= 5; want++ {
		n, limit, last, err := f.st.RecordLostAttempt(f.ctx, task)
		require.NoError(t, err)
		require.Equal(t, []any{want, 0, false}, []any{n, limit, last})
	}
}
