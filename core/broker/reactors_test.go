package broker

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/cluster"
	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/lifecycle"
	"github.com/converge-run/converge/core/testlog"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

var sinkKind = store.Kind{Name: "sink", Version: "v1", IsReactor: true, Manifest: manifest.KindManifest{
	Kind: "sink", Version: "v1", Reactions: []manifest.ReactionDecl{{Name: "record", Trigger: manifest.TriggerReactor}}}}

func delivery(snapshot string) lifecycle.Delivery {
	return lifecycle.Delivery{Key: lifecycle.Key{ResourceID: uuid.New(), Transition: "synced", Generation: 3, Binding: "audit"},
		Reactor: "sink", WatchKind: "vpc", ClaimEpoch: 7, Snapshot: json.RawMessage(snapshot)}
}

func setupReactors(t *testing.T) (*reactorDispatcher, *fakeClock, *fakeDeliveries, *fakeSender) {
	t.Helper()
	clock := newFakeClock()
	ds := &fakeDeliveries{
		ClaimFn: func(context.Context, string, []string, int, int, int) ([]lifecycle.Delivery, error) { return nil, nil },
		AckFn:   func(context.Context, lifecycle.Delivery) (bool, error) { return true, nil },
		HeartbeatFn: func(_ context.Context, _ string, ds []lifecycle.Delivery) (int, error) {
			return len(ds), nil
		},
	}
	sender := &fakeSender{DispatchFn: func(context.Context, manifest.KindVersion, *workerv1.StageTask) (*workerv1.StageComplete, error) {
		return &workerv1.StageComplete{}, nil
	}}
	r := &reactorDispatcher{id: "broker-1", deliveries: ds, routes: &fakeRoutes{ReactorKindsFn: func() []manifest.KindVersion {
		return []manifest.KindVersion{{Kind: "sink", Version: "v1"}}
	}},
		sender: sender, kinds: fakeKinds{sinkKind}, shards: fakeShards{0, 255, true}, wakes: newFakeWaker(), freed: func() {},
		cap: 100, pollMin: testPollMin, every: 5 * time.Second, clock: clock, log: testLog(t)}
	r.testSignals.delivered.Init()
	return r, clock, ds, sender
}

func TestReactorDispatcher(t *testing.T) {
	t.Parallel()

	t.Run("StopsImmediately", func(t *testing.T) {
		t.Parallel()
		r, clock, _, _ := setupReactors(t)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		clock.waits.WaitOrTimeout(t)
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatal("reactor dispatcher did not stop")
		}
	})

	// A range handed back claims at once, not at the next idle poll (the
	// fake clock never moves here).
	t.Run("ClaimsAtOnceWhenItsRangeIsHandedBack", func(t *testing.T) {
		t.Parallel()
		r, clock, ds, _ := setupReactors(t)
		shards := cluster.NewShardSet(shard.Range{})
		r.shards = shards
		ds.ClaimFn = func(context.Context, string, []string, int, int, int) ([]lifecycle.Delivery, error) {
			return []lifecycle.Delivery{delivery(`{"id":"r1","name":"vpc-1"}`)}, nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = r.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		clock.waits.WaitOrTimeout(t) // idle: it owns nothing
		shards.Set(shard.Between(0, 255))
		require.True(t, r.testSignals.delivered.WaitOrTimeout(t), "the returned range is claimed from without waiting for the idle timer")
	})

	t.Run("ClaimsDeliversAndAcks", func(t *testing.T) {
		t.Parallel()
		r, _, ds, sender := setupReactors(t)
		var claims atomic.Int32
		ds.ClaimFn = func(_ context.Context, _ string, kinds []string, _, _, limit int) ([]lifecycle.Delivery, error) {
			require.Equal(t, []string{"sink"}, kinds)
			if claims.Add(1) == 1 {
				require.Equal(t, 100, limit, "room is the cap less what is in flight")
				return []lifecycle.Delivery{delivery(`{"id":"r1","name":"vpc-1"}`)}, nil
			}
			return nil, nil
		}
		var task *workerv1.StageTask
		sender.DispatchFn = func(_ context.Context, kv manifest.KindVersion, st *workerv1.StageTask) (*workerv1.StageComplete, error) {
			require.Equal(t, manifest.KindVersion{Kind: "sink", Version: "v1"}, kv)
			task = st
			return &workerv1.StageComplete{TaskId: st.GetTaskId()}, nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { _ = r.Run(ctx) }()
		require.True(t, r.testSignals.delivered.WaitOrTimeout(t), "a successful reaction is acknowledged")
		require.Equal(t, workerv1.Stage_STAGE_REACT, task.GetStage())
		require.Equal(t, "record", task.GetReaction())
		require.Equal(t, "vpc-1", task.GetResource().GetName())
		require.Equal(t, int64(7), task.GetFence().GetClaimEpoch())
		require.Equal(t, "sink", task.GetResource().GetKind(), "the reactor's kind routes the task")
		require.Equal(t, "vpc", task.GetReact().GetWatchKind(), "the watched resource's kind travels beside it")
	})
}

func TestReactorDispatcher_AtItsCapClaimsAgainWhenADeliveryEnds(t *testing.T) {
	t.Parallel()
	r, _, ds, sender := setupReactors(t)
	r.cap = 1
	var claims atomic.Int32
	ds.ClaimFn = func(_ context.Context, _ string, _ []string, _, _, limit int) ([]lifecycle.Delivery, error) {
		if limit == 0 || claims.Load() == 2 {
			return nil, nil
		}
		claims.Add(1)
		return []lifecycle.Delivery{delivery(`{"id":"r1"}`)}, nil
	}
	release := make(chan struct{})
	sender.DispatchFn = func(ctx context.Context, _ manifest.KindVersion, st *workerv1.StageTask) (*workerv1.StageComplete, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return &workerv1.StageComplete{TaskId: st.GetTaskId()}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	require.Eventually(t, func() bool { return claims.Load() == 1 }, 5*time.Second, time.Millisecond)
	close(release)
	// No clock advance and no routing change: only the first delivery's end
	// can wake the dispatcher to use the room it left.
	require.True(t, r.testSignals.delivered.WaitOrTimeout(t))
	require.True(t, r.testSignals.delivered.WaitOrTimeout(t), "the second delivery was claimed once the first ended")
	require.EqualValues(t, 2, claims.Load())
}

// A delivery is acknowledged only when its reactor succeeded; anything else
// leaves it claimed, to be re-armed when the claim lapses.
func TestReactorDispatcherDeliver_AcksOnlyOnSuccess(t *testing.T) {
	t.Parallel()
	type dispatched struct {
		c   *workerv1.StageComplete
		err error
	}
	cases := map[string]struct {
		reason   string
		snapshot string
		kinds    fakeKinds
		sent     dispatched
		ackErr   error
		wantAck  bool
		wantSent bool
		wantLog  string // in what deliver logged
	}{
		"SuccessIsAcked": {
			reason: "the reactor succeeded", snapshot: `{"id":"r1"}`, kinds: fakeKinds{sinkKind},
			sent: dispatched{c: &workerv1.StageComplete{}}, wantAck: true, wantSent: true,
		},
		"ReactorErrorIsNotAcked": {
			reason: "a failed reactor is retried after its claim lapses", snapshot: `{"id":"r1"}`, kinds: fakeKinds{sinkKind},
			sent:     dispatched{c: &workerv1.StageComplete{Result: &workerv1.StageComplete_Error{Error: &workerv1.TaskError{Message: "sink down"}}}},
			wantSent: true,
		},
		"TerminalErrorIsDropped": {
			reason:   "a reactor's terminal failure (or a snapshot over the worker's message limit) would fail the same way on every redelivery: dropped, not retried forever",
			snapshot: `{"id":"r1"}`, kinds: fakeKinds{sinkKind},
			sent: dispatched{c: &workerv1.StageComplete{Result: &workerv1.StageComplete_Error{Error: &workerv1.TaskError{
				Message: "the react task is 9000000 bytes, over the 4194304-byte limit", Terminal: true}}}},
			wantAck: true, wantSent: true,
		},
		"DispatchErrorIsNotAcked": {
			reason: "no worker took it", snapshot: `{"id":"r1"}`, kinds: fakeKinds{sinkKind},
			sent: dispatched{err: errors.New("no route")}, wantSent: true, wantLog: "no route",
		},
		"LostWorkerIsNotAcked": {
			reason: "the worker vanished without redelivering", snapshot: `{"id":"r1"}`, kinds: fakeKinds{sinkKind},
			wantSent: true,
		},
		"AckFailureIsReported": {
			reason: "an ack that did not land is redelivered", snapshot: `{"id":"r1"}`, kinds: fakeKinds{sinkKind},
			sent: dispatched{c: &workerv1.StageComplete{}}, ackErr: errors.New("connection reset"), wantSent: true,
		},
		"UnreadableSnapshotIsDropped": {
			reason: "a snapshot no reactor could read is acknowledged so it stops coming back", snapshot: `{`,
			kinds: fakeKinds{sinkKind}, wantAck: true,
		},
		"UnreadableSnapshotAckFailureIsReported": {
			reason: "a dropped snapshot whose ack did not land comes back; the ack's error is logged, not swallowed", snapshot: `{`,
			kinds: fakeKinds{sinkKind}, ackErr: errors.New("connection reset"), wantLog: "connection reset",
		},
		"MissingManifestWaits": {
			reason: "a reactor kind with no applied manifest leaves the delivery for later", snapshot: `{"id":"r1"}`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r, _, ds, sender := setupReactors(t)
			r.kinds = tc.kinds
			var logs testlog.Buffer
			r.log = zerolog.New(&logs)
			var mu sync.Mutex
			sent, acked := false, false
			sender.DispatchFn = func(context.Context, manifest.KindVersion, *workerv1.StageTask) (*workerv1.StageComplete, error) {
				mu.Lock()
				sent = true
				mu.Unlock()
				return tc.sent.c, tc.sent.err
			}
			ds.AckFn = func(context.Context, lifecycle.Delivery) (bool, error) {
				mu.Lock()
				acked = true
				mu.Unlock()
				return tc.ackErr == nil, tc.ackErr
			}
			got := r.deliver(context.Background(), delivery(tc.snapshot))
			require.Equal(t, tc.wantAck, got, tc.reason)
			require.Equal(t, tc.wantSent, sent, tc.reason)
			require.Equal(t, tc.wantAck || tc.ackErr != nil, acked, tc.reason)
			require.Contains(t, logs.String(), tc.wantLog, tc.reason)
		})
	}
}

// On shutdown the deliveries in flight get the drain budget: one that
// finishes in it is acknowledged and nothing is released; one still running
// when the budget is spent is cut short and given back (released), so another
// broker delivers it at once instead of when its claim lapses.
func TestReactorDispatcher_Drain(t *testing.T) {
	t.Parallel()
	const budget = 45 * time.Second
	start := func(t *testing.T, dispatch func(ctx context.Context) error) (r *reactorDispatcher, clock *fakeClock,
		ds *fakeDeliveries, stop func() <-chan error) {
		t.Helper()
		r, clock, ds, sender := setupReactors(t)
		r.drain = budget
		var claims atomic.Int32
		ds.ClaimFn = func(context.Context, string, []string, int, int, int) ([]lifecycle.Delivery, error) {
			if claims.Add(1) == 1 {
				return []lifecycle.Delivery{delivery(`{"id":"r1","name":"vpc-1"}`)}, nil
			}
			return nil, nil
		}
		entered := make(chan struct{})
		sender.DispatchFn = func(ctx context.Context, _ manifest.KindVersion, st *workerv1.StageTask) (*workerv1.StageComplete, error) {
			close(entered)
			if err := dispatch(ctx); err != nil {
				return nil, err
			}
			return &workerv1.StageComplete{TaskId: st.GetTaskId()}, nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			clock.Advance(budget)
		})
		select {
		case <-entered:
		case <-time.After(5 * time.Second):
			t.Fatal("the delivery never reached the worker")
		}
		return r, clock, ds, func() <-chan error { cancel(); return done }
	}

	t.Run("ADeliveryThatFinishesInTheBudgetIsAcked", func(t *testing.T) {
		t.Parallel()
		finish := make(chan struct{})
		r, _, ds, stop := start(t, func(ctx context.Context) error {
			select {
			case <-finish:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		ds.ReleaseFn = func(context.Context, string, []lifecycle.Delivery) (int, error) {
			t.Error("a delivery that finished in the budget was released")
			return 0, nil
		}
		done := stop()
		close(finish) // the reactor answers after the shutdown began
		require.True(t, r.testSignals.delivered.WaitOrTimeout(t), "acknowledged")
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatal("the dispatcher did not stop once its delivery ended (the clock never moved)")
		}
	})

	t.Run("ADeliveryCutShortByTheBudgetIsGivenBack", func(t *testing.T) {
		t.Parallel()
		r, clock, ds, stop := start(t, func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		})
		released := make(chan []lifecycle.Delivery, 1)
		ds.ReleaseFn = func(_ context.Context, workerID string, got []lifecycle.Delivery) (int, error) {
			require.Equal(t, "broker-1", workerID)
			released <- got
			return len(got), nil
		}
		done := stop()
		require.Never(t, func() bool { return len(released) > 0 }, 50*time.Millisecond, 5*time.Millisecond,
			"nothing is cut short before the budget is spent")
		require.Eventually(t, func() bool {
			clock.Advance(budget)
			return len(released) > 0
		}, 5*time.Second, time.Millisecond)
		got := <-released
		require.Len(t, got, 1)
		require.Equal(t, "audit", got[0].Key.Binding)
		require.False(t, r.testSignals.delivered.WaitOrTimeout(t), "not acknowledged")
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatal("the dispatcher did not stop")
		}
	})
}

// A delivery re-armed while in flight (the cascade re-fired its edge) and
// re-claimed by the same dispatcher runs beside the first, under the same
// key and a new claim epoch. The first one's end must not drop the second
// from the heartbeats: its claim would lapse while its reactor runs, and
// the reaper would hand it out a third time.
func TestReactorDispatcher_AReclaimedDeliveryKeepsItsHeartbeatWhenTheFirstEnds(t *testing.T) {
	t.Parallel()
	r, clock, ds, sender := setupReactors(t)
	first := delivery(`{"id":"r1"}`)
	second := first
	second.ClaimEpoch = 8
	var claims atomic.Int32
	ds.ClaimFn = func(context.Context, string, []string, int, int, int) ([]lifecycle.Delivery, error) {
		switch claims.Add(1) {
		case 1:
			return []lifecycle.Delivery{first}, nil
		case 2:
			return []lifecycle.Delivery{second}, nil
		}
		return nil, nil
	}
	ds.AckFn = func(_ context.Context, d lifecycle.Delivery) (bool, error) {
		return d.ClaimEpoch == second.ClaimEpoch, nil // the first's ack is fenced off
	}
	var mu sync.Mutex
	var beat []int64
	ds.HeartbeatFn = func(_ context.Context, _ string, got []lifecycle.Delivery) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		beat = beat[:0]
		for _, d := range got {
			beat = append(beat, d.ClaimEpoch)
		}
		return len(got), nil
	}
	releaseFirst := make(chan struct{})
	sender.DispatchFn = func(ctx context.Context, _ manifest.KindVersion, st *workerv1.StageTask) (*workerv1.StageComplete, error) {
		wait := ctx.Done()
		if st.GetFence().GetClaimEpoch() == first.ClaimEpoch {
			wait = releaseFirst
		}
		<-wait
		return &workerv1.StageComplete{TaskId: st.GetTaskId()}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		require.Eventually(t, func() bool {
			clock.Advance(time.Second) // the drain budget
			select {
			case <-done:
				return true
			default:
				return false
			}
		}, 5*time.Second, time.Millisecond)
	})
	require.Eventually(t, func() bool { return claims.Load() >= 2 }, 5*time.Second, time.Millisecond)
	close(releaseFirst)
	r.testSignals.delivered.WaitOrTimeout(t) // the first delivery ended
	require.Eventually(t, func() bool {
		clock.Advance(r.every)
		mu.Lock()
		defer mu.Unlock()
		return len(beat) == 1 && beat[0] == second.ClaimEpoch
	}, 5*time.Second, 10*time.Millisecond, "the re-claimed delivery, still running, is heartbeated")
}

// A reactor kind applied in two versions, its workers serving only one (an
// upgrade to v2 that retired v1's workers): a delivery goes to the version a
// worker serves, not to the first one applied, which no worker would take.
func TestReactorDispatcher_DeliversToTheReactorVersionAWorkerServes(t *testing.T) {
	t.Parallel()
	v2 := manifest.KindVersion{Kind: "sink", Version: "v2"}
	sinkV2 := sinkKind
	sinkV2.Version, sinkV2.Manifest.Version = "v2", "v2"
	sinkV2.Manifest.Reactions = []manifest.ReactionDecl{{Name: "record2", Trigger: manifest.TriggerReactor}}
	reg := newRegistry(testLog(t))
	reg.add(&session{id: "w#1", workerID: "w", maxIn: 4, ready: map[manifest.KindVersion]bool{v2: true},
		out: make(chan *workerv1.WorkStreamResponse, 8), done: make(chan struct{})})
	r, _, _, sender := setupReactors(t)
	r.kinds = fakeKinds{sinkKind, sinkV2}
	r.routes = &routes{reg: reg, mesh: newMesh("broker-1", func() {}, testLog(t)), kinds: r.kinds}
	var (
		got      manifest.KindVersion
		reaction string
	)
	sender.DispatchFn = func(_ context.Context, kv manifest.KindVersion, st *workerv1.StageTask) (*workerv1.StageComplete, error) {
		got, reaction = kv, st.GetReaction()
		return &workerv1.StageComplete{TaskId: st.GetTaskId()}, nil
	}
	require.True(t, r.deliver(context.Background(), delivery(`{"id":"r1"}`)))
	require.Equal(t, v2, got, "the served version")
	require.Equal(t, "record2", reaction, "that version's reaction")
}

// A reactor runs under its kind's task deadline (task_deadline_secs), as
// every other stage does: the worker is told the budget, and a handler
// that hangs past it is given up on (left to its claim's lapse and
// delivered again), instead of holding its claim — heartbeated — and a
// slot for good.
func TestReactorDispatcherDeliver_ARunawayReactorIsCutAtItsTaskDeadline(t *testing.T) {
	t.Parallel()
	r, _, ds, sender := setupReactors(t)
	sink := sinkKind
	sink.Config.TaskDeadlineSecs = 1
	r.kinds = fakeKinds{sink}
	var logs testlog.Buffer
	r.log = zerolog.New(&logs)
	ds.AckFn = func(context.Context, lifecycle.Delivery) (bool, error) {
		t.Error("a reactor cut at its deadline was acknowledged")
		return true, nil
	}
	var budget atomic.Int64
	sender.DispatchFn = func(ctx context.Context, _ manifest.KindVersion, st *workerv1.StageTask) (*workerv1.StageComplete, error) {
		budget.Store(st.GetTaskDeadlineMs())
		<-ctx.Done() // the handler hangs
		return nil, ctx.Err()
	}
	done := make(chan bool, 1)
	go func() { done <- r.deliver(context.Background(), delivery(`{"id":"r1"}`)) }()
	select {
	case acked := <-done:
		require.False(t, acked)
	case <-time.After(15 * time.Second):
		t.Fatal("a hung reactor held its delivery past its kind's task deadline")
	}
	require.Positive(t, budget.Load(), "the worker is told the deadline")
	require.LessOrEqual(t, budget.Load(), int64(1000))
	require.Contains(t, logs.String(), "deadline")
}
