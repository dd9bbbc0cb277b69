package broker

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/metrics"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/pipeline"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// With one compose slot, a second compose's stage is not sent to a worker
// until the first composition is written; a task that does not compose never
// waits for a slot.
func TestRunnerCompose_SlotsBoundComposesInFlight(t *testing.T) {
	t.Parallel()
	composer := manifest.ReactionDecl{Name: "compose", Trigger: manifest.TriggerSpecChange, Emits: manifest.Mask(manifest.OutcomeChildren)}
	kind := store.Kind{Name: "bom", Version: "v1", Manifest: manifest.KindManifest{Kind: "bom", Version: "v1",
		Reactions: []manifest.ReactionDecl{composer}}}

	var mu sync.Mutex
	inFlight, most := 0, 0
	writing := make(chan struct{})
	unblock := make(chan struct{})
	stages := &fakeStageDispatcher{StageFn: func(context.Context, pipeline.Task, workerv1.Stage, string, bool) (*workerv1.Outcome, error) {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		mu.Unlock()
		return &workerv1.Outcome{Children: []*workerv1.Child{{Kind: "leaf", Name: "a"}}}, nil
	}}
	st := &fakeTaskStore{ApplyComposeFn: func(context.Context, pipeline.Task, pipeline.Composition) (pipeline.ComposeResult, error) {
		writing <- struct{}{}
		<-unblock
		mu.Lock()
		inFlight--
		mu.Unlock()
		return pipeline.ComposeResult{}, nil
	}}
	rn := &runner{store: st, stages: stages, kinds: fakeKinds{kind, workerKind}, composes: newTaskSlots(1, DefaultComposeSlots), log: zerolog.Nop()}
	task := func() pipeline.Task {
		t := pipeline.Task{Key: pipeline.TaskKey{ResourceID: uuid.New(), TaskType: pipeline.TaskReconcile}, Generation: 1}
		t.Resource.Kind, t.Resource.Version = "bom", "v1"
		return t
	}
	run := func(ctx context.Context, t pipeline.Task) error {
		release, err := acquire(ctx, rn.slotsFor(t))
		if err != nil {
			return err
		}
		defer release()
		var held heldAcks
		_, err = rn.compose(ctx, t, kind, composer, &held)
		return err
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- run(ctx, task()) }()
	}
	<-writing // one composition is being written; the other waits for the slot
	mu.Lock()
	require.Equal(t, 1, inFlight, "the second compose stage waits for the first write")
	mu.Unlock()
	unblock <- struct{}{}
	<-writing
	unblock <- struct{}{}
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	require.Equal(t, 1, most, "never two composes in flight with one slot")

	// With the slot taken: a leaf gets through at once, a compose whose
	// wait is cancelled gives up without sending its stage.
	release, err := acquire(ctx, rn.composes)
	require.NoError(t, err)
	defer release()
	leaf := task()
	leaf.Resource.Kind = "vpc"
	require.Nil(t, rn.slotsFor(leaf), "a task that does not compose takes no slot")
	settled := task()
	settled.Trigger = string(manifest.TriggerChildrenSettled)
	require.Nil(t, rn.slotsFor(settled), "a rollup re-pend does not compose (and this kind has no rollup)")
	wctx, wcancel := context.WithCancel(ctx)
	wcancel()
	require.ErrorIs(t, run(wctx, task()), context.Canceled)
	mu.Lock()
	require.Zero(t, inFlight, "the cancelled compose sent no stage")
	mu.Unlock()
}

// A reconcile of a rollup kind that does not compose (a rollup re-pend, a
// resync) waits for a rollup slot; a compose of the same kind takes a compose
// slot instead, and a leaf neither.
func TestRunnerTaskSlot_RollupsWaitForARollupSlot(t *testing.T) {
	t.Parallel()
	kind := store.Kind{Name: "bom", Version: "v1", Manifest: manifest.KindManifest{Kind: "bom", Version: "v1",
		Reactions: []manifest.ReactionDecl{
			{Name: "compose", Trigger: manifest.TriggerSpecChange, Emits: manifest.Mask(manifest.OutcomeChildren)},
			{Name: "rollup", Trigger: manifest.TriggerChildrenSettled, Emits: manifest.Mask(manifest.OutcomeStatus)},
		}}}
	rn := &runner{kinds: fakeKinds{kind, workerKind}, composes: newTaskSlots(1, DefaultComposeSlots),
		rollups: newTaskSlots(1, DefaultRollupSlots()), log: zerolog.Nop()}
	task := func(kindName, trigger string, composedGen int64) pipeline.Task {
		t := pipeline.Task{Key: pipeline.TaskKey{ResourceID: uuid.New(), TaskType: pipeline.TaskReconcile}, Generation: 2, Trigger: trigger}
		t.Resource.Kind, t.Resource.Version, t.Resource.ComposedGen = kindName, "v1", composedGen
		return t
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	first, err := acquire(ctx, rn.slotsFor(task("bom", string(manifest.TriggerChildrenSettled), 2)))
	require.NoError(t, err)
	wctx, wcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer wcancel()
	_, err = acquire(wctx, rn.slotsFor(task("bom", string(manifest.TriggerChildrenSettled), 2)))
	require.ErrorIs(t, err, context.DeadlineExceeded, "a second rollup waits while the only rollup slot is held")

	require.Same(t, rn.composes, rn.slotsFor(task("bom", string(manifest.TriggerSpecChange), 1)),
		"a compose takes a compose slot, not the rollup slot")
	require.Nil(t, rn.slotsFor(task("vpc", string(manifest.TriggerSpecChange), 0)), "a leaf takes no slot")

	first()
	done, err := acquire(ctx, rn.slotsFor(task("bom", string(manifest.TriggerChildrenSettled), 2)))
	require.NoError(t, err, "the freed slot is taken")
	done()
}

// acquire waits for one of s's slots, as a task does, and returns its
// release, or ctx's error if ctx ends first.
func acquire(ctx context.Context, s *taskSlots) (func(), error) {
	got := make(chan func(), 1)
	s.take(ctx, func(release func(), _ bool) { got <- release })
	release := <-got
	if release == nil {
		return nil, ctx.Err()
	}
	return release, nil
}

// A task that finds no slot free waits as data: runTask returns at once,
// holding no goroutine, and the task runs on a goroutine of its own when a
// slot is given back, in the order the tasks came. One whose context ends
// while it waits gives its lease back without a slot, and the slot goes to
// the next in line.
func TestRunnerRunTask_AWaitingTaskHoldsNoGoroutine(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		composer := manifest.ReactionDecl{Name: "compose", Trigger: manifest.TriggerSpecChange, Emits: manifest.Mask(manifest.OutcomeChildren)}
		kind := store.Kind{Name: "bom", Version: "v1", Manifest: manifest.KindManifest{Kind: "bom", Version: "v1",
			Reactions: []manifest.ReactionDecl{composer}}}
		var mu sync.Mutex
		var order []string
		released := 0
		rn := &runner{
			store: &fakeTaskStore{ReleaseFn: func(context.Context, pipeline.Lease, []pipeline.TaskKey) (int, error) {
				mu.Lock()
				defer mu.Unlock()
				released++
				return 1, nil
			}, ApplyComposeFn: func(context.Context, pipeline.Task, pipeline.Composition) (pipeline.ComposeResult, error) {
				return pipeline.ComposeResult{}, nil
			}},
			stages: &fakeStageDispatcher{StageFn: func(_ context.Context, tk pipeline.Task, _ workerv1.Stage, _ string, _ bool) (*workerv1.Outcome, error) {
				mu.Lock()
				defer mu.Unlock()
				order = append(order, tk.Resource.Name)
				return &workerv1.Outcome{}, nil
			}},
			outbox: newOutboxWriter(func(context.Context, ...pipeline.Result) error { return nil }),
			kinds:  fakeKinds{kind, workerKind}, composes: newTaskSlots(1, DefaultComposeSlots),
			metrics: metrics.New(), clock: engine.RealClock, log: zerolog.Nop(),
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { _ = rn.outbox.Run(ctx) }()
		compose := func(name string) pipeline.Task {
			t := pipeline.Task{Key: pipeline.TaskKey{ResourceID: uuid.New(), TaskType: pipeline.TaskReconcile}, Generation: 1}
			t.Resource.Kind, t.Resource.Version, t.Resource.Name = "bom", "v1", name
			return t
		}
		holder, err := acquire(ctx, rn.composes)
		require.NoError(t, err)

		ended := make(chan string, 3)
		gone, giveUp := context.WithCancel(ctx)
		for _, name := range []string{"first", "gives-up", "second"} {
			tctx := ctx
			if name == "gives-up" {
				tctx = gone
			}
			// Called on this goroutine: it returns though the slot is
			// held, so the task waits without it (a runTask that waited
			// on a goroutine would block here for good).
			rn.runTask(tctx, pipeline.Lease{WorkerID: "broker-1"}, compose(name), nil, func() { ended <- name })
		}
		synctest.Wait()
		require.Empty(t, ended, "three tasks wait")

		giveUp()
		require.Equal(t, "gives-up", <-ended, "a task whose context ends gives up while it waits")
		mu.Lock()
		require.Equal(t, 1, released, "its lease is given back")
		require.Empty(t, order, "and it sent no stage")
		mu.Unlock()

		holder()
		// Each task gives its slot back before it reports its end, so the
		// second can run and end before the first reports: the order is
		// the stages' (below), not the ends'.
		require.ElementsMatch(t, []string{"first", "second"}, []string{<-ended, <-ended})
		mu.Lock()
		require.Equal(t, []string{"first", "second"}, order, "in the order they came, one slot at a time")
		mu.Unlock()
		require.Zero(t, rn.composes.inUse(), "every slot given back")
	})
}

// The rollup slots follow the cores: two each, no fewer than 4 (a small
// pod still overlaps a rollup's read with another's fold) and no more than
// 16 (each holds a subtree in memory).
func TestRollupSlotsFor_TwoPerCoreWithinBounds(t *testing.T) {
	t.Parallel()
	for procs, want := range map[int]int{1: 4, 2: 4, 3: 6, 4: 8, 8: 16, 64: 16} {
		require.Equal(t, want, rollupSlotsFor(procs), "GOMAXPROCS %d", procs)
	}
}

// A rollup kind's reconcile pair has rollup room of twice the rollup
// slots; other kinds and other task types have none.
func TestRollupBounds_TwiceTheRollupSlots(t *testing.T) {
	t.Parallel()
	kinds, pair := shapedKinds()
	type want struct {
		bound int
		ok    bool
	}
	for name, tc := range map[string]struct {
		slots int
		pair  pairKey
		want  want
	}{
		"AComposerWithARollup": {4, pair("bom", pipeline.TaskReconcile), want{8, true}},
		"ARollupKind":          {4, pair("group", pipeline.TaskReconcile), want{8, true}},
		"AComposerOnly":        {4, pair("stack", pipeline.TaskReconcile), want{0, false}},
		"ALeaf":                {4, pair("vpc", pipeline.TaskReconcile), want{0, false}},
		"ADeleteOfARollupKind": {4, pair("bom", pipeline.TaskDelete), want{0, false}},
		"AnUnknownKind":        {4, pair("nope", pipeline.TaskReconcile), want{0, false}},
		"UnboundedSlots":       {0, pair("bom", pipeline.TaskReconcile), want{0, false}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			bound, ok := rollupBounds{kinds: kinds, rollupSlots: tc.slots}.bound(tc.pair)
			require.Equal(t, tc.want, want{bound, ok})
		})
	}
}

// shapedKinds are a kind of each shape — a composer with a rollup ("bom"),
// a composer ("stack"), a rollup ("group") and a leaf ("vpc") — and the
// pair of one of them (or of a kind not among them) for a task type.
func shapedKinds() (fakeKinds, func(name string, tt pipeline.TaskType) pairKey) {
	compose := manifest.ReactionDecl{Name: "compose", Trigger: manifest.TriggerSpecChange, Emits: manifest.Mask(manifest.OutcomeChildren)}
	rollup := manifest.ReactionDecl{Name: "rollup", Trigger: manifest.TriggerChildrenSettled, Emits: manifest.Mask(manifest.OutcomeStatus)}
	kind := func(name string, reactions ...manifest.ReactionDecl) store.Kind {
		return store.Kind{Name: name, Version: "v1", Manifest: manifest.KindManifest{Kind: name, Version: "v1", Reactions: reactions}}
	}
	pair := func(name string, tt pipeline.TaskType) pairKey {
		return pairKey{manifest.KindVersion{Kind: name, Version: "v1"}, tt}
	}
	return fakeKinds{kind("bom", compose, rollup), kind("stack", compose), kind("group", rollup), workerKind}, pair
}

// A leaf kind's pairs hold twice the base; a kind that composes or rolls
// up, and a kind not applied, hold the base.
func TestPairCaps_ALeafKindHoldsTwiceTheBase(t *testing.T) {
	t.Parallel()
	kinds, pair := shapedKinds()
	caps := pairCaps{base: 100, kinds: kinds}
	for name, tc := range map[string]struct {
		pair pairKey
		want int
	}{
		"ALeaf":                {pair("vpc", pipeline.TaskReconcile), 200},
		"ALeafsDeletes":        {pair("vpc", pipeline.TaskDelete), 200},
		"AComposerWithARollup": {pair("bom", pipeline.TaskReconcile), 100},
		"AComposerOnly":        {pair("stack", pipeline.TaskReconcile), 100},
		"ARollupKind":          {pair("group", pipeline.TaskReconcile), 100},
		"AnUnknownKind":        {pair("nope", pipeline.TaskReconcile), 100},
	} {
		require.Equal(t, tc.want, caps.of(tc.pair), name)
	}
	require.Equal(t, 100, pairCaps{base: 100}.of(pair("vpc", pipeline.TaskReconcile)), "no kinds: the base")
}
