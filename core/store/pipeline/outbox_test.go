package pipeline

import (
	"context"
	"encoding/json"
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
