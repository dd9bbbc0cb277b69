// Package classic is the classic demo: a composite bom that fans a spec
// out into per-team accounts, VPCs and routes wired by dependency edges and
// value flows, simulated leaves with configurable latency and failure rate,
// and the statussink reference reactor. Its kind manifests, providerconfigs,
// reactor binding and a sample bom are the JSON documents in testfixtures/
// (embedded as Fixtures); cmd/worker serves the kinds.
package classic

import (
	"embed"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/examples/apply"
)

// The demo's kinds.
const (
	KindBOM        = "bom"
	KindAccount    = "account"
	KindVPC        = "vpc"
	KindRoute      = "route"
	KindStatusSink = "statussink"
)

// Fixtures holds testfixtures/: the documents users apply.
//
//go:embed testfixtures/*.json
var Fixtures embed.FS

// FixturesDir is the directory of the documents inside Fixtures.
const FixturesDir = "testfixtures"

// Providers are the demo's providers, one per kind.
func Providers(log zerolog.Logger) []worker.Provider {
	return []worker.Provider{bom{}, newAccount(), newVPC(), newRoute(), newStatusSink(log)}
}

// Documents loads the demo's fixtures in apply order. withSamples keeps the
// sample resources (resource-*.json).
func Documents(withSamples bool) ([]apply.Document, error) {
	return apply.Load(Fixtures, FixturesDir, func(d apply.Document) bool {
		return withSamples || d.Type != apply.TypeResource
	})
}
