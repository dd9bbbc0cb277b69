package broker

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/pipeline"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// drainingStager is a stager on reg whose drain begins when the returned
// channel is closed, and a goroutine running one stage of a vpc task; the
// stage's error arrives on errc.
func drainingStager(t *testing.T, reg *registry) (chan struct{}, chan error) {
	t.Helper()
	draining, errc := make(chan struct{}), make(chan error, 1)
	g := &stager{id: "b", reg: reg, completions: newCompletions(nil, testLog(t)), leases: newLeaseKeys(nil),
		clock: newFakeClock(), log: testLog(t), redeliveryWait: time.Minute, draining: draining}
	task := pipeline.Task{Key: pipeline.TaskKey{ResourceID: uuid.New(), TaskType: pipeline.TaskReconcile}, ClaimEpoch: 1,
		Resource: pipeline.Snapshot{Kind: "vpc", Version: "v1", Name: "queued"}}
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan struct{})
	t.Cleanup(func() { cancel(); <-ended }) // a stage still waiting ends with the test
	go func() {
		defer close(ended)
		_, _, err := g.stage(ctx, task, store.Kind{}, workerv1.Stage_STAGE_WORK,
			manifest.ReactionDecl{Name: "work"}, true, &workerv1.StageTask_Work{Work: &workerv1.WorkRequest{}})
		errc <- err
	}()
	return draining, errc
}

// queuedForABusyWorkerThenDraining: a ready vpc worker s with one slot, held
// by a stage already running; a second stage queued for that slot; then the
// broker's drain begins. The second stage's error arrives on errc.
func queuedForABusyWorkerThenDraining(t *testing.T) (*registry, *session, chan error) {
	t.Helper()
	kv := manifest.KindVersion{Kind: "vpc", Version: "v1"}
	reg := newRegistry(testLog(t))
	s := &session{id: "w1", holder: "w1", maxIn: 1, ready: map[manifest.KindVersion]bool{kv: true},
		out: make(chan *workerv1.WorkStreamResponse, 1), done: make(chan struct{})}
	reg.add(s)
	taken, _ := reg.acquireOrWait(kv)
	require.Same(t, s, taken)
	draining, errc := drainingStager(t, reg)
	require.Eventually(t, func() bool {
		reg.mu.Lock()
		defer reg.mu.Unlock()
		return len(reg.waiters) == 1
	}, 30*time.Second, time.Millisecond, "the stage queues for the slot")
	close(draining)
	return reg, s, errc
}

// When the broker begins its drain, a stage that no ready worker serves is
// given back at once (errDraining, an abandon: the runner releases its lease
// for another broker) instead of waiting out the drain budget for a worker
// that is not coming to a leaving broker.
func TestStager_DrainGivesBackAStageNoWorkerServes(t *testing.T) {
	t.Parallel()
	draining, errc := drainingStager(t, newRegistry(testLog(t)))
	// The fake clock never ends the stage's pause: it waits for a worker.
	require.Never(t, func() bool { return len(errc) > 0 }, 100*time.Millisecond, 10*time.Millisecond,
		"the stage waits for a worker until the drain begins")
	close(draining)
	select {
	case err := <-errc:
		require.ErrorIs(t, err, errDraining)
		require.ErrorIs(t, err, errAbandon, "given back, not failed")
	case <-time.After(30 * time.Second):
		t.Fatal("the stage kept waiting after the drain began")
	}
}

// A stage waiting for a busy worker's slot keeps waiting through the drain
// (the slot frees within the budget) and is handed over when it does.
func TestStager_DrainKeepsAStageWaitingForABusyWorker(t *testing.T) {
	t.Parallel()
	reg, s, errc := queuedForABusyWorkerThenDraining(t)
	require.Never(t, func() bool { return len(errc) > 0 || len(s.out) > 0 }, 100*time.Millisecond, 10*time.Millisecond,
		"the drain does not give back a stage a ready worker serves")
	reg.release(s) // the running stage finishes
	select {
	case <-s.out: // handed over
	case err := <-errc:
		t.Fatalf("the stage ended instead of reaching the worker: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the stage never reached the worker")
	}
}

// A stage waiting through the drain for a busy worker's slot is given back
// when that worker leaves and no other ready worker serves the kind.
func TestStager_DrainGivesBackAStageWhoseWorkerLeaves(t *testing.T) {
	t.Parallel()
	reg, s, errc := queuedForABusyWorkerThenDraining(t)
	require.Never(t, func() bool { return len(errc) > 0 }, 100*time.Millisecond, 10*time.Millisecond,
		"it waits while the worker is there")
	reg.remove(s) // the worker leaves
	select {
	case err := <-errc:
		require.ErrorIs(t, err, errDraining)
	case <-time.After(30 * time.Second):
		t.Fatal("the stage kept waiting after its worker left")
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	require.Empty(t, reg.waiters, "its place in the slot queue is gone")
}

// A stage whose worker vanished mid-stage, with no other worker for the
// kind, waits for the worker to reconnect and redeliver — until the drain
// begins: then it is given back instead of holding the drain for the
// redelivery window (a minute here, on a clock that never moves).
func TestStager_DrainGivesBackAStageWhoseWorkerVanished(t *testing.T) {
	t.Parallel()
	kv := manifest.KindVersion{Kind: "vpc", Version: "v1"}
	reg := newRegistry(testLog(t))
	s := &session{id: "w1", holder: "w1", maxIn: 1, ready: map[manifest.KindVersion]bool{kv: true},
		out: make(chan *workerv1.WorkStreamResponse, 1), done: make(chan struct{})}
	reg.add(s)
	draining, errc := drainingStager(t, reg)
	select {
	case <-s.out: // handed over
	case err := <-errc:
		t.Fatalf("the stage ended before reaching the worker: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the stage never reached the worker")
	}
	reg.remove(s) // the worker vanishes mid-stage
	close(s.done)
	require.Never(t, func() bool { return len(errc) > 0 }, 100*time.Millisecond, 10*time.Millisecond,
		"the stage waits for the lost worker's redelivery until the drain begins")
	close(draining)
	select {
	case err := <-errc:
		require.ErrorIs(t, err, errDraining)
	case <-time.After(30 * time.Second):
		t.Fatal("the stage kept waiting for the redelivery after the drain began")
	}
}
