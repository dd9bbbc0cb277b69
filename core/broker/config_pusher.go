package broker

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/testsignal"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// defaultConfigs reads a kind's default providerconfig.
type defaultConfigs interface {
	DefaultProviderConfig(ctx context.Context, kind string) (store.ProviderConfig, bool, error)
}

// configTargets is the workers a config is pushed to.
type configTargets interface {
	// configKinds lists the kinds local workers serve, ready or not.
	configKinds() []string
	// pushConfig sends push, revision rev of kind's default config, to
	// every local worker serving kind that has not had it yet, waiting at
	// most wait for each; it returns how many it sent it to.
	pushConfig(ctx context.Context, kind string, push *workerv1.ConfigPush, rev int64, wait time.Duration) int
	// joined is signalled when a worker's session registers.
	joined() <-chan struct{}
}

const (
	// configFailsafe is the config pusher's re-read cadence behind its wake.
	configFailsafe = 30 * time.Second
	// configJoinPace is how long a worker that joined waits for its
	// configs: the joins of a burst (a broker's workers all reconnecting)
	// share one round. A providerconfig_changed wake ends it early.
	configJoinPace = time.Second
	// configSendWait bounds the wait for room in one worker's send queue.
	configSendWait = time.Second
)

// configPusher pushes a kind's whole default config to its workers — every
// session serving the kind, ready or not (a provider often waits for its
// config to become ready) — on every providerconfig_changed wake, when a
// worker joins, and on a failsafe re-read. Each session gets each revision
// once: the revisions pushed are kept per session, so a worker that joined
// between a round's read and an edit still gets the edit at the next round.
type configPusher struct {
	configs  defaultConfigs
	targets  configTargets
	wakes    waker
	failsafe time.Duration
	// sendWait bounds the wait for one worker's send queue (0:
	// configSendWait).
	sendWait time.Duration
	clock    engine.Clock
	// outage hears of reads failing for an unreachable database (nil: each
	// failure is logged).
	outage *engine.Outage
	log    zerolog.Logger

	testSignals configPusherSignals
}

// configPusherSignals are the config pusher's test signals.
type configPusherSignals struct {
	pushed testsignal.Signal[int] // a round ended; the pushes it sent
}

// Name implements engine.Duty.
func (c *configPusher) Name() string { return "config-pusher" }

// Run pushes on every wake until ctx ends.
func (c *configPusher) Run(ctx context.Context) error {
	wake, stop := c.wakes.subscribe("providerconfig_changed")
	defer stop()
	joined := c.targets.joined()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-joined:
			// An edit ends the pace: its round serves the joined workers
			// too, and a task of the kind dispatched while the edit waited
			// out the pace would run with the old config.
			select {
			case <-ctx.Done():
				return nil
			case <-wake:
			case <-c.clock.After(configJoinPace):
			}
		case <-c.clock.After(c.failsafe):
		}
		c.testSignals.pushed.Signal(c.push(ctx))
	}
}

// push sends each served kind's default config to the sessions that have
// not had its current revision and returns how many pushes it sent. A read
// that fails because the database is unreachable ends the round (the
// outage is logged once for the process); the next round tries again.
func (c *configPusher) push(ctx context.Context) int {
	wait := c.sendWait
	if wait <= 0 {
		wait = configSendWait
	}
	n := 0
	for _, kind := range c.targets.configKinds() {
		pc, ok, err := c.configs.DefaultProviderConfig(ctx, kind)
		if err != nil {
			if ctx.Err() != nil || c.outage.Failed("config-push", err) {
				return n
			}
			c.log.Warn().Err(err).Str("kind", kind).Msg("read default providerconfig for push")
			continue
		}
		c.outage.Succeeded()
		rev := int64(0)
		if ok {
			rev = pc.UpdatedAt.UnixNano()
		}
		push := &workerv1.ConfigPush{Kind: kind, Deleted: !ok}
		if ok {
			push.Config = configProto(pc)
		}
		n += c.targets.pushConfig(ctx, kind, push, rev, wait)
	}
	return n
}

func configProto(pc store.ProviderConfig) *workerv1.ProviderConfig {
	return &workerv1.ProviderConfig{Kind: pc.Kind, Name: pc.Name, IsDefault: pc.IsDefault,
		SpecJson: pc.Spec, DataJson: pc.Data, Revision: pc.UpdatedAt.UnixNano()}
}
