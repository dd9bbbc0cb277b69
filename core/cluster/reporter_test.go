package cluster_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/cluster"
	"github.com/converge-run/converge/core/engine/enginetest"
	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/membership"
)

// registryFns is a cluster.Registry of function fields.
type registryFns struct {
	UpsertFn       func(ctx context.Context, m membership.Member) (time.Time, error)
	DeregisterFn   func(ctx context.Context, id string) (bool, error)
	AssignShardsFn func(ctx context.Context, id string, total int, liveness time.Duration) (shard.Range, error)
}

func (f *registryFns) Upsert(ctx context.Context, m membership.Member) (time.Time, error) {
	return f.UpsertFn(ctx, m)
}

func (f *registryFns) Deregister(ctx context.Context, id string) (bool, error) {
	return f.DeregisterFn(ctx, id)
}

func (f *registryFns) AssignShards(ctx context.Context, id string, total int, l time.Duration) (shard.Range, error) {
	return f.AssignShardsFn(ctx, id, total, l)
}

func TestReporter_Beats(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := enginetest.NewClock(t0)
	var mu sync.Mutex
	var beats []membership.Member
	fail := true
	reg := &registryFns{UpsertFn: func(_ context.Context, m membership.Member) (time.Time, error) {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			fail = false
			return time.Time{}, errors.New("connection refused")
		}
		beats = append(beats, m)
		return t0, nil
	}}
	registered := make(chan struct{}, 4)
	r := &cluster.Reporter{Registry: reg, ID: "control-1", Role: "control", Every: 10 * time.Second, Clock: clock,
		Shards: cluster.NewShardSet(shard.Between(0, 127)), InFlight: func() int { return 7 }, Log: zerolog.Nop(),
		OnRegistered: func() { registered <- struct{}{} }}
	r.TestSignals.Init()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	require.Error(t, r.TestSignals.Beat.WaitOrTimeout(t), "a failed first beat is retried, not fatal")
	select {
	case <-r.Beaten():
		t.Fatal("Beaten closed before a beat landed")
	default:
	}
	require.True(t, clock.WaitForWaiters(1, 5*time.Second))
	clock.Advance(10 * time.Second)
	require.NoError(t, r.TestSignals.Beat.WaitOrTimeout(t))
	<-r.Beaten()
	select {
	case <-registered:
	case <-time.After(10 * time.Second):
		t.Fatal("OnRegistered did not run after the first beat landed")
	}

	r.Kick()
	require.NoError(t, r.TestSignals.Beat.WaitOrTimeout(t), "Kick beats without waiting for the clock")
	cancel()
	require.NoError(t, <-done)

	require.Empty(t, registered, "OnRegistered runs once, for the first beat only")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, beats, 2)
	for _, m := range beats {
		require.Equal(t, "control-1", m.ID)
		require.Equal(t, &shard.Range{Lo: 0, Hi: 128}, m.Shards)
		require.Equal(t, 7, m.InFlight)
		require.Equal(t, t0, m.StartedAt, "started is stamped from the injected clock")
	}
}

// After its liveness lock is held again, the member's next beat that lands
// is a rejoin (it wakes the peers); a failed one leaves the rejoin to the
// next, and later beats are plain.
func TestReporter_RejoinMarksTheNextBeatThatLands(t *testing.T) {
	t.Parallel()
	clock := enginetest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var mu sync.Mutex
	var rejoins []bool
	failNext := false
	reg := &registryFns{UpsertFn: func(_ context.Context, m membership.Member) (time.Time, error) {
		mu.Lock()
		defer mu.Unlock()
		rejoins = append(rejoins, m.Rejoin)
		if failNext {
			failNext = false
			return time.Time{}, errors.New("connection refused")
		}
		return clock.Now(), nil
	}}
	r := &cluster.Reporter{Registry: reg, ID: "broker-1", Role: "broker", Every: 10 * time.Second, Clock: clock, Log: zerolog.Nop()}
	r.TestSignals.Init()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	require.NoError(t, r.TestSignals.Beat.WaitOrTimeout(t), "the first beat")

	mu.Lock()
	failNext = true
	mu.Unlock()
	r.Rejoin()
	require.Error(t, r.TestSignals.Beat.WaitOrTimeout(t), "the rejoin beat fails")
	r.Kick()
	require.NoError(t, r.TestSignals.Beat.WaitOrTimeout(t), "the next beat lands")
	r.Kick()
	require.NoError(t, r.TestSignals.Beat.WaitOrTimeout(t))
	cancel()
	require.NoError(t, <-done)

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []bool{false, true, true, false}, rejoins,
		"plain, the failed rejoin, the rejoin again, plain")
}

// A beat in flight when the shutdown begins runs to its answer, its
// context not cancelled: so the host's Deregister, which follows Run, comes
// after the beat's upsert has run in the database, never before it (an
// upsert abandoned by its client can still run after the delete and write
// the row back after the member left).
func TestReporter_ABeatInFlightOutlivesTheShutdown(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}), make(chan struct{})
	upsertErr := make(chan error, 1)
	reg := &registryFns{UpsertFn: func(ctx context.Context, _ membership.Member) (time.Time, error) {
		close(started)
		<-release
		upsertErr <- ctx.Err()
		return time.Now(), nil
	}}
	r := &cluster.Reporter{Registry: reg, ID: "all-1", Role: "all", Every: time.Hour, Log: zerolog.Nop()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	<-started
	cancel()
	close(release)
	require.NoError(t, <-upsertErr, "the shutdown cancelled the beat's upsert: a client abandons the statement, which the database may still run")
	require.NoError(t, <-done)
}
