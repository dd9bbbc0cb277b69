package pipeline

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A broker adopts the leases a worker reports still running from another
// broker's session: only those still held under the reported claim_epoch.
// The adopted lease is then heartbeated by the adopter, no longer freed with
// the first holder, and the claim's result still applies (same epoch).
func TestAdopt_TakesOverLeasesStillHeldUnderTheirEpoch(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	a, b := f.res("leaf", "a"), f.res("leaf", "b")
	f.schedule(a, b)
	ts := f.claim("leaf", 10)
	require.Len(t, ts, 2)
	first, second := ts[0], ts[1]
	f.exec(`UPDATE work_queue SET heartbeat_at = now() - interval '1 hour'`)

	got, err := f.st.Adopt(f.ctx, "broker-b", []Held{{Key: first.Key, Epoch: first.ClaimEpoch},
		{Key: second.Key, Epoch: second.ClaimEpoch + 100}})
	require.NoError(t, err)
	require.Equal(t, []TaskKey{first.Key}, got, "a stale epoch is not adopted")
	require.Equal(t, "broker-b", scalar[string](f, `SELECT worker_id FROM work_queue WHERE resource_id = $1`, first.Key.ResourceID))
	require.Equal(t, all.WorkerID, scalar[string](f, `SELECT worker_id FROM work_queue WHERE resource_id = $1`, second.Key.ResourceID))
	require.Equal(t, 1, scalar[int](f, `SELECT count(*) FROM work_queue WHERE heartbeat_at > now() - interval '1 minute'`))

	n, err := f.st.Heartbeat(f.ctx, "broker-b", 0, 255, []TaskKey{first.Key})
	require.NoError(t, err)
	require.Equal(t, 1, n, "the adopter heartbeats it")
	f.finish(first.Result([]byte(`{"from":"the worker"}`)))
	require.Equal(t, "Ready", f.phase(first.Key.ResourceID), "the claim's result applies: its epoch is unchanged")
}

// A resumed list that names a task twice (two attempts of one stage carry
// the same key) adopts it once, and the rest of the list with it.
func TestAdopt_ATaskNamedTwiceIsAdoptedOnce(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	a, b := f.res("leaf", "a"), f.res("leaf", "b")
	f.schedule(a, b)
	ts := f.claim("leaf", 10)
	require.Len(t, ts, 2)
	h0, h1 := Held{Key: ts[0].Key, Epoch: ts[0].ClaimEpoch}, Held{Key: ts[1].Key, Epoch: ts[1].ClaimEpoch}
	stale := Held{Key: h0.Key, Epoch: h0.Epoch - 1} // an older attempt's ref: the newer epoch wins
	got, err := f.st.Adopt(f.ctx, "broker-b", []Held{h0, stale, h1, h0})
	require.NoError(t, err)
	require.ElementsMatch(t, []TaskKey{h0.Key, h1.Key}, got)
	require.Equal(t, 2, scalar[int](f, `SELECT count(*) FROM work_queue WHERE worker_id = 'broker-b'`))
}
