// Package classic is the classic demo: composites that fan a spec out into
// per-team accounts, VPCs, transit gateways and routes wired by dependency
// edges and value flows, simulated leaves with configurable latency and
// failure rate, and the statussink reference reactor. Two composites are
// served: classicbom (functional domains × teams, every kind) and bom (teams
// only: account, VPC, routes; the end-to-end benchmark's kind). Its kind
// manifests, providerconfigs, reactor bindings and samples are the JSON
// documents in testfixtures/ (embedded as Fixtures); cmd/worker serves the
// kinds.
package classic

import (
	"embed"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/examples/apply"
)

// The demo's kinds.
const (
	KindClassicBOM = "classicbom"
	KindBOM        = "bom"
	KindAccount    = "account"
	KindVPC        = "vpc"
	KindTGW        = "tgw"
	KindRoute      = "route"
	KindStatusSink = "statussink"
)

// VPCv2 is the second served version of the vpc kind (v1 is the default).
const VPCv2 = "v2"

// Fixtures holds testfixtures/: the documents users apply.
//
//go:embed testfixtures/*.json
var Fixtures embed.FS

// FixturesDir is the directory of the documents inside Fixtures.
const FixturesDir = "testfixtures"

// DefaultDeleteDelay is FAKE_DELETE_DELAY's default: how long every kind's
// simulated teardown takes, so a delete visibly collapses a tree.
const DefaultDeleteDelay = 5 * time.Second

// Options tunes the demo's providers.
type Options struct {
	// DeleteDelay paces every kind's finalizer teardown (FAKE_DELETE_DELAY).
	// A leaf kind's providerconfig delete_latency_ms overrides it.
	DeleteDelay time.Duration
}

// OptionsFromEnv reads FAKE_DELETE_DELAY (a Go duration, default 5s).
func OptionsFromEnv(getenv func(string) string) (Options, error) {
	o := Options{DeleteDelay: DefaultDeleteDelay}
	if v := getenv("FAKE_DELETE_DELAY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return o, fmt.Errorf("FAKE_DELETE_DELAY %q: want a non-negative Go duration such as 5s or 250ms", v)
		}
		o.DeleteDelay = d
	}
	return o, nil
}

// Providers are the demo's providers with an instant teardown (tests).
func Providers(log zerolog.Logger) []worker.Provider { return NewProviders(log, Options{}) }

// NewProviders are the demo's providers, one per served (kind, version).
func NewProviders(log zerolog.Logger, o Options) []worker.Provider {
	return []worker.Provider{
		classicBOM{deleteDelay: o.DeleteDelay}, bom{deleteDelay: o.DeleteDelay},
		newAccount(o.DeleteDelay), newVPC(o.DeleteDelay, ""), newVPC(o.DeleteDelay, VPCv2),
		newTGW(o.DeleteDelay), newRoute(o.DeleteDelay), newStatusSink(log),
	}
}

// Documents loads the demo's fixtures in apply order. withSamples keeps the
// sample resources (resource-*.json).
func Documents(withSamples bool) ([]apply.Document, error) {
	return apply.Load(Fixtures, FixturesDir, func(d apply.Document) bool {
		return withSamples || d.Type != apply.TypeResource
	})
}
