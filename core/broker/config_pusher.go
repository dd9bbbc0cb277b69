package broker

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/manifest"
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
	// served lists the pairs local workers serve ready.
	served() []manifest.KindVersion
	// pushConfig sends push to every local worker serving kind.
	pushConfig(ctx context.Context, kind string, push *workerv1.ConfigPush)
}

// configFailsafe is the config pusher's re-read cadence behind its wake.
const configFailsafe = 30 * time.Second

// configPusher pushes a kind's whole default config to its workers on every
// providerconfig_changed wake (plus a failsafe re-read), once per revision.
type configPusher struct {
	configs  defaultConfigs
	targets  configTargets
	wakes    waker
	failsafe time.Duration
	clock    engine.Clock
	log      zerolog.Logger

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
	last := map[string]int64{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-c.clock.After(c.failsafe):
		}
		c.testSignals.pushed.Signal(c.push(ctx, last))
	}
}

// push sends each served kind's default config whose revision moved since
// last and returns how many it sent.
func (c *configPusher) push(ctx context.Context, last map[string]int64) int {
	n := 0
	for _, kv := range c.targets.served() {
		pc, ok, err := c.configs.DefaultProviderConfig(ctx, kv.Kind)
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn().Err(err).Str("kind", kv.Kind).Msg("read default providerconfig for push")
			}
			continue
		}
		rev := int64(0)
		if ok {
			rev = pc.UpdatedAt.UnixNano()
		}
		if prev, seen := last[kv.Kind]; seen && prev == rev {
			continue
		}
		last[kv.Kind] = rev
		push := &workerv1.ConfigPush{Kind: kv.Kind, Deleted: !ok}
		if ok {
			push.Config = configProto(pc)
		}
		c.targets.pushConfig(ctx, kv.Kind, push)
		n++
	}
	return n
}

func configProto(pc store.ProviderConfig) *workerv1.ProviderConfig {
	return &workerv1.ProviderConfig{Kind: pc.Kind, Name: pc.Name, IsDefault: pc.IsDefault,
		SpecJson: pc.Spec, DataJson: pc.Data, Revision: pc.UpdatedAt.UnixNano()}
}
