package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/examples/apply"
	"github.com/converge-run/converge/examples/classic"
)

// waveRoutes is the routes per team of a wave's roots.
var waveRoutes = 2

// waveShape is the spec of a wave's roots: 2 teams, each an account, a vpc
// gated on it (its account_id flows in) and 2 routes gated on the vpc (its
// vpc_id flows in): three levels of edges under the root's compose and
// rollup.
var waveShape = classic.BOMSpec{Teams: 2, RoutesPerTeam: &waveRoutes}

// leafDeadline is the leaf kinds' task deadline in the suite (the demo's
// manifests say 30 s): what a hung handler costs before its retry.
const leafDeadline = 5

// applyKinds applies the classic demo's manifests of the served kinds (v1
// only), the leaves' task deadline shortened to leafDeadline, and their
// default providerconfigs without simulated latency or failures: the
// worker's chaos switches do the work (and the faults) instead.
func applyKinds(ctx context.Context, st *store.Store) error {
	a := apply.StoreApplier{Store: st, Actor: "chaos"}
	docs, err := apply.Load(classic.Fixtures, classic.FixturesDir, func(d apply.Document) bool {
		return d.Type == apply.TypeManifest
	})
	if err != nil {
		return err
	}
	for _, d := range docs {
		var m map[string]any
		if err := json.Unmarshal(d.Raw, &m); err != nil {
			return fmt.Errorf("read %s: %w", d.Path, err)
		}
		kind, _ := m["kind"].(string)
		version, _ := m["version"].(string)
		if !slices.Contains(servedKinds, kind) || (version != "" && version != manifest.DefaultVersion) {
			continue
		}
		if slices.Contains(leafKinds, kind) {
			m["task_deadline_secs"] = leafDeadline
		}
		raw, err := json.Marshal(m)
		if err != nil {
			return fmt.Errorf("write %s: %w", d.Path, err)
		}
		if err := a.ApplyManifest(ctx, raw); err != nil {
			return fmt.Errorf("apply %s: %w", d.Path, err)
		}
	}
	for _, kind := range leafKinds {
		if err := a.ApplyProviderConfig(ctx, apply.ProviderConfig{Kind: kind, Name: "default", IsDefault: true,
			Spec: json.RawMessage(`{"latency_ms":0,"jitter_ms":0,"failure_rate":0}`)}); err != nil {
			return fmt.Errorf("apply the %s providerconfig: %w", kind, err)
		}
	}
	return nil
}

// applyRoots applies wave w's n roots and returns how many resources they
// make, the children they compose included.
func applyRoots(ctx context.Context, a apply.Applier, w, n int) (int, error) {
	spec, err := json.Marshal(waveShape)
	if err != nil {
		return 0, err
	}
	for i := range n {
		if err := a.ApplyResource(ctx, apply.Resource{Kind: classic.KindBOM,
			Name: fmt.Sprintf("w%d-%d", w, i), Spec: spec}); err != nil {
			return 0, err
		}
	}
	return n * (1 + waveShape.Descendants()), nil
}
