package broker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A stream gets its burst at once, is then paced to the rate, and a
// cancelled stream stops waiting.
func TestStreamRate_BurstThenPaced(t *testing.T) {
	t.Parallel()
	r := newStreamRate(100) // burst 200
	for i := range 200 {
		require.True(t, r.wait(context.Background(), 1), "message %d of the burst", i)
	}
	r.tokens, r.last = 0, time.Now()
	start := time.Now()
	require.True(t, r.wait(context.Background(), 1))
	require.GreaterOrEqual(t, time.Since(start), 5*time.Millisecond, "past the burst a message waits for a token (10ms at 100/s)")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	slow := newStreamRate(1)
	slow.tokens, slow.last = 0, time.Now()
	require.False(t, slow.wait(ctx, 1), "a cancelled stream stops waiting")
	require.True(t, (*streamRate)(nil).wait(ctx, 1), "no limiter: never waits")
}

// A batch of results costs one token each: a worker cannot escape the
// rate by packing more results into fewer messages.
func TestStreamRate_ABatchCostsEachResult(t *testing.T) {
	t.Parallel()
	r := newStreamRate(1000) // burst 2000
	require.True(t, r.wait(context.Background(), 2000), "the whole burst in one batch")
	start := time.Now()
	require.True(t, r.wait(context.Background(), 20))
	require.GreaterOrEqual(t, time.Since(start), 15*time.Millisecond, "20 results past the burst wait for 20 tokens (20ms at 1000/s)")
}
