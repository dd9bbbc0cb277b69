package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/worker"
)

// A reactor bound to a composite's `synced` transition ends up holding the
// composite's final rolled-up status for the generation: the first rollup
// ran over a transiently failed child (and fired `synced`), the child
// recovered, the composite re-rolled up, and `synced` fired again with the
// same dedup token and the final snapshot.
func TestRuntime_ASyncedReactorReceivesTheFinalRollupAfterAChildRecovers(t *testing.T) {
	t.Parallel()
	p := startServer(t)
	applyManifest(t, p.Store, leafKind)
	applyManifest(t, p.Store, netKind)
	applyManifest(t, p.Store, `{"kind":"sink","config_schema":{"type":"object"},
	  "reactions":[{"name":"react","trigger":"reactor","emits":["sideEffect"]}]}`)
	_, _, err := p.Store.ApplyReactorBinding(context.Background(), store.ReactorBindingInput{
		Name: "net-synced-to-sink", WatchKind: "net", Transition: "synced", Reactor: "sink"})
	require.NoError(t, err)

	type got struct {
		token  string
		status map[string]any
	}
	deliveries := make(chan got, 16)
	sink := apptest.NewProvider("sink", func(_ context.Context, r worker.Request) (worker.Outcome, error) {
		var st map[string]any
		_ = json.Unmarshal(r.Resource.Status, &st)
		deliveries <- got{token: r.React.DedupToken, status: st}
		return worker.Outcome{}, nil
	})
	var spokeTries atomic.Int32
	leaf := apptest.NewProvider("leaf", func(ctx context.Context, r worker.Request) (worker.Outcome, error) {
		if r.Stage == worker.StageWork && r.Resource.Name == "bom-spoke-0" && spokeTries.Add(1) == 1 {
			return worker.Outcome{}, errors.New("provider API throttled")
		}
		return leafWork(ctx, r)
	})
	apptest.StartWorker(t, apptest.BrokerURL(p), worker.Options{}, leaf, sink, apptest.NewProvider("net", netCompose))
	applyResource(t, p.Store, "net", "bom", `{"spokes": 3}`)

	final := map[string]any{"children": float64(4), "ready": float64(4)}
	var seen []got
	deadline := time.After(90 * time.Second)
	for len(seen) == 0 || fmt.Sprint(seen[len(seen)-1].status) != fmt.Sprint(final) {
		select {
		case d := <-deliveries:
			seen = append(seen, d)
		case <-deadline:
			t.Fatalf("the sink never received the final rollup; it got %+v", seen)
		}
	}
	root := apptest.WaitPhase(t, p.Store, "net", "bom", resource.PhaseReady, 30*time.Second)
	require.Equal(t, final, status(t, root))
	require.GreaterOrEqual(t, spokeTries.Load(), int32(2), "the spoke failed once, then recovered")
	for _, d := range seen {
		require.Equal(t, seen[0].token, d.token, "every delivery of the generation carries one dedup token")
		require.Contains(t, d.token, ":synced:1:net-synced-to-sink")
	}
	t.Logf("the sink got %d synced deliveries: %+v", len(seen), seen)
}
