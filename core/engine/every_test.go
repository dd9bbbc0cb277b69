package engine_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/engine"
)

// Every runs its step on each tick and returns nil, with no step after,
// once its context ends.
func TestEvery_RunsEachIntervalUntilCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	var n atomic.Int32
	done := make(chan error, 1)
	go func() { done <- engine.Every(ctx, 5*time.Millisecond, func() { n.Add(1) }) }()
	require.Eventually(t, func() bool { return n.Load() >= 3 }, 10*time.Second, time.Millisecond, "three ticks ran")
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Every did not return after its context ended")
	}
	after := n.Load()
	time.Sleep(20 * time.Millisecond) // the scenario: time passes after the return
	require.Equal(t, after, n.Load(), "no step after the return")
}
