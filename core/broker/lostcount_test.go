package broker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/pipeline"
	"github.com/converge-run/converge/core/testsignal"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
	"github.com/converge-run/converge/workerproto/gen/converge/worker/v1/workerv1connect"
)

// fakeAttempts records RecordLostAttempt calls; the limit-th is the last.
type fakeAttempts struct {
	mu    sync.Mutex
	calls int
	limit int
}

func (f *fakeAttempts) RecordLostAttempt(context.Context, pipeline.Task) (int, int, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return f.calls, f.limit, f.calls >= f.limit, nil
}

// A worker lost mid-stage while ready counts as an attempt; one that
// declared the kind unready first (a planned drain) does not; the bound
// ends the stage as a transient failure saying the worker was lost.
func TestStagerCountsLostWorkersButNotDrainedOnes(t *testing.T) {
	t.Parallel()
	kv := manifest.KindVersion{Kind: "vpc", Version: "v1"}
	reg := newRegistry(testLog(t))
	attempts := &fakeAttempts{limit: 2}
	g := &stager{id: "b", reg: reg, completions: newCompletions(nil, testLog(t)), leases: newLeaseKeys(nil),
		clock: newFakeClock(), log: testLog(t), redeliveryWait: time.Minute, attempts: attempts}
	newSess := func(id string) *session {
		s := &session{id: id, holder: id, maxIn: 4, ready: map[manifest.KindVersion]bool{kv: true},
			out: make(chan *workerv1.WorkStreamResponse, 4), done: make(chan struct{})}
		reg.add(s)
		return s
	}
	task := pipeline.Task{Key: pipeline.TaskKey{ResourceID: uuid.New(), TaskType: pipeline.TaskReconcile}, ClaimEpoch: 1,
		Resource: pipeline.Snapshot{Kind: "vpc", Version: "v1", Name: "poison"}}
	errc := make(chan error, 1)
	go func() {
		_, _, err := g.stage(context.Background(), task, store.Kind{}, workerv1.Stage_STAGE_WORK, manifest.ReactionDecl{Name: "work"}, true,
			&workerv1.StageTask_Work{Work: &workerv1.WorkRequest{}})
		errc <- err
	}()
	die := func(s *session, drain bool) *session {
		t.Helper()
		select {
		case <-s.out: // the stage reached s
		case <-time.After(30 * time.Second):
			t.Fatalf("the stage never reached %s", s.id)
		}
		if drain {
			reg.setReady(s, []*workerv1.KindReadiness{{Kind: &workerv1.KindVersion{Kind: kv.Kind, Version: kv.Version}, Ready: false}})
		}
		next := newSess(s.id + "-next") // its successor, ready: the stage moves there at once
		reg.remove(s)
		close(s.done)
		return next
	}
	s := die(newSess("w1"), true) // drained: not counted
	s = die(s, false)
	die(s, false)
	var err error
	select {
	case err = <-errc:
	case <-time.After(30 * time.Second):
		t.Fatal("the stage did not end at the bound")
	}
	var se *stageError
	require.True(t, errors.As(err, &se), "%v", err)
	require.False(t, se.terminal, "transient: the drain dead-letters it")
	require.Contains(t, se.msg, "worker lost: the worker running the work stage died or disconnected without a result, 2 times in a row")
	require.Equal(t, 2, attempts.calls, "the drained worker was not counted")
}

// A stage that finds no worker for its kind waits for one; that wait is not
// a lost worker. Each second of it was counted as one (against
// max_transient_attempts, so a kind with no ready worker for a few seconds
// dead-lettered its resources), and a worker that joined between the
// stager's look and its wait went unnoticed until the second was up.
func TestStagerDoesNotCountAWaitForAWorker(t *testing.T) {
	t.Parallel()
	kv := manifest.KindVersion{Kind: "vpc", Version: "v1"}
	reg := newRegistry(testLog(t))
	attempts := &fakeAttempts{limit: 1} // any count would end the stage
	clock := newFakeClock()
	g := &stager{id: "b", reg: reg, completions: newCompletions(nil, testLog(t)), leases: newLeaseKeys(nil),
		clock: clock, log: testLog(t), redeliveryWait: time.Minute, attempts: attempts}
	task := pipeline.Task{Key: pipeline.TaskKey{ResourceID: uuid.New(), TaskType: pipeline.TaskReconcile}, ClaimEpoch: 1,
		Resource: pipeline.Snapshot{Kind: "vpc", Version: "v1", Name: "patient"}}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, _, err := g.stage(ctx, task, store.Kind{}, workerv1.Stage_STAGE_WORK, manifest.ReactionDecl{Name: "work"}, true,
			&workerv1.StageTask_Work{Work: &workerv1.WorkRequest{}})
		errc <- err
	}()
	for range 3 { // three seconds with no worker
		require.Equal(t, time.Second, clock.waits.WaitOrTimeout(t), "the stage waits for a worker")
		clock.Advance(time.Second)
	}
	require.Equal(t, time.Second, clock.waits.WaitOrTimeout(t))
	s := &session{id: "late", holder: "late", maxIn: 4, ready: map[manifest.KindVersion]bool{kv: true},
		out: make(chan *workerv1.WorkStreamResponse, 4), done: make(chan struct{})}
	reg.add(s) // within the wait: the stage goes to it without the clock
	select {
	case <-s.out:
	case err := <-errc:
		t.Fatalf("the stage ended instead of reaching the worker: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the stage never reached the worker that joined")
	}
	cancel() // the worker never answers: end the stage
	require.Error(t, <-errc)
	attempts.mu.Lock()
	defer attempts.mu.Unlock()
	require.Zero(t, attempts.calls, "waiting for a worker is not a lost worker")
}

// relayPeer is a peer broker's WorkerService answering relays with answer
// (the n-th relay, from 1).
type relayPeer struct {
	workerv1connect.WorkerServiceClient
	mu     sync.Mutex
	n      int
	answer func(n int) (*workerv1.StageComplete, error)
}

func (p *relayPeer) RelayStage(context.Context, *connect.Request[workerv1.RelayStageRequest]) (*connect.Response[workerv1.RelayStageResponse], error) {
	p.mu.Lock()
	p.n++
	n := p.n
	p.mu.Unlock()
	c, err := p.answer(n)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&workerv1.RelayStageResponse{Complete: c}), nil
}

// A stage relayed to a peer counts a lost worker only when the peer says
// its worker was lost mid-stage (Aborted). A refused relay — the peer
// unreachable, or no worker of its serving the kind any more — never
// reached a worker: it is relayed again after a pause, uncounted, so a few
// seconds of refusals cannot dead-letter a resource as "worker lost".
func TestStagerCountsAPeersLostWorkerButNotARefusedRelay(t *testing.T) {
	t.Parallel()
	kv := manifest.KindVersion{Kind: "vpc", Version: "v1"}
	setup := func(t *testing.T, limit int, answer func(n int) (*workerv1.StageComplete, error)) (*stager, *fakeAttempts, *fakeClock, <-chan error) {
		mesh := newMesh("b", func() {}, testLog(t))
		peers := []*peer{{id: "p", kinds: map[manifest.KindVersion]bool{kv: true}, client: &relayPeer{answer: answer}}}
		mesh.peers.Store(&peers)
		attempts, clock := &fakeAttempts{limit: limit}, newFakeClock()
		g := &stager{id: "b", reg: newRegistry(testLog(t)), mesh: mesh, completions: newCompletions(nil, testLog(t)),
			leases: newLeaseKeys(nil), clock: clock, log: testLog(t), redeliveryWait: time.Minute, attempts: attempts}
		task := pipeline.Task{Key: pipeline.TaskKey{ResourceID: uuid.New(), TaskType: pipeline.TaskReconcile}, ClaimEpoch: 1,
			Resource: pipeline.Snapshot{Kind: "vpc", Version: "v1", Name: "x"}}
		errc := make(chan error, 1)
		go func() {
			_, _, err := g.stage(context.Background(), task, store.Kind{}, workerv1.Stage_STAGE_WORK, manifest.ReactionDecl{Name: "work"},
				true, &workerv1.StageTask_Work{Work: &workerv1.WorkRequest{}})
			errc <- err
		}()
		return g, attempts, clock, errc
	}

	t.Run("ARefusedRelayIsNotALoss", func(t *testing.T) {
		t.Parallel()
		_, attempts, clock, errc := setup(t, 1, func(n int) (*workerv1.StageComplete, error) { // any count would end the stage
			if n <= 3 {
				return nil, connect.NewError(connect.CodeUnavailable, errors.New("no worker on broker p serves vpc/v1"))
			}
			return &workerv1.StageComplete{Result: &workerv1.StageComplete_Outcome{Outcome: &workerv1.Outcome{}}}, nil
		})
		for range 3 {
			require.Equal(t, time.Second, clock.waits.WaitOrTimeout(t), "a refused relay pauses before the next")
			clock.Advance(time.Second)
		}
		select {
		case err := <-errc:
			require.NoError(t, err, "the fourth relay's result ends the stage")
		case <-time.After(testsignal.Timeout):
			t.Fatal("the stage never ended")
		}
		attempts.mu.Lock()
		defer attempts.mu.Unlock()
		require.Zero(t, attempts.calls, "a relay that never reached a worker is not a lost worker")
	})
	t.Run("APeersLostWorkerIsALoss", func(t *testing.T) {
		t.Parallel()
		_, attempts, _, errc := setup(t, 2, func(int) (*workerv1.StageComplete, error) {
			return nil, connect.NewError(connect.CodeAborted, errLostMidStage)
		})
		var err error
		select {
		case err = <-errc:
		case <-time.After(testsignal.Timeout):
			t.Fatal("the stage did not end at the bound")
		}
		var se *stageError
		require.True(t, errors.As(err, &se), "%v", err)
		require.Contains(t, se.msg, "worker lost: the worker running the work stage died or disconnected without a result, 2 times in a row")
		attempts.mu.Lock()
		defer attempts.mu.Unlock()
		require.Equal(t, 2, attempts.calls)
	})
}

// dispatchLocal, which runs a peer's relayed stage, tells a worker lost
// mid-stage (errLostMidStage) from one that drained (declared the kind
// unready) before it left, which is no loss.
func TestStagerDispatchLocalTellsALostWorkerFromADrainedOne(t *testing.T) {
	t.Parallel()
	kv := manifest.KindVersion{Kind: "vpc", Version: "v1"}
	for name, drained := range map[string]bool{"Lost": false, "Drained": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			reg := newRegistry(testLog(t))
			clock := newFakeClock()
			g := &stager{id: "b", reg: reg, completions: newCompletions(nil, testLog(t)), leases: newLeaseKeys(nil),
				clock: clock, log: testLog(t), redeliveryWait: time.Minute}
			s := &session{id: "w1", holder: "w1", maxIn: 1, ready: map[manifest.KindVersion]bool{kv: true},
				out: make(chan *workerv1.WorkStreamResponse, 1), done: make(chan struct{})}
			reg.add(s)
			type answer struct {
				c   *workerv1.StageComplete
				err error
			}
			got := make(chan answer, 1)
			go func() {
				c, err := g.dispatchLocal(context.Background(), kv, &workerv1.StageTask{TaskId: "t1",
					Resource: &workerv1.Resource{Kind: "vpc", Version: "v1"}})
				got <- answer{c, err}
			}()
			select {
			case <-s.out:
			case <-time.After(testsignal.Timeout):
				t.Fatal("the stage never reached the worker")
			}
			if drained {
				reg.setReady(s, []*workerv1.KindReadiness{{Kind: &workerv1.KindVersion{Kind: "vpc", Version: "v1"}, Ready: false}})
			}
			reg.remove(s)
			close(s.done)
			clock.Advance(clock.waits.WaitOrTimeout(t)) // no other worker: the redelivery wait runs out
			var a answer
			select {
			case a = <-got:
			case <-time.After(testsignal.Timeout):
				t.Fatal("dispatchLocal never returned")
			}
			require.Nil(t, a.c)
			if drained {
				require.NoError(t, a.err, "a drained worker is no loss")
			} else {
				require.ErrorIs(t, a.err, errLostMidStage)
			}
		})
	}
}
