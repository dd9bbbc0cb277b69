package broker

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/lifecycle"
	"github.com/converge-run/converge/core/store/notify"
	"github.com/converge-run/converge/core/store/pipeline"
	"github.com/converge-run/converge/core/testlog"
	"github.com/converge-run/converge/core/testsignal"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// Function-field fakes of the services' narrow interfaces
// (crossplane-runtime's ExternalClientFns): a test sets the functions it
// cares about; an unset one panics, so an unexpected call is loud.

type fakeClaimer struct {
	// ClaimableFn unset: every pair may have work (the probe never filters).
	ClaimableFn func(ctx context.Context, lo, hi int, batches []pipeline.Batch) ([]bool, error)
	ClaimFn     func(ctx context.Context, l pipeline.Lease, b pipeline.Batch) ([]pipeline.Task, error)
	ReleaseFn   func(ctx context.Context, l pipeline.Lease, keys []pipeline.TaskKey) (int, error)
	// OutboxLagFn unset: nothing waits for the drain.
	OutboxLagFn func(ctx context.Context, lo, hi int) (time.Duration, error)
}

func (f *fakeClaimer) Claimable(ctx context.Context, lo, hi int, batches []pipeline.Batch) ([]bool, error) {
	if f.ClaimableFn == nil {
		out := make([]bool, len(batches))
		for i := range out {
			out[i] = true
		}
		return out, nil
	}
	return f.ClaimableFn(ctx, lo, hi, batches)
}

func (f *fakeClaimer) Claim(ctx context.Context, l pipeline.Lease, b pipeline.Batch) ([]pipeline.Task, error) {
	return f.ClaimFn(ctx, l, b)
}

func (f *fakeClaimer) Release(ctx context.Context, l pipeline.Lease, keys []pipeline.TaskKey) (int, error) {
	return f.ReleaseFn(ctx, l, keys)
}

func (f *fakeClaimer) OutboxLag(ctx context.Context, lo, hi int) (time.Duration, error) {
	if f.OutboxLagFn == nil {
		return 0, nil
	}
	return f.OutboxLagFn(ctx, lo, hi)
}

type fakeRoutes struct {
	PairsFn         func() []pairKey
	LocalFreeFn     func(kv manifest.KindVersion) (int, bool)
	ChangedFn       func() <-chan struct{}
	RoutesChangedFn func() <-chan struct{}
	ReactorKindsFn  func() []manifest.KindVersion
}

func (f *fakeRoutes) pairs() []pairKey { return f.PairsFn() }
func (f *fakeRoutes) localFree(kv manifest.KindVersion) (int, bool) {
	if f.LocalFreeFn == nil {
		return 0, false // a peer serves it: only the pair cap applies
	}
	return f.LocalFreeFn(kv)
}
func (f *fakeRoutes) changed() <-chan struct{} {
	if f.ChangedFn == nil {
		return nil
	}
	return f.ChangedFn()
}
func (f *fakeRoutes) routesChanged() <-chan struct{} {
	if f.RoutesChangedFn == nil {
		return nil
	}
	return f.RoutesChangedFn()
}
func (f *fakeRoutes) reactorKinds() []manifest.KindVersion { return f.ReactorKindsFn() }

type fakeShards struct {
	lo, hi int
	owned  bool
}

func (f fakeShards) Bounds() (int, int, bool) { return f.lo, f.hi, f.owned }

// Changed never fires: a fakeShards range never changes.
func (fakeShards) Changed() <-chan struct{} { return nil }

type fakeRunner struct {
	RunFn func(ctx context.Context, lease pipeline.Lease, t pipeline.Task)
}

func (f *fakeRunner) runTask(ctx context.Context, lease pipeline.Lease, t pipeline.Task, _ *claimDeadline, done func()) {
	defer done()
	f.RunFn(ctx, lease, t)
}

// fakeWaker is a NOTIFY channel the test fires.
type fakeWaker struct{ ch chan notify.Event }

func newFakeWaker() *fakeWaker { return &fakeWaker{ch: make(chan notify.Event, 1)} }

func (f *fakeWaker) subscribe(string) (<-chan notify.Event, func()) { return f.ch, func() {} }

// fire sends a wake the way the listener does (buffer 1, coalescing).
func (f *fakeWaker) fire() {
	select {
	case f.ch <- notify.Event{Channel: "work_ready"}:
	default:
	}
}

type fakeLeases struct {
	HeartbeatFn func(ctx context.Context, workerID string, lo, hi int, keys []pipeline.TaskKey) (int, error)
}

func (f *fakeLeases) Heartbeat(ctx context.Context, workerID string, lo, hi int, keys []pipeline.TaskKey) (int, error) {
	return f.HeartbeatFn(ctx, workerID, lo, hi, keys)
}

type fakeHeld struct{ KeysFn func() []pipeline.TaskKey }

func (f *fakeHeld) keys() []pipeline.TaskKey { return f.KeysFn() }

type fakeConfigs struct {
	DefaultFn func(ctx context.Context, kind string) (store.ProviderConfig, bool, error)
}

func (f *fakeConfigs) DefaultProviderConfig(ctx context.Context, kind string) (store.ProviderConfig, bool, error) {
	return f.DefaultFn(ctx, kind)
}

type fakeTargets struct {
	KindsFn func() []string
	PushFn  func(ctx context.Context, kind string, push *workerv1.ConfigPush, rev int64) int
	// joins is what joined returns (nil: nobody joins).
	joins chan struct{}
}

func (f *fakeTargets) configKinds() []string { return f.KindsFn() }
func (f *fakeTargets) pushConfig(ctx context.Context, kind string, push *workerv1.ConfigPush, rev int64, _ time.Duration) int {
	return f.PushFn(ctx, kind, push, rev)
}
func (f *fakeTargets) joined() <-chan struct{} { return f.joins }

type fakeDeliveries struct {
	ClaimFn     func(ctx context.Context, workerID string, reactors []string, lo, hi, limit int) ([]lifecycle.Delivery, error)
	AckFn       func(ctx context.Context, d lifecycle.Delivery) (bool, error)
	HeartbeatFn func(ctx context.Context, workerID string, ds []lifecycle.Delivery) (int, error)
	ReleaseFn   func(ctx context.Context, workerID string, ds []lifecycle.Delivery) (int, error)
}

func (f *fakeDeliveries) Claim(ctx context.Context, workerID string, reactors []string, lo, hi, limit int) ([]lifecycle.Delivery, error) {
	return f.ClaimFn(ctx, workerID, reactors, lo, hi, limit)
}
func (f *fakeDeliveries) Ack(ctx context.Context, d lifecycle.Delivery) (bool, error) {
	return f.AckFn(ctx, d)
}
func (f *fakeDeliveries) Heartbeat(ctx context.Context, workerID string, ds []lifecycle.Delivery) (int, error) {
	return f.HeartbeatFn(ctx, workerID, ds)
}
func (f *fakeDeliveries) Release(ctx context.Context, workerID string, ds []lifecycle.Delivery) (int, error) {
	return f.ReleaseFn(ctx, workerID, ds)
}

type fakeSender struct {
	DispatchFn func(ctx context.Context, kv manifest.KindVersion, task *workerv1.StageTask) (*workerv1.StageComplete, error)
}

func (f *fakeSender) dispatch(ctx context.Context, kv manifest.KindVersion, task *workerv1.StageTask) (*workerv1.StageComplete, error) {
	return f.DispatchFn(ctx, kv, task)
}

type fakeStages struct {
	DispatchLocalFn func(ctx context.Context, kv manifest.KindVersion, task *workerv1.StageTask) (*workerv1.StageComplete, error)
}

func (f *fakeStages) dispatchLocal(ctx context.Context, kv manifest.KindVersion, task *workerv1.StageTask) (*workerv1.StageComplete, error) {
	return f.DispatchLocalFn(ctx, kv, task)
}

type fakeSink struct {
	CompleteFn func(c *workerv1.StageComplete, ack func())
}

func (f *fakeSink) complete(c *workerv1.StageComplete, ack func()) { f.CompleteFn(c, ack) }

// fakeKinds is a fixed set of applied kinds.
type fakeKinds []store.Kind

func (f fakeKinds) Kind(kv manifest.KindVersion) (store.Kind, bool) {
	for _, k := range f {
		if k.Name == kv.Kind && k.Version == kv.Version {
			return k, true
		}
	}
	return store.Kind{}, false
}
func (f fakeKinds) All() []store.Kind { return f }

// fakeClock is a clock the test advances. Every After call is signalled
// with its duration, so a test knows when a loop has gone idle and for how
// long it means to wait.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []fakeTimer
	waits  testsignal.Signal[time.Duration]
}

type fakeTimer struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	c := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c.waits.Init()
	return c
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.mu.Lock()
	c.timers = append(c.timers, fakeTimer{at: c.now.Add(d), ch: ch})
	c.mu.Unlock()
	c.waits.Signal(d)
	return ch
}

// Advance moves the clock and fires every timer now due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, t := range c.timers {
		if !t.at.After(c.now) {
			t.ch <- c.now
			continue
		}
		kept = append(kept, t)
	}
	c.timers = kept
}

// String is the clock's time and the timers armed and not yet fired (a
// loop parked on one waits for an Advance past it).
func (c *fakeClock) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "now %s, %d timers armed", c.now.Format(time.RFC3339Nano), len(c.timers))
	for _, t := range c.timers {
		fmt.Fprintf(&b, " (due %s)", t.at.Format(time.RFC3339Nano))
	}
	return b.String()
}

// testLog routes a service's logs to t.Log until the test ends (a stream
// handler that returns after its test's server closed must not log to it).
func testLog(t *testing.T) zerolog.Logger {
	return zerolog.New(testlog.Writer(t)).Level(zerolog.DebugLevel)
}

// task is a claimed task on shard with a fresh resource id.
func task(shard int, tt pipeline.TaskType) pipeline.Task {
	return pipeline.Task{Key: pipeline.TaskKey{ShardID: shard, ResourceID: uuid.New(), TaskType: tt}}
}

// tasksOf is n tasks of pair p.
func tasksOf(p pairKey, n int) []pipeline.Task {
	out := make([]pipeline.Task, n)
	for i := range out {
		out[i] = task(i%256, p.tt)
	}
	return out
}
