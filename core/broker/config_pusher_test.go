package broker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

func setupConfigPusher(t *testing.T, served ...string) (*configPusher, *fakeClock, *fakeWaker, *fakeConfigs, *[]*workerv1.ConfigPush) {
	t.Helper()
	clock := newFakeClock()
	wake := newFakeWaker()
	configs := &fakeConfigs{DefaultFn: func(context.Context, string) (store.ProviderConfig, bool, error) {
		return store.ProviderConfig{}, false, nil
	}}
	var pushed []*workerv1.ConfigPush
	targets := &fakeTargets{
		ServedFn: func() []manifest.KindVersion {
			var out []manifest.KindVersion
			for _, k := range served {
				out = append(out, manifest.KindVersion{Kind: k, Version: "v1"})
			}
			return out
		},
		PushFn: func(_ context.Context, kind string, p *workerv1.ConfigPush) {
			require.Equal(t, kind, p.GetKind())
			pushed = append(pushed, p)
		},
	}
	c := &configPusher{configs: configs, targets: targets, wakes: wake, failsafe: configFailsafe, clock: clock, log: testLog(t)}
	c.testSignals.pushed.Init()
	return c, clock, wake, configs, &pushed
}

func TestConfigPusher(t *testing.T) {
	t.Parallel()

	run := func(t *testing.T, c *configPusher) (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		return func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(5 * time.Second):
				t.Fatal("config pusher did not stop")
			}
		}
	}

	t.Run("StopsImmediately", func(t *testing.T) {
		t.Parallel()
		c, clock, _, _, _ := setupConfigPusher(t, "vpc")
		stop := run(t, c)
		clock.waits.WaitOrTimeout(t)
		stop()
	})

	t.Run("PushesOnAWakeAndOnTheFailsafe", func(t *testing.T) {
		t.Parallel()
		c, clock, wake, configs, pushed := setupConfigPusher(t, "vpc")
		rev := time.Unix(100, 0)
		configs.DefaultFn = func(context.Context, string) (store.ProviderConfig, bool, error) {
			return store.ProviderConfig{Kind: "vpc", Name: "default", IsDefault: true, UpdatedAt: rev}, true, nil
		}
		stop := run(t, c)
		defer stop()
		require.Equal(t, configFailsafe, clock.waits.WaitOrTimeout(t))
		wake.fire()
		require.Equal(t, 1, c.testSignals.pushed.WaitOrTimeout(t), "a providerconfig_changed wake pushes")
		clock.Advance(clock.waits.WaitOrTimeout(t))
		require.Equal(t, 0, c.testSignals.pushed.WaitOrTimeout(t), "the failsafe re-reads but the revision has not moved")
		require.Len(t, *pushed, 1)
		require.Equal(t, rev.UnixNano(), (*pushed)[0].GetConfig().GetRevision())
	})
}

// A push goes out once per revision of a served kind's default config.
func TestConfigPusherPush(t *testing.T) {
	t.Parallel()
	pc := func(sec int64) store.ProviderConfig {
		return store.ProviderConfig{Kind: "vpc", Name: "default", IsDefault: true, UpdatedAt: time.Unix(sec, 0)}
	}
	type read struct {
		pc  store.ProviderConfig
		ok  bool
		err error
	}
	cases := map[string]struct {
		reason      string
		last        map[string]int64
		read        read
		wantPushes  int
		wantDeleted bool
	}{
		"FirstSightPushes": {
			reason: "a kind seen for the first time gets its config",
			read:   read{pc: pc(1), ok: true}, wantPushes: 1,
		},
		"UnchangedRevisionSkips": {
			reason: "the same revision is not pushed twice",
			last:   map[string]int64{"vpc": time.Unix(1, 0).UnixNano()},
			read:   read{pc: pc(1), ok: true},
		},
		"NewRevisionPushes": {
			reason: "an edit moves the revision",
			last:   map[string]int64{"vpc": time.Unix(1, 0).UnixNano()},
			read:   read{pc: pc(2), ok: true}, wantPushes: 1,
		},
		"DeletedDefaultPushesDeleted": {
			reason: "a removed default tells the workers so",
			last:   map[string]int64{"vpc": time.Unix(1, 0).UnixNano()},
			read:   read{ok: false}, wantPushes: 1, wantDeleted: true,
		},
		"ReadErrorSkipsTheKind": {
			reason: "a failed read pushes nothing and is retried at the next wake",
			read:   read{err: errors.New("connection reset")},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, _, _, configs, pushed := setupConfigPusher(t, "vpc")
			configs.DefaultFn = func(context.Context, string) (store.ProviderConfig, bool, error) {
				return tc.read.pc, tc.read.ok, tc.read.err
			}
			last := tc.last
			if last == nil {
				last = map[string]int64{}
			}
			require.Equal(t, tc.wantPushes, c.push(context.Background(), last), tc.reason)
			require.Len(t, *pushed, tc.wantPushes, tc.reason)
			if tc.wantPushes > 0 {
				require.Equal(t, tc.wantDeleted, (*pushed)[0].GetDeleted(), tc.reason)
			}
		})
	}
}
