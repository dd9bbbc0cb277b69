package control

import (
	"context"
	"testing"
	"time"

	"github.com/converge-run/converge/core/cluster"
	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/engine/enginetest"
	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/maintenance"
)

// t0 is the fake clocks' start.
var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func newClock() *enginetest.Clock { return enginetest.NewClock(t0) }

func allShards() *cluster.ShardSet { return cluster.NewShardSet(shard.All) }

// drainStoreFns is a DrainStore of function fields; a nil field returns zero.
type drainStoreFns struct {
	DrainOutboxBatchFn    func(ctx context.Context, limit, lo, hi int) (int, error)
	DrainRollupRechecksFn func(ctx context.Context, limit, lo, hi int) (int, error)
	NotifyWorkReadyFn     func(ctx context.Context) error
}

func (f *drainStoreFns) DrainOutboxBatch(ctx context.Context, limit, lo, hi int) (int, error) {
	if f.DrainOutboxBatchFn == nil {
		return 0, nil
	}
	return f.DrainOutboxBatchFn(ctx, limit, lo, hi)
}

func (f *drainStoreFns) DrainRollupRechecks(ctx context.Context, limit, lo, hi int) (int, error) {
	if f.DrainRollupRechecksFn == nil {
		return 0, nil
	}
	return f.DrainRollupRechecksFn(ctx, limit, lo, hi)
}

func (f *drainStoreFns) NotifyWorkReady(ctx context.Context) error {
	if f.NotifyWorkReadyFn == nil {
		return nil
	}
	return f.NotifyWorkReadyFn(ctx)
}

// reaperStoreFns is a ReaperStore of function fields; a nil field returns 0.
type reaperStoreFns struct {
	ReapStaleWorkFn           func(ctx context.Context, r shard.Range, staleAfter time.Duration) (int, error)
	RequeueFailedAndPendingFn func(ctx context.Context, r shard.Range, limit int, retryAfter time.Duration) (int, error)
	RewalkRollupsFn           func(ctx context.Context, r shard.Range, limit int) (maintenance.Rewalk, error)
	DeleteUnclaimedWorkFn     func(ctx context.Context, r shard.Range, after time.Duration) (int, error)
	SweepDeletableFn          func(ctx context.Context, r shard.Range, limit int) (int, error)
	RecountInflightFn         func(ctx context.Context, r shard.Range) (int, error)
	ReapStaleLifecycleFn      func(ctx context.Context, r shard.Range, staleAfter time.Duration) (int, error)
	SweepExpiredOrphansFn     func(ctx context.Context, r shard.Range, limit int) (int, error)
	SweepPrunedConfigsFn      func(ctx context.Context, limit int) (int, error)
	NotifyWorkReadyFn         func(ctx context.Context) error
}

func (f *reaperStoreFns) NotifyWorkReady(ctx context.Context) error {
	if f.NotifyWorkReadyFn == nil {
		return nil
	}
	return f.NotifyWorkReadyFn(ctx)
}

func (f *reaperStoreFns) ReapStaleWork(ctx context.Context, r shard.Range, d time.Duration) (int, error) {
	if f.ReapStaleWorkFn == nil {
		return 0, nil
	}
	return f.ReapStaleWorkFn(ctx, r, d)
}

func (f *reaperStoreFns) RequeueFailedAndPending(ctx context.Context, r shard.Range, limit int, d time.Duration) (int, error) {
	if f.RequeueFailedAndPendingFn == nil {
		return 0, nil
	}
	return f.RequeueFailedAndPendingFn(ctx, r, limit, d)
}

func (f *reaperStoreFns) RewalkRollups(ctx context.Context, r shard.Range, limit int) (maintenance.Rewalk, error) {
	if f.RewalkRollupsFn == nil {
		return maintenance.Rewalk{}, nil
	}
	return f.RewalkRollupsFn(ctx, r, limit)
}

func (f *reaperStoreFns) DeleteUnclaimedWork(ctx context.Context, r shard.Range, d time.Duration) (int, error) {
	if f.DeleteUnclaimedWorkFn == nil {
		return 0, nil
	}
	return f.DeleteUnclaimedWorkFn(ctx, r, d)
}

func (f *reaperStoreFns) SweepDeletable(ctx context.Context, r shard.Range, limit int) (int, error) {
	if f.SweepDeletableFn == nil {
		return 0, nil
	}
	return f.SweepDeletableFn(ctx, r, limit)
}

func (f *reaperStoreFns) RecountInflight(ctx context.Context, r shard.Range) (int, error) {
	if f.RecountInflightFn == nil {
		return 0, nil
	}
	return f.RecountInflightFn(ctx, r)
}

func (f *reaperStoreFns) ReapStaleLifecycle(ctx context.Context, r shard.Range, d time.Duration) (int, error) {
	if f.ReapStaleLifecycleFn == nil {
		return 0, nil
	}
	return f.ReapStaleLifecycleFn(ctx, r, d)
}

func (f *reaperStoreFns) SweepExpiredOrphans(ctx context.Context, r shard.Range, limit int) (int, error) {
	if f.SweepExpiredOrphansFn == nil {
		return 0, nil
	}
	return f.SweepExpiredOrphansFn(ctx, r, limit)
}

func (f *reaperStoreFns) SweepPrunedConfigs(ctx context.Context, limit int) (int, error) {
	if f.SweepPrunedConfigsFn == nil {
		return 0, nil
	}
	return f.SweepPrunedConfigsFn(ctx, limit)
}

// resyncStoreFn is a ResyncStore whose notifies are counted.
type resyncStoreFn func(ctx context.Context, p maintenance.Resync, r shard.Range, limit int) (int, error)

func (f resyncStoreFn) RequeueForResync(ctx context.Context, p maintenance.Resync, r shard.Range, limit int) (int, error) {
	return f(ctx, p, r, limit)
}

func (f resyncStoreFn) NotifyWorkReady(context.Context) error { return nil }

// resyncStoreFns is a ResyncStore of function fields.
type resyncStoreFns struct {
	RequeueForResyncFn func(ctx context.Context, p maintenance.Resync, r shard.Range, limit int) (int, error)
	NotifyWorkReadyFn  func(ctx context.Context) error
}

func (f *resyncStoreFns) RequeueForResync(ctx context.Context, p maintenance.Resync, r shard.Range, limit int) (int, error) {
	return f.RequeueForResyncFn(ctx, p, r, limit)
}

func (f *resyncStoreFns) NotifyWorkReady(ctx context.Context) error { return f.NotifyWorkReadyFn(ctx) }

// staleMembersFn is a StaleMembers of one function.
type staleMembersFn func(ctx context.Context, ttl time.Duration) (int, error)

func (f staleMembersFn) GCStale(ctx context.Context, ttl time.Duration) (int, error) {
	return f(ctx, ttl)
}

// runService starts d.Run and returns a stop that cancels it and waits for
// Run to return, failing the test when it takes longer than a second.
func runService(t *testing.T, d engine.Duty) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	stopped := false
	stop = func() {
		t.Helper()
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s.Run returned %v, want nil on cancel", d.Name(), err)
			}
		case <-time.After(time.Second):
			t.Fatalf("%s did not stop within a second of cancel", d.Name())
		}
	}
	t.Cleanup(stop)
	return stop
}

// advanceOnce waits until a service parks on clock and moves it by d.
func advanceOnce(t *testing.T, clock *enginetest.Clock, d time.Duration) {
	t.Helper()
	if !clock.WaitForWaiters(1, 5*time.Second) {
		t.Fatal("the service never waited on its clock")
	}
	clock.Advance(d)
}

func newShardSet(r shard.Range) *cluster.ShardSet { return cluster.NewShardSet(r) }
