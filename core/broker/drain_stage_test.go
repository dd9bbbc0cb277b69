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

// When the broker begins its drain, a stage no worker has taken is given
// back at once (errDraining, an abandon: the runner releases its lease for
// another broker) instead of waiting out the drain budget for a worker that
// is not coming — whether no worker serves its kind or every slot of the
// one that does is taken. A stage a worker is running keeps its budget.
func TestStager_DrainGivesBackStagesNoWorkerHasTaken(t *testing.T) {
	t.Parallel()
	kv := manifest.KindVersion{Kind: "vpc", Version: "v1"}
	cases := map[string]struct {
		workers func(reg *registry) // the registry the stage meets
	}{
		"no worker serves the kind": {workers: func(*registry) {}},
		"every slot is taken": {workers: func(reg *registry) {
			s := &session{id: "w1", holder: "w1", maxIn: 1, ready: map[manifest.KindVersion]bool{kv: true},
				out: make(chan *workerv1.WorkStreamResponse, 1), done: make(chan struct{})}
			reg.add(s)
			taken, _ := reg.acquireOrWait(kv) // the one slot, held by a stage already running
			require.Same(t, s, taken)
		}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			reg := newRegistry(testLog(t))
			c.workers(reg)
			draining := make(chan struct{})
			g := &stager{id: "b", reg: reg, completions: newCompletions(nil, testLog(t)), leases: newLeaseKeys(nil),
				clock: newFakeClock(), log: testLog(t), redeliveryWait: time.Minute, draining: draining}
			task := pipeline.Task{Key: pipeline.TaskKey{ResourceID: uuid.New(), TaskType: pipeline.TaskReconcile}, ClaimEpoch: 1,
				Resource: pipeline.Snapshot{Kind: "vpc", Version: "v1", Name: "queued"}}
			errc := make(chan error, 1)
			go func() {
				_, _, err := g.stage(context.Background(), task, store.Kind{}, workerv1.Stage_STAGE_WORK,
					manifest.ReactionDecl{Name: "work"}, true, &workerv1.StageTask_Work{Work: &workerv1.WorkRequest{}})
				errc <- err
			}()
			// The stage waits: the fake clock never ends its pause, and the
			// slot is never freed.
			require.Never(t, func() bool { return len(errc) > 0 }, 100*time.Millisecond, 10*time.Millisecond,
				"the stage waits for a worker until the drain begins")
			close(draining)
			var err error
			select {
			case err = <-errc:
			case <-time.After(30 * time.Second):
				t.Fatal("the stage kept waiting after the drain began")
			}
			require.ErrorIs(t, err, errDraining)
			require.ErrorIs(t, err, errAbandon, "given back, not failed")
			reg.mu.Lock()
			defer reg.mu.Unlock()
			require.Empty(t, reg.waiters, "its place in the slot queue is gone")
		})
	}
}
