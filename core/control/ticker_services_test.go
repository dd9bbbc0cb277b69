package control

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/kinds"
	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/maintenance"
)

type listerFn func(ctx context.Context) ([]store.Kind, error)

func (f listerFn) ListKinds(ctx context.Context) ([]store.Kind, error) { return f(ctx) }

func kindCache(t *testing.T, ks ...store.Kind) *kinds.Cache {
	t.Helper()
	c := kinds.New(listerFn(func(context.Context) ([]store.Kind, error) { return ks, nil }), nil, 0, zerolog.Nop())
	require.NoError(t, c.Reload(context.Background()))
	return c
}

func TestResyncer(t *testing.T) {
	t.Parallel()
	type call struct {
		Kind      string
		Interval  time.Duration
		Recompose bool
		Shards    shard.Range
	}
	cases := map[string]struct {
		reason string
		kinds  []store.Kind
		shards shard.Range
		want   []call
	}{
		"OnlyOptedInKinds": {
			reason: "a kind with resync_interval_secs 0 and a reactor kind do no database work",
			kinds: []store.Kind{
				{Name: "a", Version: "v1", Config: store.KindConfig{ResyncIntervalSecs: 60}},
				{Name: "b", Version: "v1"},
				{Name: "c", Version: "v1", IsReactor: true, Config: store.KindConfig{ResyncIntervalSecs: 5}},
				{Name: "d", Version: "v1", Config: store.KindConfig{ResyncIntervalSecs: 30, ResyncRecomposes: true}},
			},
			shards: shard.Between(16, 47),
			want: []call{
				{Kind: "a", Interval: time.Minute, Shards: shard.Between(16, 47)},
				{Kind: "d", Interval: 30 * time.Second, Recompose: true, Shards: shard.Between(16, 47)},
			},
		},
		"NoShards": {
			reason: "a pod that owns no shard resyncs nothing",
			kinds:  []store.Kind{{Name: "a", Version: "v1", Config: store.KindConfig{ResyncIntervalSecs: 60}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			calls := make(chan call, 10)
			r := &Resyncer{
				Maintenance: resyncStoreFn(func(_ context.Context, p maintenance.Resync, rng shard.Range, limit int) (int, error) {
					require.Equal(t, 1000, limit)
					calls <- call{Kind: p.Kind, Interval: p.Interval, Recompose: p.Recompose, Shards: rng}
					return 1, nil
				}),
				Kinds: kindCache(t, tc.kinds...), Shards: newShardSet(tc.shards), Log: zerolog.Nop(), Clock: newClock(),
			}
			r.TestSignals.Init()
			runService(t, r)
			require.Equal(t, len(tc.want), r.TestSignals.Ticked.WaitOrTimeout(t), tc.reason)
			close(calls)
			var got []call
			for c := range calls {
				got = append(got, c)
			}
			require.Equal(t, tc.want, got, tc.reason)
		})
	}

	t.Run("TicksOnItsClock", func(t *testing.T) {
		t.Parallel()
		clock := newClock()
		r := &Resyncer{Maintenance: resyncStoreFn(func(context.Context, maintenance.Resync, shard.Range, int) (int, error) {
			return 0, errors.New("boom") // logged, not fatal
		}), Kinds: kindCache(t, store.Kind{Name: "a", Config: store.KindConfig{ResyncIntervalSecs: 1}}),
			Shards: allShards(), Log: zerolog.Nop(), Clock: clock, Every: time.Minute}
		r.TestSignals.Init()
		runService(t, r)
		r.TestSignals.Ticked.WaitOrTimeout(t)
		r.TestSignals.Ticked.RequireEmpty(t)
		advanceOnce(t, clock, time.Minute)
		require.Equal(t, 1, r.TestSignals.Ticked.WaitOrTimeout(t), "a failed pass is retried on the next tick")
	})
}

func TestResyncer_AnnouncesWorkReadyAfterATickThatPended(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		reason string
		n      int
		want   int
	}{
		"Pended":  {reason: "a tick that re-pended resources sends one work_ready after its passes", n: 3, want: 1},
		"Nothing": {reason: "a tick that pended nothing sends nothing", n: 0, want: 0},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			notified := 0
			r := &Resyncer{Maintenance: &resyncStoreFns{
				RequeueForResyncFn: func(context.Context, maintenance.Resync, shard.Range, int) (int, error) { return tc.n, nil },
				NotifyWorkReadyFn:  func(context.Context) error { notified++; return nil },
			}, Kinds: kindCache(t, store.Kind{Name: "a", Config: store.KindConfig{ResyncIntervalSecs: 1}},
				store.Kind{Name: "b", Config: store.KindConfig{ResyncIntervalSecs: 1}}),
				Shards: allShards(), Log: zerolog.Nop(), Clock: newClock()}
			r.TestSignals.Init()
			runService(t, r)
			require.Equal(t, 2, r.TestSignals.Ticked.WaitOrTimeout(t))
			require.Equal(t, tc.want, notified, tc.reason)
		})
	}
}

func TestMemberGC(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason string
		ttl    time.Duration
		n      int
		err    error
		want   time.Duration
	}{
		"DefaultTTL": {reason: "a zero TTL is the 5 minute default", n: 2, want: 5 * time.Minute},
		"OwnTTL":     {reason: "a set TTL is passed through", ttl: time.Hour, want: time.Hour},
		"Error":      {reason: "a failed pass is logged and retried", err: errors.New("boom"), want: 5 * time.Minute},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			clock := newClock()
			ttls := make(chan time.Duration, 10)
			g := &MemberGC{Members: staleMembersFn(func(_ context.Context, ttl time.Duration) (int, error) {
				ttls <- ttl
				return tc.n, tc.err
			}), TTL: tc.ttl, Clock: clock, Log: zerolog.Nop()}
			g.TestSignals.Init()
			runService(t, g)
			require.Equal(t, tc.n, g.TestSignals.Collected.WaitOrTimeout(t), tc.reason)
			require.Equal(t, tc.want, <-ttls, tc.reason)
			advanceOnce(t, clock, time.Minute)
			g.TestSignals.Collected.WaitOrTimeout(t)
		})
	}
}

func TestCountFolder(t *testing.T) {
	t.Parallel()
	clock := newClock()
	folds := 0
	f := &CountFolder{Fold: func(context.Context) (int, error) {
		folds++
		if folds == 2 {
			return 0, errors.New("lock busy")
		}
		return folds * 10, nil
	}, Clock: clock, Log: zerolog.Nop()}
	f.TestSignals.Init()
	runService(t, f)
	require.Equal(t, 10, f.TestSignals.Folded.WaitOrTimeout(t))
	advanceOnce(t, clock, time.Second)
	require.Equal(t, 0, f.TestSignals.Folded.WaitOrTimeout(t), "a failed fold reports 0 and keeps going")
	advanceOnce(t, clock, time.Second)
	require.Equal(t, 30, f.TestSignals.Folded.WaitOrTimeout(t))
}

func TestStatisticsGuard(t *testing.T) {
	t.Parallel()
	clock := newClock()
	ticks := 0
	g := &StatisticsGuard{Analyze: func(context.Context) ([]string, error) {
		ticks++
		switch ticks {
		case 1:
			return []string{"resource_phases", "resources"}, nil
		case 2:
			return nil, errors.New("permission denied")
		}
		return nil, nil
	}, Clock: clock, Log: zerolog.Nop()}
	g.TestSignals.Init()
	runService(t, g)
	require.Equal(t, []string{"resource_phases", "resources"}, g.TestSignals.Analyzed.WaitOrTimeout(t))
	advanceOnce(t, clock, 10*time.Second)
	require.Empty(t, g.TestSignals.Analyzed.WaitOrTimeout(t), "a failed tick reports none and the guard keeps going")
	advanceOnce(t, clock, 10*time.Second)
	require.Empty(t, g.TestSignals.Analyzed.WaitOrTimeout(t))
	require.Equal(t, 3, ticks, "one check every 10 s")
}
