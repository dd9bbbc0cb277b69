package broker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/cluster"
	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/metrics"
	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/pipeline"
	"github.com/converge-run/converge/core/testsignal"
)

var (
	kvVPC     = manifest.KindVersion{Kind: "vpc", Version: "v1"}
	pairVPC   = pairKey{kvVPC, pipeline.TaskReconcile}
	pairVPCDe = pairKey{kvVPC, pipeline.TaskDelete}
)

const (
	testPollMin = 25 * time.Millisecond
	testPollMax = time.Second
)

// dispatcherBundle is a dispatcher over fakes.
type dispatcherBundle struct {
	d       *dispatcher
	clock   *fakeClock
	wake    *fakeWaker
	claimer *fakeClaimer
	routes  *fakeRoutes
	runner  *fakeRunner
}

func setupDispatcher(t *testing.T) *dispatcherBundle {
	t.Helper()
	b := &dispatcherBundle{
		clock: newFakeClock(),
		wake:  newFakeWaker(),
		claimer: &fakeClaimer{
			ClaimFn:   func(context.Context, pipeline.Lease, pipeline.Batch) ([]pipeline.Task, error) { return nil, nil },
			ReleaseFn: func(_ context.Context, _ pipeline.Lease, keys []pipeline.TaskKey) (int, error) { return len(keys), nil },
		},
		routes: &fakeRoutes{PairsFn: func() []pairKey { return []pairKey{pairVPC} }},
		runner: &fakeRunner{RunFn: func(context.Context, pipeline.Lease, pipeline.Task) {}},
	}
	b.d = &dispatcher{id: "broker-1", claims: b.claimer, routes: b.routes, shards: fakeShards{0, 255, true},
		tasks: newInflight(), runner: b.runner, wakes: b.wake, metrics: metrics.New(), clock: b.clock, log: testLog(t),
		caps: pairCaps{base: 100}, pollMin: testPollMin, pollMax: testPollMax, drain: 45 * time.Second}
	b.d.testSignals.init()
	return b
}

// start runs the dispatcher; the returned stop cancels it and waits for
// Run to return (also at cleanup).
func (b *dispatcherBundle) start(t *testing.T) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.d.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(5 * time.Second):
				t.Fatal("dispatcher did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitShowing waits until cond holds, for testsignal.Timeout of the wall
// clock (cond may move the fake clock); when it does not, the failure says
// what the claim loop is doing — parked on its idle timer or sweeping, its
// dry marks and failing pairs — the fake clock's time and armed timers, the
// tasks in flight, and more (more(), read then).
func (b *dispatcherBundle) waitShowing(t *testing.T, what string, cond func() bool, more func() string) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(testsignal.Timeout)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			loop := "the claim loop has not parked yet"
			if s, ok := b.d.testSignals.loop.Load(); ok {
				loop = s.String()
			}
			t.Fatalf("timed out after %s waiting for %s\nclaim loop: %s\nclock: %s\ntasks in flight: %d\n%s",
				testsignal.Timeout, what, loop, b.clock, b.d.tasks.count(), more())
		}
	}
}

// claimsFrom makes the claimer hand out batches in order, then nothing.
func (b *dispatcherBundle) claimsFrom(batches ...[]pipeline.Task) *atomic.Int32 {
	var calls atomic.Int32
	var mu sync.Mutex
	b.claimer.ClaimFn = func(context.Context, pipeline.Lease, pipeline.Batch) ([]pipeline.Task, error) {
		calls.Add(1)
		mu.Lock()
		defer mu.Unlock()
		if len(batches) == 0 {
			return nil, nil
		}
		next := batches[0]
		batches = batches[1:]
		return next, nil
	}
	return &calls
}

func TestDispatcher(t *testing.T) {
	t.Parallel()

	t.Run("StopsImmediately", func(t *testing.T) {
		t.Parallel()
		b := setupDispatcher(t)
		stop := b.start(t)
		b.d.testSignals.idle.WaitOrTimeout(t)
		stop()
		require.Equal(t, 0, b.d.testSignals.drained.WaitOrTimeout(t), "nothing in flight, nothing released")
	})

	t.Run("CanRunMultipleTimes", func(t *testing.T) {
		t.Parallel()
		b := setupDispatcher(t)
		calls := b.claimsFrom()
		for range 2 {
			stop := b.start(t)
			b.d.testSignals.idle.WaitOrTimeout(t)
			stop()
			b.d.testSignals.drained.WaitOrTimeout(t)
		}
		require.EqualValues(t, 2, calls.Load(), "one sweep per run")
	})

	t.Run("SweepsUntilDryThenIdles", func(t *testing.T) {
		t.Parallel()
		b := setupDispatcher(t)
		calls := b.claimsFrom(tasksOf(pairVPC, 3), tasksOf(pairVPC, 2))
		b.start(t)
		require.Equal(t, 3, b.d.testSignals.swept.WaitOrTimeout(t))
		require.Equal(t, 2, b.d.testSignals.swept.WaitOrTimeout(t), "work found: sweep again at once")
		require.Equal(t, 0, b.d.testSignals.swept.WaitOrTimeout(t))
		require.Equal(t, testPollMin, b.d.testSignals.idle.WaitOrTimeout(t))
		require.EqualValues(t, 3, calls.Load())
	})

	t.Run("IdleBackoffDoublesToPollMaxAndAWakeResetsIt", func(t *testing.T) {
		t.Parallel()
		b := setupDispatcher(t)
		b.start(t)
		var waits []time.Duration
		for i := range 8 {
			w := b.d.testSignals.idle.WaitOrTimeout(t)
			waits = append(waits, w)
			if i < 7 {
				b.clock.Advance(w)
			}
		}
		ms := time.Millisecond
		want := []time.Duration{25 * ms, 50 * ms, 100 * ms, 200 * ms, 400 * ms, 800 * ms, 1000 * ms, 1000 * ms}
		require.Empty(t, cmp.Diff(want, waits), "idle waits (-want +got)")
		b.wake.fire()
		require.Equal(t, testPollMin, b.d.testSignals.idle.WaitOrTimeout(t), "a wake starts the backoff over")
	})

	t.Run("ClaimErrorIsRetriedAtTheNextSweep", func(t *testing.T) {
		t.Parallel()
		b := setupDispatcher(t)
		var calls atomic.Int32
		b.claimer.ClaimFn = func(context.Context, pipeline.Lease, pipeline.Batch) ([]pipeline.Task, error) {
			if calls.Add(1) == 1 {
				return nil, errors.New("connection reset")
			}
			return tasksOf(pairVPC, 1), nil
		}
		b.start(t)
		require.Equal(t, 0, b.d.testSignals.swept.WaitOrTimeout(t))
		b.clock.Advance(b.d.testSignals.idle.WaitOrTimeout(t))
		require.Equal(t, 1, b.d.testSignals.swept.WaitOrTimeout(t))
	})

	// A claim over several partitions whose later statement fails (a pool
	// connection the database dropped in a restart) has already leased the
	// earlier partitions' rows: they run like any claim and are
	// heartbeated, instead of waiting out the stale-lease window.
	t.Run("TasksLeasedBeforeAClaimErrorRun", func(t *testing.T) {
		t.Parallel()
		b := setupDispatcher(t)
		var calls atomic.Int32
		b.claimer.ClaimFn = func(context.Context, pipeline.Lease, pipeline.Batch) ([]pipeline.Task, error) {
			if calls.Add(1) == 1 {
				return tasksOf(pairVPC, 3), errors.New("claim vpc/v1 reconcile (shards 16-31): unexpected EOF")
			}
			return nil, nil
		}
		release := make(chan struct{})
		var ran atomic.Int32
		b.runner.RunFn = func(context.Context, pipeline.Lease, pipeline.Task) { ran.Add(1); <-release }
		b.start(t)
		require.Equal(t, 3, b.d.testSignals.swept.WaitOrTimeout(t), "the partial claim counts as work found")
		require.Equal(t, 3, b.d.tasks.pair(pairVPC), "in flight: the heartbeater renews their leases")
		require.Len(t, b.d.tasks.keys(), 3)
		close(release)
		require.Eventually(t, func() bool { return ran.Load() == 3 }, 5*time.Second, time.Millisecond)
	})

	t.Run("UnownedRangeClaimsNothing", func(t *testing.T) {
		t.Parallel()
		b := setupDispatcher(t)
		b.d.shards = fakeShards{owned: false}
		calls := b.claimsFrom(tasksOf(pairVPC, 1))
		b.start(t)
		require.Equal(t, 0, b.d.testSignals.swept.WaitOrTimeout(t))
		b.d.testSignals.idle.WaitOrTimeout(t)
		require.Zero(t, calls.Load())
	})

	// A range handed back (the liveness lock re-taken after a database
	// restart, a re-tile after a join or a crash) is claimed from at once:
	// the loop idled while it owned nothing, and its idle wait, up to
	// pollMax, must not delay the claims. The fake clock never moves here.
	t.Run("ClaimsAtOnceWhenItsRangeIsHandedBack", func(t *testing.T) {
		t.Parallel()
		b := setupDispatcher(t)
		shards := cluster.NewShardSet(shard.Range{})
		b.d.shards = shards
		b.claimsFrom(tasksOf(pairVPC, 2))
		b.start(t)
		require.Equal(t, 0, b.d.testSignals.swept.WaitOrTimeout(t))
		b.d.testSignals.idle.WaitOrTimeout(t)
		shards.Set(shard.Between(0, 255))
		require.Equal(t, 2, b.d.testSignals.swept.WaitOrTimeout(t), "the returned range is swept without waiting for the idle timer")
	})

	t.Run("RunsEveryClaimedTaskAndFreesItsSlot", func(t *testing.T) {
		t.Parallel()
		b := setupDispatcher(t)
		release := make(chan struct{})
		var ran atomic.Int32
		b.runner.RunFn = func(context.Context, pipeline.Lease, pipeline.Task) { ran.Add(1); <-release }
		b.claimsFrom(tasksOf(pairVPC, 4))
		b.start(t)
		require.Equal(t, 4, b.d.testSignals.swept.WaitOrTimeout(t))
		require.Equal(t, 4, b.d.tasks.pair(pairVPC))
		close(release)
		require.Eventually(t, func() bool { return b.d.tasks.count() == 0 }, 5*time.Second, time.Millisecond)
		require.EqualValues(t, 4, ran.Load())
	})
}

// The room a claim asks for: the pair cap, bounded by local workers' free
// slots when no peer serves the kind, with hysteresis while tasks are in
// flight.
func TestDispatcherClaimPair_Hysteresis(t *testing.T) {
	t.Parallel()
	type args struct {
		inflight  int
		free      int
		onlyLocal bool
		leaf      bool // the dispatcher knows vpc's manifest: a leaf kind
	}
	cases := map[string]struct {
		reason string
		args   args
		want   int // Batch.Max asked for; -1 = no claim
	}{
		"EmptyPairAsksTheWholeCap": {
			reason: "nothing in flight and a peer serves the kind: only the pair cap bounds the claim",
			args:   args{inflight: 0},
			want:   100,
		},
		"LocalWorkersBoundTheClaim": {
			reason: "with only local workers a claim takes what they can run",
			args:   args{inflight: 0, free: 16, onlyLocal: true},
			want:   16,
		},
		"NoFreeWorkerSlotNoClaim": {
			reason: "local workers are full: claiming would only park tasks",
			args:   args{inflight: 0, free: 0, onlyLocal: true},
			want:   -1,
		},
		"FullPairNoClaim": {
			reason: "the pair cap is reached",
			args:   args{inflight: 100},
			want:   -1,
		},
		"LessThanAQuarterFreeWaits": {
			reason: "hysteresis: with tasks in flight, fewer than cap/4 free slots is not worth a statement",
			args:   args{inflight: 80},
			want:   -1,
		},
		"AQuarterFreeClaims": {
			reason: "exactly a quarter of the cap free is worth a claim",
			args:   args{inflight: 75},
			want:   25,
		},
		"LocalLimitSetsTheQuarter": {
			reason: "with only local workers the limit is in flight + free, so 4 of 16 is a quarter",
			args:   args{inflight: 12, free: 4, onlyLocal: true},
			want:   4,
		},
		"BelowTheLocalQuarterWaits": {
			reason: "2 free of a local limit of 16 is below a quarter",
			args:   args{inflight: 14, free: 2, onlyLocal: true},
			want:   -1,
		},
		"ALeafKindAsksTwiceTheCap": {
			reason: "a leaf kind's pair holds twice the cap",
			args:   args{inflight: 0, leaf: true},
			want:   200,
		},
		"ALeafKindPastTheCapStillClaims": {
			reason: "100 in flight of a leaf kind's 200 leaves room worth a claim",
			args:   args{inflight: 100, leaf: true},
			want:   100,
		},
		"ALeafKindsQuarterIsOfItsOwnCap": {
			reason: "40 free of a leaf kind's 200 is below a quarter",
			args:   args{inflight: 160, leaf: true},
			want:   -1,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupDispatcher(t)
			b.routes.LocalFreeFn = func(manifest.KindVersion) (int, bool) { return tc.args.free, tc.args.onlyLocal }
			if tc.args.leaf {
				b.d.caps.kinds = fakeKinds{workerKind}
			}
			b.d.tasks.add(pipeline.Lease{}, pairVPC, tasksOf(pairVPC, tc.args.inflight))
			asked := -1
			b.claimer.ClaimFn = func(_ context.Context, _ pipeline.Lease, batch pipeline.Batch) ([]pipeline.Task, error) {
				asked = batch.Max
				return nil, nil
			}
			n, err := b.d.claimPair(context.Background(), context.Background(), pairVPC, 0, 255, false)
			require.NoError(t, err)
			if tc.want < 0 {
				require.Equal(t, -1, n, tc.reason)
			}
			require.Equal(t, tc.want, asked, tc.reason)
		})
	}
}

// A rollup kind's pair with no room worth a claim still claims its
// rollups, and only those, up to their own room less the rollups in
// flight; a pair with room claims as before, and a pair of a kind without
// a rollup claims nothing when full.
func TestDispatcherClaimPair_RollupsHaveRoomOfTheirOwn(t *testing.T) {
	t.Parallel()
	b := setupDispatcher(t)
	b.d.rollupBound = func(p pairKey) (int, bool) { return 8, p == pairVPC }
	rollup := func() pipeline.Task {
		t := task(0, pipeline.TaskReconcile)
		t.Trigger = string(manifest.TriggerChildrenSettled)
		return t
	}
	// the pair is full: 97 composes waiting for their slots, 3 rollups
	b.d.tasks.add(pipeline.Lease{}, pairVPC, append(tasksOf(pairVPC, 97), rollup(), rollup(), rollup()))

	var mu sync.Mutex
	var asked []pipeline.Batch
	settled := rollup()
	next := []pipeline.Task{settled}
	b.claimer.ClaimFn = func(_ context.Context, _ pipeline.Lease, batch pipeline.Batch) ([]pipeline.Task, error) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, batch)
		out := next
		next = nil
		return out, nil
	}
	release := make(chan struct{})
	b.runner.RunFn = func(_ context.Context, _ pipeline.Lease, tk pipeline.Task) {
		if tk.Key == settled.Key {
			<-release
		}
	}
	claim := func(p pairKey) (int, *pipeline.Batch) {
		t.Helper()
		mu.Lock()
		before := len(asked)
		mu.Unlock()
		n, err := b.d.claimPair(context.Background(), context.Background(), p, 0, 255, false)
		require.NoError(t, err)
		mu.Lock()
		defer mu.Unlock()
		if len(asked) == before {
			return n, nil
		}
		return n, &asked[len(asked)-1]
	}

	n, batch := claim(pairVPC)
	require.Equal(t, 1, n)
	require.NotNil(t, batch)
	require.Equal(t, pipeline.Batch{Kind: "vpc", Version: "v1", TaskType: pipeline.TaskReconcile, Max: 5, OnlyRollups: true}, *batch,
		"a full pair claims rollups only: their room of 8 less the 3 in flight")
	require.Equal(t, 101, b.d.tasks.pair(pairVPC))
	require.Equal(t, 4, b.d.tasks.pairRollups(pairVPC))

	_, batch = claim(pairVPC)
	require.Equal(t, 4, batch.Max, "the claimed rollup takes its room")
	close(release)
	require.Eventually(t, func() bool { return b.d.tasks.pairRollups(pairVPC) == 3 }, 10*time.Second, time.Millisecond,
		"a finished rollup gives its room back")
	require.Equal(t, 100, b.d.tasks.pair(pairVPC))

	b.d.tasks.add(pipeline.Lease{}, pairVPC, []pipeline.Task{rollup(), rollup(), rollup(), rollup(), rollup()})
	n, batch = claim(pairVPC)
	require.Equal(t, -1, n, "rollups at their bound: no claim")
	require.Nil(t, batch)

	b.d.tasks.add(pipeline.Lease{}, pairVPCDe, tasksOf(pairVPCDe, 100))
	n, batch = claim(pairVPCDe)
	require.Equal(t, -1, n, "a full pair without a rollup bound claims nothing")
	require.Nil(t, batch)

	empty := pairKey{manifest.KindVersion{Kind: "subnet", Version: "v1"}, pipeline.TaskReconcile}
	_, batch = claim(empty)
	require.Equal(t, pipeline.Batch{Kind: "subnet", Version: "v1", TaskType: pipeline.TaskReconcile, Max: 100}, *batch,
		"a pair with room claims everything, rollups first, as before")
}

// A pair whose claim came back empty is skipped by sweeps that only a
// finished task triggered, for one dry window; a work_ready wake or the idle
// timer probes it again.
func TestDispatcher_DryPairsStayDryAcrossCompletions(t *testing.T) {
	t.Parallel()
	b := setupDispatcher(t)
	b.routes.PairsFn = func() []pairKey { return []pairKey{pairVPC, pairVPCDe} }
	var mu sync.Mutex
	probes := map[pairKey]int{}
	deletes := [][]pipeline.Task{tasksOf(pairVPCDe, 1), tasksOf(pairVPCDe, 1)}
	b.claimer.ClaimFn = func(_ context.Context, _ pipeline.Lease, batch pipeline.Batch) ([]pipeline.Task, error) {
		mu.Lock()
		defer mu.Unlock()
		probes[pairKey{kvVPC, batch.TaskType}]++
		if batch.TaskType == pipeline.TaskDelete && len(deletes) > 0 {
			next := deletes[0]
			deletes = deletes[1:]
			return next, nil
		}
		return nil, nil
	}
	release := make(chan struct{}, 2)
	b.runner.RunFn = func(context.Context, pipeline.Lease, pipeline.Task) { <-release }
	b.start(t)
	// Sweeps 1 and 2 each claim a delete; sweep 3 finds both pairs dry.
	for n := 1; n > 0; {
		n = b.d.testSignals.swept.WaitOrTimeout(t)
	}
	b.d.testSignals.idle.WaitOrTimeout(t)
	mu.Lock()
	reconcileProbes := probes[pairVPC]
	mu.Unlock()

	release <- struct{}{} // a task finishes: a completion-only sweep
	require.Equal(t, 0, b.d.testSignals.swept.WaitOrTimeout(t))
	b.d.testSignals.idle.WaitOrTimeout(t)
	mu.Lock()
	require.Equal(t, reconcileProbes, probes[pairVPC], "the dry reconcile pair is skipped after a completion")
	mu.Unlock()

	b.wake.fire()
	require.Equal(t, 0, b.d.testSignals.swept.WaitOrTimeout(t))
	mu.Lock()
	require.Equal(t, reconcileProbes+1, probes[pairVPC], "a work_ready wake claims again from every pair its probe finds work for")
	mu.Unlock()
	release <- struct{}{}
}

// On shutdown the dispatcher stops claiming and gives in-flight tasks the
// drain budget; what is still running then is cancelled and its leases
// released for a fast re-claim.
func TestDispatcher_Drain(t *testing.T) {
	t.Parallel()

	t.Run("WaitsForInFlightTasks", func(t *testing.T) {
		t.Parallel()
		b := setupDispatcher(t)
		finish := make(chan struct{})
		b.runner.RunFn = func(context.Context, pipeline.Lease, pipeline.Task) { <-finish }
		b.claimer.ReleaseFn = func(context.Context, pipeline.Lease, []pipeline.TaskKey) (int, error) {
			t.Error("nothing may be released when every task finished in the budget")
			return 0, nil
		}
		b.claimsFrom(tasksOf(pairVPC, 3))
		stop := b.start(t)
		require.Equal(t, 3, b.d.testSignals.swept.WaitOrTimeout(t))
		stopped := make(chan struct{})
		go func() { stop(); close(stopped) }()
		select {
		case <-stopped:
			t.Fatal("Run returned with tasks in flight")
		case <-time.After(50 * time.Millisecond):
		}
		close(finish)
		require.Equal(t, 0, b.d.testSignals.drained.WaitOrTimeout(t))
		<-stopped
	})

	t.Run("BeginsByGivingBackStagesNoWorkerTook", func(t *testing.T) {
		t.Parallel()
		b := setupDispatcher(t)
		begun := make(chan struct{})
		b.d.beginDrain = func() { close(begun) }
		// Each task waits for a worker until the drain begins, then gives
		// itself back (as the stager does); the runner releases its lease.
		b.runner.RunFn = func(context.Context, pipeline.Lease, pipeline.Task) { <-begun }
		b.claimer.ReleaseFn = func(context.Context, pipeline.Lease, []pipeline.TaskKey) (int, error) {
			t.Error("the dispatcher releases only stragglers left when the budget is spent")
			return 0, nil
		}
		b.claimsFrom(tasksOf(pairVPC, 3))
		stop := b.start(t)
		require.Equal(t, 3, b.d.testSignals.swept.WaitOrTimeout(t))
		go stop()
		require.Equal(t, 0, b.d.testSignals.drained.WaitOrTimeout(t),
			"the drain ends as the tasks give themselves back, with the budget unspent (the clock never moved)")
	})

	// A claim statement the signal would cut short can still commit its
	// leases on the server: the fake commits whatever happens, and returns
	// its tasks only to a client that has not given up (ctx still live),
	// as pgx does. The claim in flight finishes, its tasks run in the
	// drain, and no claim starts after the signal.
	t.Run("AClaimInFlightWhenStoppedFinishesAndItsTasksRun", func(t *testing.T) {
		t.Parallel()
		b := setupDispatcher(t)
		b.routes.PairsFn = func() []pairKey { return []pairKey{pairVPC, pairVPCDe} }
		entered, commit := make(chan struct{}), make(chan struct{})
		var claims atomic.Int32
		b.claimer.ClaimFn = func(ctx context.Context, _ pipeline.Lease, batch pipeline.Batch) ([]pipeline.Task, error) {
			if claims.Add(1) > 1 {
				t.Errorf("a %s claim started after the signal", batch.TaskType)
				return nil, nil
			}
			close(entered)
			<-commit
			if err := ctx.Err(); err != nil {
				return nil, err // committed, but the client gave up: the leases are lost to it
			}
			return tasksOf(pairKey{kvVPC, batch.TaskType}, 3), nil
		}
		var ran atomic.Int32
		b.runner.RunFn = func(context.Context, pipeline.Lease, pipeline.Task) { ran.Add(1) }
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- b.d.Run(ctx) }()
		select {
		case <-entered:
		case <-time.After(5 * time.Second):
			t.Fatal("no claim started")
		}
		cancel()
		close(commit)
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatal("dispatcher did not stop")
		}
		require.EqualValues(t, 3, ran.Load(), "the claim's tasks ran")
		require.Equal(t, 0, b.d.testSignals.drained.WaitOrTimeout(t), "nothing was left to release")
		require.EqualValues(t, 1, claims.Load())
	})

	t.Run("ReleasesStragglersWhenTheBudgetIsSpent", func(t *testing.T) {
		t.Parallel()
		b := setupDispatcher(t)
		cancelled := make(chan struct{}, 2)
		b.runner.RunFn = func(ctx context.Context, _ pipeline.Lease, _ pipeline.Task) {
			<-ctx.Done()
			cancelled <- struct{}{}
		}
		released := make(chan int, 1)
		b.claimer.ReleaseFn = func(_ context.Context, l pipeline.Lease, keys []pipeline.TaskKey) (int, error) {
			require.Equal(t, "broker-1", l.WorkerID)
			released <- len(keys)
			return len(keys), nil
		}
		b.claimsFrom(tasksOf(pairVPC, 2))
		stop := b.start(t)
		require.Equal(t, 2, b.d.testSignals.swept.WaitOrTimeout(t))
		go stop()
		require.Eventually(t, func() bool {
			b.clock.Advance(b.d.drain)
			return b.d.testSignals.drained.Pending() > 0
		}, 5*time.Second, time.Millisecond)
		require.Equal(t, 2, b.d.testSignals.drained.WaitOrTimeout(t))
		require.Equal(t, 2, <-released, "one release statement per lease")
		<-cancelled
		<-cancelled
	})
}

// The idle failsafe and a work_ready wake each cost one statement for the
// pairs without work: the sweep probes every pair at once and claims only
// from those with claimable rows; a failed probe falls back to claiming
// from every pair.
func TestDispatcher_IdleFailsafeProbesOnce(t *testing.T) {
	t.Parallel()
	timer := func(b *dispatcherBundle) { b.clock.Advance(b.d.testSignals.idle.WaitOrTimeout(t)) }
	wake := func(b *dispatcherBundle) { b.d.testSignals.idle.WaitOrTimeout(t); b.wake.fire() }
	cases := map[string]struct {
		reason     string
		trigger    func(b *dispatcherBundle)
		probeErr   error
		wantClaims []pipeline.TaskType
	}{
		"ClaimsOnlyWhereTheProbeFoundWork": {
			reason:     "the reconcile pair has rows, the delete pair none",
			trigger:    timer,
			wantClaims: []pipeline.TaskType{pipeline.TaskReconcile},
		},
		"AFailedProbeSweepsEveryPair": {
			reason:     "without an answer every pair is claimed from",
			trigger:    timer,
			probeErr:   errors.New("connection reset"),
			wantClaims: []pipeline.TaskType{pipeline.TaskReconcile, pipeline.TaskDelete},
		},
		"AWakeClaimsOnlyWhereTheProbeFoundWork": {
			reason:     "a wake names no pair: the probe finds which have rows",
			trigger:    wake,
			wantClaims: []pipeline.TaskType{pipeline.TaskReconcile},
		},
		"AWakeWhoseProbeFailedSweepsEveryPair": {
			reason:     "without an answer every pair is claimed from",
			trigger:    wake,
			probeErr:   errors.New("connection reset"),
			wantClaims: []pipeline.TaskType{pipeline.TaskReconcile, pipeline.TaskDelete},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupDispatcher(t)
			b.routes.PairsFn = func() []pairKey { return []pairKey{pairVPC, pairVPCDe} }
			var mu sync.Mutex
			var probes int
			var claims []pipeline.TaskType
			b.claimer.ClaimableFn = func(_ context.Context, lo, hi int, batches []pipeline.Batch) ([]bool, error) {
				mu.Lock()
				defer mu.Unlock()
				probes++
				require.Equal(t, [2]int{0, 255}, [2]int{lo, hi})
				out := make([]bool, len(batches))
				for i, bt := range batches {
					out[i] = bt.TaskType == pipeline.TaskReconcile
				}
				return out, tc.probeErr
			}
			b.claimer.ClaimFn = func(_ context.Context, _ pipeline.Lease, bt pipeline.Batch) ([]pipeline.Task, error) {
				mu.Lock()
				defer mu.Unlock()
				claims = append(claims, bt.TaskType)
				return nil, nil
			}
			b.start(t)
			require.Equal(t, 0, b.d.testSignals.swept.WaitOrTimeout(t))
			mu.Lock()
			require.Zero(t, probes, "the first sweep claims from every pair")
			claims = nil
			mu.Unlock()
			tc.trigger(b)
			require.Equal(t, 0, b.d.testSignals.swept.WaitOrTimeout(t))
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, 1, probes, tc.reason)
			require.ElementsMatch(t, tc.wantClaims, claims, tc.reason)
		})
	}
}

// Pairs whose dry window has run out are asked again together, in one
// probe, not with a claim each; a pair still inside its window is left
// alone, and a pair the probe finds work for is claimed from in the same
// sweep.
func TestDispatcherSweep_ExpiredDryPairsAreProbedTogether(t *testing.T) {
	t.Parallel()
	pairVPCOp := pairKey{kvVPC, pipeline.TaskOperate}
	pairAcct := pairKey{manifest.KindVersion{Kind: "account", Version: "v1"}, pipeline.TaskReconcile}
	cases := map[string]struct {
		expired    []pairKey // dry marks that ran out
		wantProbed []pairKey // nil: no probe
		wantClaims []pairKey
		work       pairKey // its claim returns a task
	}{
		"TwoExpiredOneProbe": {
			expired:    []pairKey{pairVPCDe, pairVPCOp},
			wantProbed: []pairKey{pairVPCDe, pairVPCOp},
			wantClaims: []pairKey{pairVPC, pairVPCOp}, // the probe found operate rows, no delete rows
		},
		"OneExpiredIsClaimedFromDirectly": {
			expired:    []pairKey{pairVPCDe},
			wantClaims: []pairKey{pairVPC, pairVPCDe, pairVPCOp}, // a probe would cost the same statement
		},
		"AnExpiredPairThatClaimsIsNoLongerDry": {
			expired:    []pairKey{pairVPCDe},
			work:       pairVPCDe,
			wantClaims: []pairKey{pairVPC, pairVPCDe, pairVPCOp},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupDispatcher(t)
			b.routes.PairsFn = func() []pairKey { return []pairKey{pairVPC, pairVPCDe, pairVPCOp, pairAcct} }
			var probed, claims []pairKey
			b.claimer.ClaimableFn = func(_ context.Context, _, _ int, batches []pipeline.Batch) ([]bool, error) {
				out := make([]bool, len(batches))
				for i, bt := range batches {
					p := pairKey{manifest.KindVersion{Kind: bt.Kind, Version: bt.Version}, bt.TaskType}
					probed = append(probed, p)
					out[i] = p == pairVPCOp
				}
				return out, nil
			}
			b.claimer.ClaimFn = func(_ context.Context, _ pipeline.Lease, bt pipeline.Batch) ([]pipeline.Task, error) {
				p := pairKey{manifest.KindVersion{Kind: bt.Kind, Version: bt.Version}, bt.TaskType}
				claims = append(claims, p)
				if p == tc.work {
					return tasksOf(p, 1), nil
				}
				return nil, nil
			}
			now := b.clock.Now()
			dry := map[pairKey]time.Time{pairAcct: now.Add(time.Millisecond)} // still dry
			for _, p := range tc.expired {
				dry[p] = now
			}
			b.d.sweep(context.Background(), context.Background(), context.Background(), 0, dry, false)
			require.ElementsMatch(t, tc.wantProbed, probed)
			require.ElementsMatch(t, tc.wantClaims, claims)
			require.True(t, dry[pairAcct].After(now), "a pair inside its window stays dry")
			switch {
			case tc.work != pairKey{}:
				require.NotContains(t, dry, tc.work, "a pair that claimed work is not asked again with the dry ones")
			case tc.wantProbed != nil:
				require.Equal(t, now.Add(dryWindow), dry[pairVPCDe], "a probed pair without rows is dry for a new window")
			}
		})
	}
}

// A run that gives its lease back (an outbox write refused, an abandoned
// stage) releases it before it returns and is forgotten: a sweep in that
// moment can claim the same task again. The re-claim's run must stay in
// flight when the first run ends — its lease heartbeated, waited for and
// released by the drain. Keyed by task alone, the first run's end forgot
// the second: its lease went unheartbeated until the reaper freed it and
// another broker ran the task a second time.
func TestDispatcher_AReclaimedTaskStaysInFlightWhenItsEarlierRunEnds(t *testing.T) {
	t.Parallel()
	b := setupDispatcher(t)
	tk := task(3, pipeline.TaskReconcile)
	b.claimsFrom([]pipeline.Task{tk}, []pipeline.Task{tk})
	second, hold := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	b.runner.RunFn = func(context.Context, pipeline.Lease, pipeline.Task) {
		if runs.Add(1) == 1 {
			<-second // the first run ends once the re-claim runs
			return
		}
		close(second)
		<-hold
	}
	stop := b.start(t)
	<-second
	require.Eventually(t, func() bool { return b.d.tasks.pair(pairVPC) == 1 }, 10*time.Second, time.Millisecond,
		"the first run ended")
	require.Equal(t, 1, b.d.tasks.count(), "the re-claimed task is still in flight")
	require.Equal(t, []pipeline.TaskKey{tk.Key}, b.d.tasks.keys(), "its lease is still heartbeated")
	close(hold)
	stop()
	require.Equal(t, 0, b.d.testSignals.drained.WaitOrTimeout(t), "the drain waited for it")
}
