package broker

// The adoption of resumed tasks' leases by the WorkerService: a worker
// reconnecting from another broker's session lists what it still runs.

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/store/pipeline"
	"github.com/converge-run/converge/core/testlog"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// fakeAdopter records adoptions and releases. With gate set, Adopt signals
// entered and waits for gate to close.
type fakeAdopter struct {
	mu       sync.Mutex
	adopted  []pipeline.Held
	released []pipeline.TaskKey
	entered  chan struct{}
	gate     chan struct{}
}

func (f *fakeAdopter) Adopt(_ context.Context, _ string, tasks []pipeline.Held) ([]pipeline.TaskKey, error) {
	if f.gate != nil {
		f.entered <- struct{}{}
		<-f.gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.adopted = append(f.adopted, tasks...)
	keys := make([]pipeline.TaskKey, len(tasks))
	for i, t := range tasks {
		keys[i] = t.Key
	}
	return keys, nil
}

func (f *fakeAdopter) Release(_ context.Context, _ pipeline.Lease, keys []pipeline.TaskKey) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, keys...)
	return len(keys), nil
}

// resumedRef is what a worker's Subscribe lists for task k it still runs or
// holds the result of, from a session with broker-0 (claim_epoch 9),
// without its lease secret.
func resumedRef(k pipeline.TaskKey, final bool) *workerv1.TaskRef {
	id := taskID{key: k, epoch: 9, generation: 1, stage: workerv1.Stage_STAGE_WORK.String(), final: final}
	return &workerv1.TaskRef{TaskId: id.String(), Fence: &workerv1.Fence{LeaseToken: "broker-0", ClaimEpoch: 9}}
}

// resumedRef is resumedRef with the lease secret the cluster issued for it
// to worker w1 (broker-0 shares this broker's keys, as a cluster does).
func (b *handlerBundle) resumedRef(k pipeline.TaskKey, final bool) *workerv1.TaskRef {
	r := resumedRef(k, final)
	r.LeaseSecret = b.secret("w1", r.GetTaskId())
	return r
}

// adoptWith has the handler adopt resumed tasks' leases through st, and
// returns the in-flight set the adopted leases are heartbeated from.
func (b *handlerBundle) adoptWith(t *testing.T, st *fakeAdopter) *inflight {
	tasks := newInflight()
	b.svc.adopt = &adoptions{id: "broker-1", store: st, tasks: tasks, leases: b.svc.leases, log: testLog(t)}
	return tasks
}

// The final-stage tasks a worker resumes here from another broker's session
// are adopted and heartbeated with this broker's own; a result written for
// one ends its adoption, and when the session ends the rest are released.
func TestWorkerServiceWorkStream_AdoptsTheLeasesOfResumedTasks(t *testing.T) {
	t.Parallel()
	b := setupHandler(t)
	st := &fakeAdopter{}
	tasks := b.adoptWith(t, st)
	done, left, mid := task(1, pipeline.TaskReconcile).Key, task(2, pipeline.TaskReconcile).Key, task(3, pipeline.TaskReconcile).Key

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream := b.clients()["Connect"].WorkStream(ctx)
	require.NoError(t, stream.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Subscribe{Subscribe: &workerv1.Subscribe{
		WorkerId: "w1", Kinds: readiness("vpc"), Resumed: []*workerv1.TaskRef{b.resumedRef(done, true), b.resumedRef(left, true), b.resumedRef(mid, false)}}}}))
	_, err := stream.Receive()
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(tasks.keys()) == 2 }, 5*time.Second, time.Millisecond,
		"the two final-stage tasks are heartbeated; a mid-pipeline one cannot finish its task and is not adopted")
	require.Zero(t, tasks.count(), "adopted leases are no claims of this broker's: the drain does not wait for them")
	st.mu.Lock()
	require.Equal(t, []pipeline.Held{{Key: done, Epoch: 9}, {Key: left, Epoch: 9}}, st.adopted)
	st.mu.Unlock()

	b.svc.adopt.done(done) // its redelivered result was written
	require.ElementsMatch(t, []pipeline.TaskKey{left}, tasks.keys())
	require.NoError(t, stream.CloseRequest())
	_ = stream.CloseResponse()
	require.Eventually(t, func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return len(st.released) == 1 && st.released[0] == left
	}, 5*time.Second, time.Millisecond, "the session ended: the adopted lease whose result never came is released")
	require.Empty(t, tasks.keys())
}

// A resumed task's lease is adopted only with a lease secret issued for it
// to this worker: any worker credential could otherwise take over another
// broker's live lease (and the task would run twice). A ref without a
// secret (an older SDK), with a forged one, or with one issued to another
// worker is not adopted; the refusals are logged once, as counts.
func TestWorkerServiceWorkStream_AdoptsOnlyResumedTasksWhoseSecretVerifies(t *testing.T) {
	t.Parallel()
	b := setupHandler(t)
	var buf testlog.Buffer
	st := &fakeAdopter{}
	tasks := b.adoptWith(t, st)
	b.svc.adopt.log = zerolog.New(&buf)
	k := func() pipeline.TaskKey { return task(1, pipeline.TaskReconcile).Key }
	good, none, forged, others := k(), k(), k(), k()
	refForged := resumedRef(forged, true)
	refForged.LeaseSecret = newLeaseKeys(nil).issue(holderOf(principalFrom(context.Background()), "w1"), refForged.GetTaskId())
	refOthers := resumedRef(others, true)
	refOthers.LeaseSecret = b.secret("w2", refOthers.GetTaskId()) // handed to another worker

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream := b.clients()["Connect"].WorkStream(ctx)
	t.Cleanup(func() {
		_ = stream.CloseRequest()
		_ = stream.CloseResponse()
	})
	require.NoError(t, stream.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Subscribe{Subscribe: &workerv1.Subscribe{
		WorkerId: "w1", Kinds: readiness("vpc"),
		Resumed: []*workerv1.TaskRef{resumedRef(none, true), refForged, b.resumedRef(good, true), refOthers}}}}))
	_, err := stream.Receive()
	require.NoError(t, err)
	require.Eventually(t, func() bool { return b.svc.reg.count() == 1 }, 5*time.Second, time.Millisecond)
	st.mu.Lock()
	require.Equal(t, []pipeline.Held{{Key: good, Epoch: 9}}, st.adopted, "only the task whose secret verifies is adopted")
	st.mu.Unlock()
	require.Equal(t, []pipeline.TaskKey{good}, tasks.keys())
	require.Equal(t, 1, buf.Count("resumed tasks not adopted"), "one line for the refusals:\n%s", buf.String())
	require.Equal(t, 1, buf.Count(`"refused":2,"without_secret":1`), buf.String())
}

// A resumed task whose redelivered result is refused (its secret verifies
// with no key: issued by a process-own key of a broker that died before it
// read the cluster's) is released at once: its worker drops the result, and
// the adopted lease, heartbeated here, would otherwise hold the task until
// the worker's session ended. A refused result of a task not adopted here
// releases nothing.
func TestWorkerServiceWorkStream_ARefusedResultOfAnAdoptedTaskReleasesIt(t *testing.T) {
	t.Parallel()
	b := setupHandler(t)
	st := &fakeAdopter{}
	tasks := b.adoptWith(t, st)
	var written atomic.Int32
	b.sink.CompleteFn = func(*workerv1.StageComplete, func()) { written.Add(1) }
	adopted, other := task(1, pipeline.TaskReconcile).Key, task(2, pipeline.TaskReconcile).Key
	tid := func(k pipeline.TaskKey) string { return resumedRef(k, true).GetTaskId() }

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream := b.clients()["Connect"].WorkStream(ctx)
	t.Cleanup(func() { // before the server's Close, which waits for the stream
		_ = stream.CloseRequest()
		_ = stream.CloseResponse()
	})
	require.NoError(t, stream.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Subscribe{Subscribe: &workerv1.Subscribe{
		WorkerId: "w1", Kinds: readiness("vpc"), Resumed: []*workerv1.TaskRef{b.resumedRef(adopted, true)}}}}))
	_, err := stream.Receive()
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(tasks.keys()) == 1 }, 5*time.Second, time.Millisecond)

	foreign := newLeaseKeys(nil) // another process's own key
	holder := holderOf(principalFrom(context.Background()), "w1")
	for _, k := range []pipeline.TaskKey{other, adopted} {
		require.NoError(t, stream.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Complete{Complete: &workerv1.StageComplete{
			TaskId: tid(k), LeaseSecret: foreign.issue(holder, tid(k)),
			Result: &workerv1.StageComplete_Outcome{Outcome: &workerv1.Outcome{}}}}}))
	}
	require.Eventually(t, func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return len(st.released) == 1
	}, 5*time.Second, time.Millisecond, "the refused result's adopted lease is released")
	st.mu.Lock()
	require.Equal(t, []pipeline.TaskKey{adopted}, st.released, "only the adopted task's")
	st.mu.Unlock()
	require.Empty(t, tasks.keys(), "no longer heartbeated here")
	require.Zero(t, written.Load(), "neither refused result is written")
}

// A resumed task's lease is adopted before the worker's session is
// registered: once registered, its kinds are routable and the dispatcher
// could claim the task (its dead broker's lease was freed at once) under a
// new epoch, fencing out the result the worker is about to redeliver.
func TestWorkerServiceWorkStream_AdoptsBeforeTheWorkerIsRoutable(t *testing.T) {
	t.Parallel()
	b := setupHandler(t)
	st := &fakeAdopter{entered: make(chan struct{}, 1), gate: make(chan struct{})}
	b.adoptWith(t, st)
	k := task(1, pipeline.TaskReconcile).Key

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream := b.clients()["Connect"].WorkStream(ctx)
	require.NoError(t, stream.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Subscribe{Subscribe: &workerv1.Subscribe{
		WorkerId: "w1", Kinds: readiness("vpc"), Resumed: []*workerv1.TaskRef{b.resumedRef(k, true)}}}}))
	select {
	case <-st.entered:
	case <-ctx.Done():
		t.Fatal("the resumed task was never adopted")
	}
	require.Zero(t, b.svc.reg.count(), "the worker is not routable while its resumed leases are being adopted")
	close(st.gate)
	require.Eventually(t, func() bool { return b.svc.reg.count() == 1 }, 5*time.Second, time.Millisecond,
		"the session is registered once the adoption is done")
	require.NoError(t, stream.CloseRequest())
	_ = stream.CloseResponse()
}
