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
	"github.com/converge-run/converge/core/store/notify"
	"github.com/converge-run/converge/db/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

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

// A kind applied after the cache's first read but before its LISTEN took
// effect (Subscribe returns before the listener issues it) sends a
// notification nobody hears; the cache reads again once the LISTEN is in,
// not at its failsafe. In a CI run, a test's kind applied just after
// converge started went unseen for the 30 s failsafe, and its resource
// never ran.
func TestCache_ReadsAgainOnceItsChannelIsListened(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := notify.NewListener(pgtest.Pool(t), zerolog.Nop())
	var applied atomic.Bool
	vpc := store.Kind{Name: "vpc", Version: "v1", ManifestGen: 1}
	c := kinds.New(listerFn(func(context.Context) ([]store.Kind, error) {
		if applied.Load() {
			return []store.Kind{vpc}, nil
		}
		return nil, nil
	}), l, time.Hour, zerolog.Nop())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case <-c.Loaded():
	case <-time.After(10 * time.Second):
		t.Fatal("the cache did not load")
	}
	// Applied now, before the listener runs: no LISTEN yet, so no wake.
	applied.Store(true)
	go func() { _ = l.Run(ctx) }()
	require.Eventually(t, func() bool {
		_, ok := c.Snapshot().Get(manifest.KindVersion{Kind: "vpc", Version: "v1"})
		return ok
	}, 10*time.Second, 10*time.Millisecond, "the kind is read once the LISTEN is in, not at the hour's failsafe")
	cancel()
	require.NoError(t, <-done)
}

// A live policy edit (updateKindConfig) changes no manifest: it announces on
// kind_config_changed, not kind_manifest_changed. The cache serves the kind's
// policy to the resyncer, so it reads again on either, not at its failsafe.
func TestCache_ReadsAgainOnAPolicyEdit(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := pgtest.Pool(t)
	st := store.New(pool, nil)
	_, _, err := st.ApplyManifest(ctx, []byte(`{"kind":"vpc","reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`))
	require.NoError(t, err)
	l := notify.NewListener(pool, zerolog.Nop())
	c := kinds.New(st, l, time.Hour, zerolog.Nop())
	listening := l.Subscribe("kind_config_changed", 1)
	defer listening.Close()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	go func() { _ = l.Run(ctx) }()
	for _, ch := range []<-chan struct{}{c.Loaded(), listening.Listening()} {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("the cache did not load, or the listener did not LISTEN")
		}
	}
	kv := manifest.KindVersion{Kind: "vpc", Version: "v1"}
	every := 600
	_, err = st.UpdateKindConfig(ctx, "vpc", "v1", store.KindConfigPatch{ResyncIntervalSecs: &every})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		k, ok := c.Snapshot().Get(kv)
		return ok && k.Config.ResyncIntervalSecs == every
	}, 10*time.Second, 10*time.Millisecond, "the edited policy is read on its NOTIFY, not at the hour's failsafe")
	cancel()
	require.NoError(t, <-done)
}
