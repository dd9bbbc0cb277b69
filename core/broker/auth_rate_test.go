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
		require.True(t, r.wait(context.Background()), "message %d of the burst", i)
	}
	r.tokens, r.last = 0, time.Now()
	start := time.Now()
	require.True(t, r.wait(context.Background()))
	require.GreaterOrEqual(t, time.Since(start), 5*time.Millisecond, "past the burst a message waits for a token (10ms at 100/s)")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	slow := newStreamRate(1)
	slow.tokens, slow.last = 0, time.Now()
	require.False(t, slow.wait(ctx), "a cancelled stream stops waiting")
	require.True(t, (*streamRate)(nil).wait(ctx), "no limiter: never waits")
}
