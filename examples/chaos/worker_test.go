package main

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/examples/classic"
)

// The worker serves the bom and its three leaf kinds, nothing else.
func TestProviders_ServeTheWaveKinds(t *testing.T) {
	t.Parallel()
	var kinds []string
	for _, p := range providers(&switches{hung: map[string]bool{}}) {
		kinds = append(kinds, p.Kind().Kind+"/"+p.Kind().Version)
	}
	want := []string{"bom/v1", "account/v1", "vpc/v1", "route/v1"}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Fatalf("served kinds (-want +got):\n%s", diff)
	}
}

// Every stage that reports a status — a leaf's reconcile, a root's compose
// and its rollup — carries the claim stamp the apply audit counts, with a
// fresh run id per execution, beside what the demo provider reported.
func TestSwitched_StampsEveryStatus(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason string
		kind   string
		req    worker.Request
		// kept is a field of the demo provider's own status.
		kept string
	}{
		"LeafReconcile": {
			reason: "a leaf's result is what the drain applies most",
			kind:   classic.KindAccount,
			req: worker.Request{Stage: worker.StageWork, Resource: worker.Resource{ID: "a1", Kind: classic.KindAccount,
				Name: "w0-0-t0-account", Spec: json.RawMessage(`{"team":"w0-0-t0"}`)}},
			kept: "account_id",
		},
		"RootCompose": {
			reason: "a compose result creates the children and edges: applied twice would be a double compose",
			kind:   classic.KindBOM,
			req: worker.Request{Stage: worker.StageCompose, Resource: worker.Resource{ID: "b1", Kind: classic.KindBOM,
				Name: "w0-0", Spec: json.RawMessage(`{"teams":1}`)}},
			kept: "teams",
		},
		"RootRollup": {
			reason: "a rollup result is the root's final status",
			kind:   classic.KindBOM,
			req: worker.Request{Stage: worker.StageRollup, Resource: worker.Resource{ID: "b1", Kind: classic.KindBOM,
				Name: "w0-0", Spec: json.RawMessage(`{"teams":1}`)},
				Children: []worker.ChildSummary{{ID: "a1", Kind: classic.KindAccount, Name: "w0-0-t0-account", Phase: "Ready", HealthOK: true}}},
			kept: "ready",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sw := &switches{self: "test", hung: map[string]bool{}}
			var p worker.Provider
			for _, c := range providers(sw) {
				if c.Kind().Kind == tc.kind {
					p = c
				}
			}
			require.NotNil(t, p, "a provider for %s", tc.kind)
			runs := map[string]bool{}
			for range 2 {
				out, err := p.Work(t.Context(), tc.req)
				require.NoError(t, err, tc.reason)
				var status map[string]any
				require.NoError(t, json.Unmarshal(out.Status, &status))
				require.Contains(t, status, "epoch", tc.reason)
				require.Contains(t, status, tc.kept, "the demo provider's status is kept")
				run, _ := status["run"].(string)
				require.NotEmpty(t, run)
				runs[run] = true
			}
			require.Len(t, runs, 2, "each execution stamps its own run id")
		})
	}
}
