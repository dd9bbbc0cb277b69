package broker

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/testlog"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// setupConfigPusher is a config pusher over fakes that push each revision
// of a kind once (as the registry does for one session).
func setupConfigPusher(t *testing.T, kinds ...string) (*configPusher, *fakeClock, *fakeWaker, *fakeConfigs, *fakeTargets, *[]*workerv1.ConfigPush) {
	t.Helper()
	clock := newFakeClock()
	wake := newFakeWaker()
	configs := &fakeConfigs{DefaultFn: func(context.Context, string) (store.ProviderConfig, bool, error) {
		return store.ProviderConfig{}, false, nil
	}}
	var pushed []*workerv1.ConfigPush
	last := map[string]int64{}
	targets := &fakeTargets{
		KindsFn: func() []string { return kinds },
		PushFn: func(_ context.Context, kind string, p *workerv1.ConfigPush, rev int64) int {
			require.Equal(t, kind, p.GetKind())
			if prev, ok := last[kind]; ok && prev == rev {
				return 0
			}
			last[kind] = rev
			pushed = append(pushed, p)
			return 1
		},
		joins: make(chan struct{}, 1),
	}
	c := &configPusher{configs: configs, targets: targets, wakes: wake, failsafe: configFailsafe, clock: clock, log: testLog(t)}
	c.testSignals.pushed.Init()
	return c, clock, wake, configs, targets, &pushed
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
	revision := func(configs *fakeConfigs, rev time.Time) {
		configs.DefaultFn = func(context.Context, string) (store.ProviderConfig, bool, error) {
			return store.ProviderConfig{Kind: "vpc", Name: "default", IsDefault: true, UpdatedAt: rev}, true, nil
		}
	}

	t.Run("StopsImmediately", func(t *testing.T) {
		t.Parallel()
		c, clock, _, _, _, _ := setupConfigPusher(t, "vpc")
		stop := run(t, c)
		clock.waits.WaitOrTimeout(t)
		stop()
	})

	t.Run("PushesOnAWakeAndOnTheFailsafe", func(t *testing.T) {
		t.Parallel()
		c, clock, wake, configs, _, pushed := setupConfigPusher(t, "vpc")
		rev := time.Unix(100, 0)
		revision(configs, rev)
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

	t.Run("PushesWhenAWorkerJoins", func(t *testing.T) {
		t.Parallel()
		c, clock, _, configs, targets, pushed := setupConfigPusher(t, "vpc")
		revision(configs, time.Unix(100, 0))
		stop := run(t, c)
		defer stop()
		require.Equal(t, configFailsafe, clock.waits.WaitOrTimeout(t))
		targets.joins <- struct{}{}
		require.Equal(t, configJoinPace, clock.waits.WaitOrTimeout(t), "the joins of a burst share a round")
		clock.Advance(configJoinPace)
		require.Equal(t, 1, c.testSignals.pushed.WaitOrTimeout(t), "the worker that joined gets the configs")
		require.Len(t, *pushed, 1)
	})

	// An edit committed while the pusher paces a join is pushed at once, not
	// after the pace: a task for the kind dispatched meanwhile would run
	// with the old config (the provider guide's first default config,
	// created a moment after its worker joined, greeted with the old
	// salutation).
	t.Run("AnEditDuringAJoinsPaceIsPushedAtOnce", func(t *testing.T) {
		t.Parallel()
		c, clock, wake, configs, targets, pushed := setupConfigPusher(t, "vpc")
		stop := run(t, c)
		defer stop()
		require.Equal(t, configFailsafe, clock.waits.WaitOrTimeout(t))
		targets.joins <- struct{}{}
		require.Equal(t, configJoinPace, clock.waits.WaitOrTimeout(t), "the join is paced")
		rev := time.Unix(200, 0)
		revision(configs, rev)
		wake.fire()
		require.Equal(t, 1, c.testSignals.pushed.WaitOrTimeout(t), "the edit is pushed without waiting out the pace")
		require.Len(t, *pushed, 1)
		require.Equal(t, rev.UnixNano(), (*pushed)[0].GetConfig().GetRevision())
	})

	t.Run("AnOutageEndsTheRoundQuietly", func(t *testing.T) {
		t.Parallel()
		var buf testlog.Buffer
		c, _, _, configs, _, pushed := setupConfigPusher(t, "a", "b", "c")
		c.log = testLog(t).Output(&buf)
		c.outage = &engine.Outage{Log: testLog(t)}
		reads := 0
		configs.DefaultFn = func(context.Context, string) (store.ProviderConfig, bool, error) {
			reads++
			return store.ProviderConfig{}, false, syscall.ECONNREFUSED
		}
		for range 3 {
			require.Zero(t, c.push(context.Background()))
		}
		require.Equal(t, 3, reads, "an unreachable database ends each round at its first read")
		require.Zero(t, buf.Count(`"level":"warn"`), "the outage is logged once, by the outage reporter:\n%s", buf.String())
		require.True(t, c.outage.Down())
		require.Empty(t, *pushed)
	})
}

// A config revision reaches every worker serving its kind once: ready or
// not (a provider often waits for its config to become ready), a worker
// that joined after a round gets the current revision at the next one, and
// a worker whose queue stays full is skipped without holding up the rest.
func TestConfigPusherPush(t *testing.T) {
	t.Parallel()
	kv := manifest.KindVersion{Kind: "vpc", Version: "v1"}
	pc := func(sec int64) store.ProviderConfig {
		return store.ProviderConfig{Kind: "vpc", Name: "default", IsDefault: true, Spec: []byte(`{"region":"x"}`), UpdatedAt: time.Unix(sec, 0)}
	}
	type read struct {
		pc  store.ProviderConfig
		ok  bool
		err error
	}
	cases := map[string]struct {
		reason      string
		ready       bool
		had         map[string]int64 // the revisions the session got before
		read        read
		wantPushes  int
		wantDeleted bool
	}{
		"FirstSightPushes": {
			reason: "a session's first round gets the current config", ready: true,
			read: read{pc: pc(1), ok: true}, wantPushes: 1,
		},
		"AnUnreadyWorkerGetsItToo": {
			reason: "a worker not ready (awaiting its config, say) still gets every edit",
			read:   read{pc: pc(1), ok: true}, wantPushes: 1,
		},
		"UnchangedRevisionSkips": {
			reason: "the same revision is not pushed twice", ready: true,
			had:  map[string]int64{"vpc": time.Unix(1, 0).UnixNano()},
			read: read{pc: pc(1), ok: true},
		},
		"NewRevisionPushes": {
			reason: "an edit moves the revision", ready: true,
			had:  map[string]int64{"vpc": time.Unix(1, 0).UnixNano()},
			read: read{pc: pc(2), ok: true}, wantPushes: 1,
		},
		"DeletedDefaultPushesDeleted": {
			reason: "a removed default tells the workers so", ready: true,
			had:  map[string]int64{"vpc": time.Unix(1, 0).UnixNano()},
			read: read{ok: false}, wantPushes: 1, wantDeleted: true,
		},
		"ReadErrorSkipsTheKind": {
			reason: "a failed read pushes nothing and is retried at the next wake", ready: true,
			read: read{err: errors.New("statement timeout")},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			reg := newRegistry(testLog(t))
			s := &session{id: "w#1", workerID: "w", maxIn: 4, ready: map[manifest.KindVersion]bool{kv: tc.ready}, configs: tc.had,
				out: make(chan *workerv1.WorkStreamResponse, 8), done: make(chan struct{})}
			reg.add(s)
			c := &configPusher{configs: &fakeConfigs{DefaultFn: func(context.Context, string) (store.ProviderConfig, bool, error) {
				return tc.read.pc, tc.read.ok, tc.read.err
			}}, targets: reg, clock: newFakeClock(), log: testLog(t)}
			require.Equal(t, tc.wantPushes, c.push(context.Background()), tc.reason)
			require.Len(t, s.out, tc.wantPushes, tc.reason)
			if tc.wantPushes > 0 {
				m := <-s.out
				require.Equal(t, tc.wantDeleted, m.GetConfig().GetDeleted(), tc.reason)
				if !tc.wantDeleted {
					require.Equal(t, tc.read.pc.UpdatedAt.UnixNano(), m.GetConfig().GetConfig().GetRevision(), tc.reason)
				}
			}
		})
	}

	t.Run("AWorkerThatJoinedLaterGetsTheCurrentRevision", func(t *testing.T) {
		t.Parallel()
		reg := newRegistry(testLog(t))
		sess := func(id string) *session {
			return &session{id: id, workerID: id, maxIn: 4, ready: map[manifest.KindVersion]bool{kv: true},
				out: make(chan *workerv1.WorkStreamResponse, 8), done: make(chan struct{})}
		}
		early, late := sess("early"), sess("late")
		reg.add(early)
		c := &configPusher{configs: &fakeConfigs{DefaultFn: func(context.Context, string) (store.ProviderConfig, bool, error) {
			return pc(2), true, nil
		}}, targets: reg, clock: newFakeClock(), log: testLog(t)}
		require.Equal(t, 1, c.push(context.Background()))
		reg.add(late) // registered after the round read and pushed revision 2
		require.Equal(t, 1, c.push(context.Background()), "the next round pushes to the worker that missed it, only")
		require.Len(t, early.out, 1, "the early worker got the revision once")
		require.Len(t, late.out, 1)
	})

	t.Run("ASlowWorkerDoesNotHoldUpTheOthers", func(t *testing.T) {
		t.Parallel()
		reg := newRegistry(testLog(t))
		slow := &session{id: "slow", workerID: "slow", maxIn: 1, ready: map[manifest.KindVersion]bool{kv: true},
			out: make(chan *workerv1.WorkStreamResponse, 1), done: make(chan struct{})}
		slow.out <- &workerv1.WorkStreamResponse{} // its queue is full: the worker reads nothing
		fine := &session{id: "fine", workerID: "fine", maxIn: 1, ready: map[manifest.KindVersion]bool{kv: true},
			out: make(chan *workerv1.WorkStreamResponse, 1), done: make(chan struct{})}
		reg.add(slow)
		reg.add(fine)
		c := &configPusher{configs: &fakeConfigs{DefaultFn: func(context.Context, string) (store.ProviderConfig, bool, error) {
			return pc(3), true, nil
		}}, targets: reg, sendWait: 10 * time.Millisecond, clock: newFakeClock(), log: testLog(t)}
		require.Equal(t, 1, c.push(context.Background()), "the slow worker is skipped after the wait")
		require.Len(t, fine.out, 1)
		<-slow.out // the worker catches up
		require.Equal(t, 1, c.push(context.Background()), "the slow worker gets the revision at the next round")
		require.NotNil(t, (<-slow.out).GetConfig())
	})

	t.Run("AConfigTooLargeForTheWorkerIsNotPushed", func(t *testing.T) {
		// A worker that could not read the push lost its session at every
		// push of it: it is not sent, and warned of once per revision.
		t.Parallel()
		var logs testlog.Buffer
		reg := newRegistry(zerolog.New(&logs))
		small := &session{id: "small", workerID: "small", maxIn: 1, maxMsg: 2048, ready: map[manifest.KindVersion]bool{kv: true},
			out: make(chan *workerv1.WorkStreamResponse, 2), done: make(chan struct{})}
		big := &session{id: "big", workerID: "big", maxIn: 1, maxMsg: 1 << 20, ready: map[manifest.KindVersion]bool{kv: true},
			out: make(chan *workerv1.WorkStreamResponse, 2), done: make(chan struct{})}
		reg.add(small)
		reg.add(big)
		large := pc(4)
		large.Data = json.RawMessage(`{"blob":"` + strings.Repeat("x", 4096) + `"}`)
		c := &configPusher{configs: &fakeConfigs{DefaultFn: func(context.Context, string) (store.ProviderConfig, bool, error) {
			return large, true, nil
		}}, targets: reg, clock: newFakeClock(), log: testLog(t)}
		require.Equal(t, 1, c.push(context.Background()), "only the worker that can read it is pushed the config")
		require.Empty(t, small.out)
		require.Len(t, big.out, 1)
		require.Zero(t, c.push(context.Background()))
		require.Equal(t, 1, logs.Count("too large for the worker's WORKER_MAX_MESSAGE_BYTES"), logs.String())
		require.Contains(t, logs.String(), `"limit":2048`)
	})
}
