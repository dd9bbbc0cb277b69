package control

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/maintenance"
)

// service is one control service built for the lifecycle subtests, with a
// wait for the signal its every tick (or drain step) sends.
type service struct {
	duty engine.Duty
	tick func(t *testing.T)
}

func services(t *testing.T) map[string]func() service {
	return map[string]func() service{
		"Drainer": func() service {
			d := &Drainer{Pipeline: &drainStoreFns{}, Shards: allShards(), Log: zerolog.Nop(), Clock: newClock(), Parallel: 1}
			d.TestSignals.Init()
			return service{d, func(t *testing.T) { d.TestSignals.Drained.WaitOrTimeout(t) }}
		},
		"Reaper": func() service {
			r := &Reaper{Maintenance: &reaperStoreFns{}, Shards: allShards(), Log: zerolog.Nop(), Clock: newClock()}
			r.TestSignals.Init()
			return service{r, func(t *testing.T) { r.TestSignals.Ticked.WaitOrTimeout(t) }}
		},
		"Resyncer": func() service {
			r := &Resyncer{Maintenance: resyncStoreFn(func(context.Context, maintenance.Resync, shard.Range, int) (int, error) {
				return 0, nil
			}), Kinds: kindCache(t), Shards: allShards(), Log: zerolog.Nop(), Clock: newClock()}
			r.TestSignals.Init()
			return service{r, func(t *testing.T) { r.TestSignals.Ticked.WaitOrTimeout(t) }}
		},
		"MemberGC": func() service {
			g := &MemberGC{Members: staleMembersFn(func(context.Context, time.Duration) (int, error) { return 0, nil }),
				Log: zerolog.Nop(), Clock: newClock()}
			g.TestSignals.Init()
			return service{g, func(t *testing.T) { g.TestSignals.Collected.WaitOrTimeout(t) }}
		},
		"CountFolder": func() service {
			f := &CountFolder{Fold: func(context.Context) (int, error) { return 0, nil }, Log: zerolog.Nop(), Clock: newClock()}
			f.TestSignals.Init()
			return service{f, func(t *testing.T) { f.TestSignals.Folded.WaitOrTimeout(t) }}
		},
		"StatisticsGuard": func() service {
			g := &StatisticsGuard{Analyze: func(context.Context) ([]string, error) { return nil, nil }, Log: zerolog.Nop(), Clock: newClock()}
			g.TestSignals.Init()
			return service{g, func(t *testing.T) { g.TestSignals.Analyzed.WaitOrTimeout(t) }}
		},
	}
}

func TestServices_Lifecycle(t *testing.T) {
	t.Parallel()
	for name, build := range services(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			t.Run("StopsImmediately", func(t *testing.T) {
				t.Parallel()
				s := build()
				stop := runService(t, s.duty)
				stop()
			})
			t.Run("CanRunMultipleTimes", func(t *testing.T) {
				t.Parallel()
				s := build()
				for range 2 {
					stop := runService(t, s.duty)
					s.tick(t)
					stop()
				}
			})
		})
	}
}
