package classic_test

import (
	"context"
	"encoding/json"
	"errors"
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

// TestClassicBOM_DomainsTimesTeamsConvergeThenTearDownPaced drives the
// classic demo end to end on a real converge and worker: a classicbom of 2
// domains × 3 teams with every kind (VPCs at v2), the value flows on both of
// a route's edges, the enable_flow_logs verb, the statussink upload, and a
// delete whose finalizers are paced by the teardown delay.
func TestClassicBOM_DomainsTimesTeamsConvergeThenTearDownPaced(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	ctx := context.Background()
	a := apply.StoreApplier{Store: s.Store, Actor: "test"}
	docs, err := classic.Documents(false)
	require.NoError(t, err)
	require.NoError(t, apply.All(ctx, a, docs), "every fixture applies")
	for _, kind := range []string{classic.KindAccount, classic.KindVPC, classic.KindTGW, classic.KindRoute} {
		require.NoError(t, a.ApplyProviderConfig(ctx, apply.ProviderConfig{Kind: kind, Name: "default", IsDefault: true,
			Spec: json.RawMessage(`{"latency_ms":0,"jitter_ms":5,"failure_rate":0}`)}))
	}
	sinkDir := t.TempDir()
	require.NoError(t, a.ApplyProviderConfig(ctx, apply.ProviderConfig{Kind: classic.KindStatusSink, Name: "default", IsDefault: true,
		Spec: json.RawMessage(`{"endpoint":"file://` + sinkDir + `?metadata=skip","prefix":"boms/classic"}`)}))
	const delay = 300 * time.Millisecond
	s.StartWorker(apptest.Worker{Options: worker.Options{MaxParallel: 64},
		Providers: classic.NewProviders(s.Log, classic.Options{DeleteDelay: delay})})

	require.NoError(t, a.ApplyResource(ctx, apply.Resource{Kind: classic.KindClassicBOM, Name: "corp",
		Spec: json.RawMessage(`{"domains":["payments","identity"],"teams":["red","green","blue"],"vpc_version":"v2"}`)}))
	root, below := s.WaitSubtree(classic.KindClassicBOM, "corp", 120*time.Second, apptest.AllIn(resource.PhaseReady))
	const units = 2 * 3
	require.Len(t, below, units*classic.KindsPerUnit)
	status := decode(t, root.Status)
	require.EqualValues(t, units*classic.KindsPerUnit, status["ready"], "%s", root.Status)
	require.Equal(t, map[string]any{"Ready": float64(units)}, status["by_kind"].(map[string]any)["tgw"])

	byName := map[string]resource.Resource{}
	for _, r := range below {
		byName[r.Name] = r
	}
	for _, d := range []string{"payments", "identity"} {
		for _, team := range []string{"red", "green", "blue"} {
			u := classic.UnitName("corp", d, team)
			acct, vpc, tgw, route := byName[u+"-account"], byName[u+"-vpc"], byName[u+"-tgw"], byName[u+"-route"]
			require.Equal(t, "v2", vpc.Version, "the classicbom asked for vpc v2")
			require.Equal(t, "v2", decode(t, vpc.Status)["api_version"], "the v2 provider reconciled it")
			require.Equal(t, decode(t, acct.Status)["account_id"], decode(t, vpc.Spec)["account_id"])
			require.Equal(t, decode(t, acct.Status)["account_id"], decode(t, tgw.Spec)["account_id"])
			require.NotEmpty(t, decode(t, tgw.Status)["tgw_id"])
			require.Equal(t, decode(t, vpc.Status)["vpc_id"], decode(t, route.Spec)["vpc_id"], "vpc_id flowed into %s", route.Name)
			require.Equal(t, decode(t, tgw.Status)["tgw_id"], decode(t, route.Spec)["tgw_id"], "tgw_id flowed into %s", route.Name)
		}
	}

	// The operator verb on one VPC.
	vpcName := classic.UnitName("corp", "payments", "red") + "-vpc"
	op, err := s.Store.RunOperation(ctx, classic.KindVPC, vpcName, "enable_flow_logs", nil, "test")
	require.NoError(t, err)
	apptest.WaitFor(t, 60*time.Second, "enable_flow_logs finishes", func() bool {
		op, err = s.Store.GetOperation(ctx, op.ID)
		return err == nil && op.State.Final()
	})
	require.Equal(t, resource.OperationSucceeded, op.State, op.Error)
	require.Equal(t, "enabled", decode(t, op.Output)["flow_logs"])

	// The classicbom-synced binding uploaded the rolled-up status.
	sunk := filepath.Join(sinkDir, "boms", "classic", "classicbom", "corp-1.json")
	var doc classic.Document
	apptest.WaitFor(t, 30*time.Second, "statussink uploads "+sunk, func() bool {
		b, err := os.ReadFile(sunk)
		return err == nil && json.Unmarshal(b, &doc) == nil
	})
	require.Equal(t, "classicbom-synced-to-statussink", doc.Binding)
	require.EqualValues(t, units*classic.KindsPerUnit, decode(t, doc.Status)["ready"])

	// Delete: every kind has a finalizer; the teardowns run route → vpc
	// and tgw → account → the root, each waiting the delay.
	started := time.Now()
	_, err = s.Store.RequestDeletion(ctx, classic.KindClassicBOM, "corp", "test")
	require.NoError(t, err)
	apptest.WaitFor(t, 120*time.Second, "the classicbom and its subtree are gone", func() bool {
		_, err := s.Store.GetResource(ctx, classic.KindClassicBOM, "corp")
		if !errors.Is(err, store.ErrNotFound) {
			return false
		}
		page, err := s.Store.ListResources(ctx, store.ListOptions{Kind: classic.KindAccount, Limit: 10})
		return err == nil && len(page.Items) == 0
	})
	// Three dependency levels below the root plus the root's own teardown.
	require.GreaterOrEqual(t, time.Since(started), 4*delay, "the teardown was paced by the delete delay")
}
