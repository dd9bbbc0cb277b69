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

// The dead letter's condition and event come from the one item the fence
// keeps for a resource's reconcile: a batch carrying an earlier claim's
// failure beside the current claim's (a lease reaped and claimed again at a
// newer generation, both results arriving together) dead-letters with the
// current claim's message and generation, in whichever order they arrived.
// drain_dead_letters' DISTINCT ON (resource_id) never chooses between two.
func TestDrain_ADeadLetterIsTheCurrentClaimsFailure(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		reason       string
		currentFirst bool
	}{
		"stale first":   {reason: "the stale result arrived first", currentFirst: false},
		"current first": {reason: "the current result arrived first", currentFirst: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFx(t)
			f.kind("leaf", reactWorker)
			f.exec(`UPDATE kind_config SET max_transient_attempts = 1 WHERE kind = 'leaf'`)
			id := f.res("leaf", "a")
			f.schedule(id)
			stale := f.claimOne("leaf")
			// The lease is freed (a reaped member's), the spec edited, and
			// the task claimed again at the new generation.
			f.exec(`UPDATE work_queue SET worker_id = NULL, claim_epoch = NULL, leased_at = NULL, heartbeat_at = NULL
			         WHERE resource_id = $1`, id)
			f.set(id, `spec = '{"v":2}'`)
			f.schedule(id)
			current := f.claimOne("leaf")
			require.Greater(t, current.Generation, stale.Generation)

			rs := []Result{stale.Failure("old error", false), current.Failure("new error", false)}
			if tc.currentFirst {
				rs[0], rs[1] = rs[1], rs[0]
			}
			f.finish(rs...)
			c, ok := f.condition(id, "Synced")
			require.True(t, ok)
			require.Equal(t, "DeadLettered", c.Reason, tc.reason)
			require.Equal(t, "dead-lettered after 1 transient failures in a row (max_transient_attempts 1): new error", c.Message,
				tc.reason)
			require.Equal(t, current.Generation, scalar[int64](f,
				`SELECT observed_generation FROM resource_conditions WHERE resource_id = $1 AND type = 'Synced'`, id))
			require.Equal(t, 1, scalar[int](f,
				`SELECT count(*) FROM resource_events WHERE resource_id = $1 AND reason = 'DeadLettered'`, id), "one event")
		})
	}
}

// drain_dead_letters on its own: should a batch ever carry two reconcile
// items of one resource (the drain's fence keeps one today), the newest
// generation's failure is the dead letter, whatever the batch's order.
func TestDrainDeadLetters_TheNewestGenerationWins(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	id := f.res("leaf", "a")
	item := func(gen int, msg string) string {
		return fmt.Sprintf(`jsonb_populate_record(NULL::drain_item, jsonb_build_object(
		   'resource_id', $1::uuid, 'task_type', 'reconcile', 'generation', %d, 'error_message', '%s'))`, gen, msg)
	}
	f.exec(`SELECT drain_dead_letters(ARRAY[`+item(2, "new")+`, `+item(1, "old")+`, `+item(3, "newest")+`, `+item(1, "older")+
		`], ARRAY[$1::uuid], now())`, id)
	c, ok := f.condition(id, "Synced")
	require.True(t, ok)
	require.Equal(t, "newest", c.Message)
	require.Equal(t, int64(3), scalar[int64](f,
		`SELECT observed_generation FROM resource_conditions WHERE resource_id = $1 AND type = 'Synced'`, id))
	require.Equal(t, "newest", scalar[string](f,
		`SELECT string_agg(message, ',') FROM resource_events WHERE resource_id = $1 AND reason = 'DeadLettered'`, id),
		"one event, the newest's")
}
