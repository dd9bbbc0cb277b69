package kinds_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/kinds"
	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store"
)

type listerFn func(ctx context.Context) ([]store.Kind, error)

func (f listerFn) ListKinds(ctx context.Context) ([]store.Kind, error) { return f(ctx) }

// A reload that fails (the first read after a database restart) is retried
// within the backoff, not after the failsafe re-read: the NOTIFY of a kind
// applied meanwhile is gone.
func TestCache_AFailedReloadIsRetriedBeforeTheFailsafe(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	vpc := store.Kind{Name: "vpc", Version: "v1", ManifestGen: 1}
	c := kinds.New(listerFn(func(context.Context) ([]store.Kind, error) {
		if calls.Add(1) <= 2 {
			return nil, errors.New("conn closed")
		}
		return []store.Kind{vpc}, nil
	}), nil, time.Hour, zerolog.Nop())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case <-c.Loaded():
	case <-time.After(10 * time.Second):
		t.Fatal("the cache did not load within 10 s of two failed reads (its failsafe is an hour)")
	}
	_, ok := c.Snapshot().Get(manifest.KindVersion{Kind: "vpc", Version: "v1"})
	require.True(t, ok)
	require.Equal(t, int32(3), calls.Load())
	cancel()
	require.NoError(t, <-done)
}
