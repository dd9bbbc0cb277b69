// Package datadriven is the data-driven demo: composition as data. celbom
// fans a spec out with a fixed Go loop whose per-child decisions are CEL
// rules read from its providerconfig spec; stdstarlark composes with a
// Starlark program shipped in its providerconfig bundle (the built-in
// composer of core/stdstarlark, which stdworker also serves). Editing either
// providerconfig changes the next compose with no redeploy. The leaves are
// a multi-edge DAG (fakeapp gated on both a fakevpc and a fakedb, values
// flowing from both) and a pipeline (faketerraform → fakek8sjob, the built
// image flowing into the job), composed or — the saga — chained by the
// jobsaga reactor, which applies the job over the GraphQL API when a
// terraform syncs. Its documents are in testfixtures/
// (embedded as Fixtures); cmd/worker serves the kinds.
package datadriven

import (
	"embed"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/stdstarlark"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/examples/apply"
)

// The demo's kinds.
const (
	KindCELBOM        = "celbom"
	KindStarlark      = "stdstarlark"
	KindFakeVPC       = "fakevpc"
	KindFakeDB        = "fakedb"
	KindFakeApp       = "fakeapp"
	KindFakeTerraform = "faketerraform"
	KindFakeK8sJob    = "fakek8sjob"
)

// Fixtures holds testfixtures/: the documents users apply.
//
//go:embed testfixtures/*.json
var Fixtures embed.FS

// FixturesDir is the directory of the documents inside Fixtures.
const FixturesDir = "testfixtures"

// Providers are the demo's providers, one per kind.
func Providers(log zerolog.Logger) []worker.Provider {
	return []worker.Provider{
		newCELBOM(), stdstarlark.New(manifest.KindVersion{Kind: KindStarlark}, log),
		newFakeVPC(), newFakeDB(), newFakeApp(), newFakeTerraform(), newFakeK8sJob(), newJobSaga(log),
	}
}

// Documents loads the demo's fixtures in apply order. withSamples keeps the
// sample resources (resource-*.json).
func Documents(withSamples bool) ([]apply.Document, error) {
	return apply.Load(Fixtures, FixturesDir, func(d apply.Document) bool {
		return withSamples || d.Type != apply.TypeResource
	})
}
