package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestAppendOutbox_WritesResultsAndWakesTheDrainer(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	f.schedule(f.res("leaf", "a"), f.res("leaf", "b"))
	ts := f.claim("leaf", 10)
	require.Len(t, ts, 2)

	listener, err := f.pool.Acquire(f.ctx)
	require.NoError(t, err)
	defer listener.Release()
	_, err = listener.Exec(f.ctx, `LISTEN outbox_ready`)
	require.NoError(t, err)

	bad := ts[0].Result(nil)
	bad.Conditions = []Condition{{Type: "Ready", Status: "Maybe"}}
	require.Error(t, f.st.AppendOutbox(f.ctx, bad, ts[1].Result(nil)), "a condition status outside True/False/Unknown")
	require.Zero(t, scalar[int](f, `SELECT count(*) FROM work_outbox`), "nothing of a rejected batch is written")

	ok := ts[0].Result(json.RawMessage(`{"x":1}`))
	ok.Conditions = []Condition{{Type: "Ready", Status: "True", Reason: "Up"}}
	failed := ts[1].Failure("boom", true)
	require.NoError(t, f.st.AppendOutbox(f.ctx, ok, failed))
	var n, advanced, terminal int
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT count(*), count(*) FILTER (WHERE advance_synced_gen),
	        count(*) FILTER (WHERE error_terminal AND error_message = 'boom') FROM work_outbox`).Scan(&n, &advanced, &terminal))
	require.Equal(t, []int{2, 2, 1}, []int{n, advanced, terminal})

	ctx, cancel := context.WithTimeout(f.ctx, 5*time.Second)
	defer cancel()
	note, err := listener.Conn().WaitForNotification(ctx)
	require.NoError(t, err, "notify_gated('outbox_ready') wakes the drainer")
	require.Equal(t, "outbox_ready", note.Channel)
}

// Validate's contract: a result it passes, the outbox insert takes, so a
// worker's bad result is refused alone and never fails the results batched
// beside it. Postgres stores neither a NUL character (in text, or as \u0000
// in jsonb) nor invalid UTF-8; a status with \u0000, an error message with a
// NUL byte (a program's output) or a condition carrying one passed Validate
// and failed the whole batch, again on every retry.
func TestResultValidate_PassesOnlyWhatTheInsertTakes(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	cases := map[string]func(*Result){
		"status with \\u0000": func(r *Result) { r.Status = json.RawMessage(`{"out":"a\u0000b"}`) },
		"error with NUL":      func(r *Result) { r.Error = "exit 1: a\x00b" },
		"error not UTF-8":     func(r *Result) { r.Error = "exit 1: \xff" },
		"condition with NUL":  func(r *Result) { r.Conditions = []Condition{{Type: "Ready", Status: "False", Message: "a\x00b"}} },
		"output with \\u0000": func(r *Result) { r.OperationOutput = json.RawMessage(`"\u0000"`) },
		"finalizer with NUL":  func(r *Result) { r.Finalizer = "a\x00" },
		// jsonb refuses an escaped surrogate that is not half of a pair
		// (encoding/json.Valid takes it).
		"status with a lone surrogate": func(r *Result) { r.Status = json.RawMessage(`{"name":"\ud800"}`) },
		"output with a pair reversed":  func(r *Result) { r.OperationOutput = json.RawMessage(`["\ude00\ud83d"]`) },
		"status not UTF-8":             func(r *Result) { r.Status = json.RawMessage("{\"a\":\"\xff\"}") },
	}
	for i := range len(cases) {
		f.schedule(f.res("leaf", fmt.Sprintf("r%d", i)))
	}
	ts := f.claim("leaf", 100)
	require.Len(t, ts, len(cases))
	i, refused := 0, 0
	for name, mutate := range cases {
		r := ts[i].Result(nil)
		i++
		mutate(&r)
		if err := r.Validate(); err != nil {
			require.ErrorIs(t, err, ErrInvalidResult, name)
			refused++
			continue
		}
		require.NoError(t, f.st.AppendOutbox(f.ctx, r), "%s: Validate passed it, so the insert takes it", name)
	}
	require.Equal(t, len(cases), refused, "each case is one the insert refuses")
	f.schedule(f.res("leaf", "path"))
	r := f.claimOne("leaf").Result(json.RawMessage(`{"path":"C:\\u0000"}`))
	require.NoError(t, r.Validate(), "an escaped backslash before the text u0000 is no NUL")
	require.NoError(t, f.st.AppendOutbox(f.ctx, r))
}
