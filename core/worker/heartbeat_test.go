package worker

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// A heartbeat lists every running task; with a small message limit and
// many tasks in flight it is cut into heartbeats that each fit the limit,
// every task named once and in order. One heartbeat with all 60 refs was
// ~3 KiB, which a worker at the 1 KiB minimum refused to send itself, and
// lost its session at every beat (a CI run of
// TestStageTasks_BatchesFitTheWorkersMessageLimit under -race).
func TestHeartbeats_FitTheSessionsMessageLimit(t *testing.T) {
	t.Parallel()
	w, err := New("http://127.0.0.1:1", Options{MaxMessageBytes: 1024}, nopProvider{})
	require.NoError(t, err)
	var refs []*workerv1.TaskRef
	for i := range 60 {
		refs = append(refs, &workerv1.TaskRef{TaskId: fmt.Sprintf("%036d|reconcile|%d", i, i),
			ResourceId: fmt.Sprintf("%036d", i), Fence: &workerv1.Fence{LeaseToken: "all-vm-28555-859545", ClaimEpoch: int64(1e9 + i)}})
	}
	whole := proto.Size(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Heartbeat{
		Heartbeat: &workerv1.Heartbeat{Tasks: refs}}})
	require.Greater(t, whole, 1024, "the case needs a heartbeat over the limit")

	parts := w.heartbeats(refs)
	require.Greater(t, len(parts), 1)
	var got []*workerv1.TaskRef
	for i, p := range parts {
		n := proto.Size(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Heartbeat{Heartbeat: &workerv1.Heartbeat{Tasks: p}}})
		require.LessOrEqual(t, n, 1024, "heartbeat %d of %d", i, len(parts))
		require.NotEmpty(t, p)
		got = append(got, p...)
	}
	require.Equal(t, refs, got)

	// No tasks is one empty beat (the keepalive).
	require.Len(t, w.heartbeats(nil), 1)
	require.Empty(t, w.heartbeats(nil)[0])

	// At the default limit one heartbeat holds them all; the broker's
	// smaller limit, named when the session opens, cuts them too.
	w2, err := New("http://127.0.0.1:1", Options{}, nopProvider{})
	require.NoError(t, err)
	require.Len(t, w2.heartbeats(refs), 1)
	w2.setSubscribed(true, 1024)
	require.Greater(t, len(w2.heartbeats(refs)), 1)
}
