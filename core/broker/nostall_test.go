package broker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store/pipeline"
)

// fakeQueue is a work_queue in fake time: pends are committed at a clock
// instant and a claim takes every committed one, recording when.
type fakeQueue struct {
	clock *fakeClock
	mu    sync.Mutex
	// duringClaim, when set, runs inside the next Claim after its result is
	// taken: a pend committed while the sweep runs.
	duringClaim func()
	pending     []pipeline.Task
	committedAt map[pipeline.TaskKey]time.Time
	latency     map[pipeline.TaskKey]time.Duration
}

func newFakeQueue(clock *fakeClock) *fakeQueue {
	return &fakeQueue{clock: clock, committedAt: map[pipeline.TaskKey]time.Time{}, latency: map[pipeline.TaskKey]time.Duration{}}
}

// commit queues a pend now (its NOTIFY, if any, is the test's to fire).
func (q *fakeQueue) commit() pipeline.TaskKey {
	t := task(1, pipeline.TaskReconcile)
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pending = append(q.pending, t)
	q.committedAt[t.Key] = q.clock.Now()
	return t.Key
}

func (q *fakeQueue) claim(context.Context, pipeline.Lease, pipeline.Batch) ([]pipeline.Task, error) {
	q.mu.Lock()
	out := q.pending
	q.pending = nil
	for _, t := range out {
		q.latency[t.Key] = q.clock.Now().Sub(q.committedAt[t.Key])
	}
	during := q.duringClaim
	q.duringClaim = nil
	q.mu.Unlock()
	if during != nil {
		during()
	}
	return out, nil
}

// claimable answers the failsafe probe from what is committed now.
func (q *fakeQueue) claimable(_ context.Context, _, _ int, batches []pipeline.Batch) ([]bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]bool, len(batches))
	for i := range out {
		out[i] = len(q.pending) > 0
	}
	return out, nil
}

func (q *fakeQueue) claimedAfter(key pipeline.TaskKey) (time.Duration, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	d, ok := q.latency[key]
	return d, ok
}

// untilClaimed lets fake time run — each idle wait elapses in full — until
// key is claimed, and returns how long after its commit that was.
func untilClaimed(t *testing.T, b *dispatcherBundle, q *fakeQueue, key pipeline.TaskKey) time.Duration {
	t.Helper()
	for range 100 {
		w := b.d.testSignals.idle.WaitOrTimeout(t)
		if d, ok := q.claimedAfter(key); ok {
			return d
		}
		b.clock.Advance(w)
	}
	t.Fatal("pend never claimed")
	return 0
}

// idleUntil lets the loop back off until its idle wait reaches want.
func idleUntil(t *testing.T, b *dispatcherBundle, want time.Duration) {
	t.Helper()
	for range 100 {
		w := b.d.testSignals.idle.WaitOrTimeout(t)
		if w >= want {
			return
		}
		b.clock.Advance(w)
	}
	t.Fatalf("idle wait never reached %s", want)
}

// Every committed pend is claimed within a bound whatever the timing of its
// wake: one lost around notify_gated's window, one that never came, one
// after a long idle period. Fake time makes each bound exact.
func TestDispatcher_NoStalls(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason string
		// pend commits a pend at an adversarial moment and returns its key.
		// It is called with the loop idle and its current wait signalled
		// but unread, and leaves at most the then-current one unread.
		pend func(t *testing.T, b *dispatcherBundle, q *fakeQueue) pipeline.TaskKey
		// within bounds the claim latency in fake time.
		within time.Duration
	}{
		"CommittedDuringASweepItsWakeCoalesced": {
			reason: "a pend committed while the wake's sweep ran, its notify suppressed by the gate, is claimed by a trailing sweep",
			pend: func(t *testing.T, b *dispatcherBundle, q *fakeQueue) pipeline.TaskKey {
				b.d.testSignals.idle.WaitOrTimeout(t)
				var key pipeline.TaskKey
				done := make(chan struct{})
				q.mu.Lock()
				q.duringClaim = func() { key = q.commit(); close(done) }
				q.mu.Unlock()
				b.wake.fire()
				<-done
				require.Equal(t, 0, b.d.testSignals.swept.WaitOrTimeout(t))
				return key
			},
			within: testPollMin,
		},
		"CommittedWithinTheGateWindowAfterAWake": {
			reason: "a pend committed 40ms after a wake, its notify coalesced into it, is claimed by a trailing sweep",
			pend: func(t *testing.T, b *dispatcherBundle, q *fakeQueue) pipeline.TaskKey {
				b.d.testSignals.idle.WaitOrTimeout(t)
				b.wake.fire()
				require.Equal(t, 0, b.d.testSignals.swept.WaitOrTimeout(t))
				require.Equal(t, testPollMin, b.d.testSignals.idle.WaitOrTimeout(t))
				b.clock.Advance(40 * time.Millisecond) // the +25ms sweep runs, racing the commit
				return q.commit()
			},
			within: 2 * testPollMin, // claimed by the +25ms sweep or the +75ms one
		},
		"CommittedRightAfterAnEmptySweepWithNoWake": {
			reason: "a pend whose wake never came, committed just after a sweep found nothing, waits one short idle wait",
			pend: func(_ *testing.T, _ *dispatcherBundle, q *fakeQueue) pipeline.TaskKey {
				return q.commit()
			},
			within: testPollMin,
		},
		"CommittedAfterALongIdleWithNoWake": {
			reason: "after a long idle the failsafe poll is at its cap: a pend whose wake was lost waits at most pollMax",
			pend: func(t *testing.T, b *dispatcherBundle, q *fakeQueue) pipeline.TaskKey {
				idleUntil(t, b, testPollMax)
				b.clock.Advance(testPollMax / 10) // a moment into the capped wait
				key := q.commit()
				b.clock.Advance(testPollMax - testPollMax/10)
				return key
			},
			within: testPollMax,
		},
		"CommittedAfterALongIdleWithAWake": {
			reason: "a wake after a long idle claims at once",
			pend: func(t *testing.T, b *dispatcherBundle, q *fakeQueue) pipeline.TaskKey {
				idleUntil(t, b, testPollMax)
				key := q.commit()
				b.wake.fire()
				return key
			},
			within: 0,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupDispatcher(t)
			q := newFakeQueue(b.clock)
			b.claimer.ClaimFn, b.claimer.ClaimableFn = q.claim, q.claimable
			b.start(t)
			require.Equal(t, 0, b.d.testSignals.swept.WaitOrTimeout(t), "the queue starts empty")
			key := tc.pend(t, b, q)
			got := untilClaimed(t, b, q, key)
			require.LessOrEqual(t, got, tc.within, tc.reason)
		})
	}
}

// A wake or a routing change that lands while a sweep runs is never lost:
// another sweep follows at once, with no timer involved (the fake clock
// never moves here).
func TestDispatcher_SignalsDuringASweepAreNotLost(t *testing.T) {
	t.Parallel()

	t.Run("WorkReadyWake", func(t *testing.T) {
		t.Parallel()
		b := setupDispatcher(t)
		q := newFakeQueue(b.clock)
		b.claimer.ClaimFn = q.claim
		var key pipeline.TaskKey
		q.duringClaim = func() { key = q.commit(); b.wake.fire() } // a pend and its wake, mid-sweep
		b.start(t)
		require.Equal(t, 0, b.d.testSignals.swept.WaitOrTimeout(t))
		require.Equal(t, 1, b.d.testSignals.swept.WaitOrTimeout(t), "the wake that landed mid-sweep sweeps again")
		d, ok := q.claimedAfter(key)
		require.True(t, ok)
		require.Zero(t, d)
	})

	t.Run("RoutingChange", func(t *testing.T) {
		t.Parallel()
		b := setupDispatcher(t)
		var mu sync.Mutex
		bcast := make(chan struct{})
		free := 0
		b.routes.ChangedFn = func() <-chan struct{} { mu.Lock(); defer mu.Unlock(); return bcast }
		checked := make(chan struct{}, 1)
		b.routes.LocalFreeFn = func(manifest.KindVersion) (int, bool) {
			mu.Lock()
			defer mu.Unlock()
			n := free
			if n == 0 {
				// A worker frees a slot just after this check: the
				// registry closes its broadcast channel.
				free = 16
				close(bcast)
				bcast = make(chan struct{})
				select {
				case checked <- struct{}{}:
				default:
				}
			}
			return n, true
		}
		b.claimsFrom(tasksOf(pairVPC, 1))
		b.start(t)
		<-checked
		require.Equal(t, 0, b.d.testSignals.swept.WaitOrTimeout(t), "no worker slot: no claim")
		require.Equal(t, 1, b.d.testSignals.swept.WaitOrTimeout(t), "the slot freed mid-sweep sweeps again")
	})
}
