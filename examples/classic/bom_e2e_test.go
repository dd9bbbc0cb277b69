package classic_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/examples/apply"
	"github.com/converge-run/converge/examples/classic"
)

func decode(t *testing.T, raw json.RawMessage) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m), string(raw))
	return m
}

// TestBOM_ThreeTeamsConvergeReadyWithValuesFlowed drives the demo end to end:
// the fixtures applied to a real converge, the real providers connected over
// Connect, a bom with 3 teams applied.
func TestBOM_ThreeTeamsConvergeReadyWithValuesFlowed(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	ctx := context.Background()
	a := apply.StoreApplier{Store: s.Store, Actor: "test"}

	docs, err := classic.Documents(false)
	require.NoError(t, err)
	require.NoError(t, apply.All(ctx, a, docs), "every fixture applies")
	// Fast, failure-free leaves and a sink writing into the test's directory.
	sinkDir := t.TempDir()
	for _, kind := range []string{classic.KindAccount, classic.KindVPC, classic.KindRoute} {
		require.NoError(t, a.ApplyProviderConfig(ctx, apply.ProviderConfig{Kind: kind, Name: "default", IsDefault: true,
			Spec: json.RawMessage(`{"latency_ms":0,"jitter_ms":5,"failure_rate":0}`)}))
	}
	require.NoError(t, a.ApplyProviderConfig(ctx, apply.ProviderConfig{Kind: classic.KindStatusSink, Name: "default", IsDefault: true,
		Spec: json.RawMessage(`{"endpoint":"file://` + sinkDir + `","prefix":"boms"}`)}))
	s.StartWorker(apptest.Worker{Options: worker.Options{MaxParallel: 64}, Providers: classic.Providers(s.Log)})

	require.NoError(t, a.ApplyResource(ctx, apply.Resource{Kind: classic.KindBOM, Name: "acme",
		Spec: json.RawMessage(`{"teams":3,"routes_per_team":2}`)}))
	root := s.WaitPhase(classic.KindBOM, "acme", resource.PhaseReady, 90*time.Second)

	const teams, routes = 3, 2
	const descendants = teams * (2 + routes)
	status := decode(t, root.Status)
	require.EqualValues(t, descendants, status["resources"], "the rollup saw the whole subtree: %s", root.Status)
	require.EqualValues(t, descendants, status["ready"], "every descendant was ready at rollup: %s", root.Status)
	require.Equal(t, map[string]any{
		"account": map[string]any{"Ready": float64(teams)},
		"vpc":     map[string]any{"Ready": float64(teams)},
		"route":   map[string]any{"Ready": float64(teams * routes)},
	}, status["by_kind"])

	page, err := s.Store.ListResources(ctx, store.ListOptions{OwnerID: &root.ID, Limit: 500})
	require.NoError(t, err)
	require.Len(t, page.Items, descendants, "the bom owns exactly its composed children")
	byName := map[string]resource.Resource{}
	for _, r := range page.Items {
		require.Equal(t, resource.PhaseReady, r.Phase, "%s/%s", r.Kind, r.Name)
		byName[r.Name] = r
	}
	for team := range teams {
		acct := byName[classic.AccountName("acme", team)]
		vpc := byName[classic.VPCName("acme", team)]
		require.NotEmpty(t, decode(t, acct.Status)["account_id"])
		require.Equal(t, decode(t, acct.Status)["account_id"], decode(t, vpc.Spec)["account_id"],
			"the account's id flowed into its VPC's spec")
		require.Equal(t, decode(t, acct.Status)["account_id"], decode(t, vpc.Status)["account_id"])
		for r := range routes {
			rt := byName[classic.RouteName("acme", team, r)]
			require.NotEmpty(t, decode(t, vpc.Status)["vpc_id"])
			require.Equal(t, decode(t, vpc.Status)["vpc_id"], decode(t, rt.Spec)["vpc_id"],
				"the VPC's id flowed into the route's spec (%s)", rt.Name)
		}
	}

	// The bom-synced binding ran the statussink reactor.
	sunk := filepath.Join(sinkDir, "boms", "bom", "acme-1.json")
	var doc classic.Document
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(sunk)
		return err == nil && json.Unmarshal(b, &doc) == nil
	}, 30*time.Second, 20*time.Millisecond, "statussink writes %s", sunk)
	require.Equal(t, "synced", doc.Transition)
	require.Equal(t, "acme", doc.Name)
	require.EqualValues(t, descendants, decode(t, doc.Status)["ready"], "the sink got the rolled-up status")
}

// TestBOM_TerminallyFailedLeafDegradesTheBOM: routes failing for good (the
// route kind's providerconfig says so) do not stall the bom: it rolls up
// Degraded and names them.
func TestBOM_TerminallyFailedLeafDegradesTheBOM(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	ctx := context.Background()
	a := apply.StoreApplier{Store: s.Store, Actor: "test"}
	// The manifests only: no statussink writing outside the test.
	docs, err := apply.Load(classic.Fixtures, classic.FixturesDir, func(d apply.Document) bool { return d.Type == apply.TypeManifest })
	require.NoError(t, err)
	require.NoError(t, apply.All(ctx, a, docs))
	for kind, spec := range map[string]string{
		classic.KindAccount: `{"latency_ms":0,"jitter_ms":0,"failure_rate":0}`,
		classic.KindVPC:     `{"latency_ms":0,"jitter_ms":0,"failure_rate":0}`,
		classic.KindRoute:   `{"latency_ms":0,"jitter_ms":0,"failure_rate":0,"terminal_failure_rate":1}`,
	} {
		require.NoError(t, a.ApplyProviderConfig(ctx, apply.ProviderConfig{Kind: kind, Name: "default", IsDefault: true, Spec: json.RawMessage(spec)}))
	}
	s.StartWorker(apptest.Worker{Options: worker.Options{MaxParallel: 64}, Providers: classic.Providers(s.Log)})

	require.NoError(t, a.ApplyResource(ctx, apply.Resource{Kind: classic.KindBOM, Name: "lossy",
		Spec: json.RawMessage(`{"teams":1,"routes_per_team":2}`)}))
	root := s.WaitPhase(classic.KindBOM, "lossy", resource.PhaseDegraded, 90*time.Second)
	status := decode(t, root.Status)
	require.EqualValues(t, 2, status["ready"], "the account and the VPC are ready: %s", root.Status)
	require.Equal(t, []any{"route/lossy-t0-route-0 (Failed)", "route/lossy-t0-route-1 (Failed)"}, status["not_ready"])
	conds, err := s.Store.Conditions(ctx, root.ID)
	require.NoError(t, err)
	found := false
	for _, c := range conds {
		if c.Type == "Ready" && c.Reason == "ChildrenNotReady" {
			found = true
		}
	}
	require.True(t, found, "a Ready=False/ChildrenNotReady condition explains it: %+v", conds)
}
