package store

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/resource"
)

// phaseCondition is one arm of the phase CASE: how to make it hold on top of
// other scalars, and whether it holds.
type phaseCondition struct {
	phase resource.Phase
	make  func(*scalars)
	holds func(scalars) bool
}

// phaseConditions are the seven arms in precedence order.
var phaseConditions = []phaseCondition{
	{resource.PhaseDeleting, func(s *scalars) { s.deleting = true }, func(s scalars) bool { return s.deleting }},
	{resource.PhaseQuarantined, func(s *scalars) { s.frozen = "infinity" }, func(s scalars) bool { return s.frozen == "infinity" }},
	{resource.PhaseFailed, func(s *scalars) { s.failureGen = s.generation }, func(s scalars) bool { return s.failureGen == s.generation }},
	{resource.PhaseOrphaned, func(s *scalars) { s.frozen = "future" }, func(s scalars) bool { return s.frozen == "future" }},
	{resource.PhaseDegraded, func(s *scalars) { s.syncedGen, s.healthOK = s.generation, false },
		func(s scalars) bool { return s.syncedGen >= s.generation && !s.healthOK }},
	{resource.PhaseReady, func(s *scalars) { s.syncedGen, s.healthOK = s.generation, true },
		func(s scalars) bool { return s.syncedGen >= s.generation && s.healthOK }},
	{resource.PhaseReconciling, func(s *scalars) { s.syncedGen = s.generation - 1 },
		func(s scalars) bool { return s.syncedGen < s.generation }},
}

// base holds no arm but Reconciling's: generation 3, synced 2, healthy.
func base() scalars { return scalars{generation: 3, syncedGen: 2, healthOK: true} }

func TestPhase_EachPhaseFromItsScalars(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	for i, c := range phaseConditions {
		t.Run(string(c.phase), func(t *testing.T) {
			s := base()
			c.make(&s)
			r := e.noop(t, fmt.Sprintf("single-%d", i), nil)
			e.setScalars(t, r.ID, s)
			got, err := e.store.GetResourceByID(ctx, r.ID)
			require.NoError(t, err)
			if diff := cmp.Diff(c.phase, got.Phase); diff != "" {
				t.Errorf("phase (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPhase_HigherPrecedenceWinsForEveryPair holds two arms at once and
// expects the higher one. Four pairs cannot hold together (they set the same
// scalar two ways) and are listed as such.
func TestPhase_HigherPrecedenceWinsForEveryPair(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	exclusive := map[string]bool{
		"Quarantined>Orphaned": true, // one frozen_until column: 'infinity' or a finite instant
		"Degraded>Ready":       true, // health_ok false vs true
		"Degraded>Reconciling": true, // synced vs not synced
		"Ready>Reconciling":    true,
	}
	n := 0
	for i, hi := range phaseConditions {
		for _, lo := range phaseConditions[i+1:] {
			name := string(hi.phase) + ">" + string(lo.phase)
			s := base()
			lo.make(&s)
			hi.make(&s)
			both := hi.holds(s) && lo.holds(s)
			if both == exclusive[name] {
				t.Fatalf("%s: both arms hold = %v, but listed exclusive = %v", name, both, exclusive[name])
			}
			if !both {
				continue
			}
			n++
			t.Run(name, func(t *testing.T) {
				r := e.noop(t, fmt.Sprintf("pair-%d", n), nil)
				e.setScalars(t, r.ID, s)
				got, err := e.store.GetResourceByID(ctx, r.ID)
				require.NoError(t, err)
				if diff := cmp.Diff(hi.phase, got.Phase); diff != "" {
					t.Errorf("phase with %+v (-want +got):\n%s", s, diff)
				}
			})
		}
	}
	require.Equal(t, 21-len(exclusive), n)
}

func TestPhase_AllArmsAtOnceIsDeleting(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	r := e.noop(t, "everything", nil)
	e.setScalars(t, r.ID, scalars{generation: 4, syncedGen: 4, failureGen: 4, healthOK: false, frozen: "infinity", deleting: true})
	got, err := e.store.GetResourceByID(context.Background(), r.ID)
	require.NoError(t, err)
	require.Equal(t, resource.PhaseDeleting, got.Phase)
	require.False(t, got.Ready)
	require.True(t, got.Quarantined)
	require.Nil(t, got.FrozenUntil, "a quarantined row reports no frozenUntil")
}

func TestGeneration_SpecChangeBumpsAndStaleFailureSelfInvalidates(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	type state struct {
		Generation, SyncedGen, FailureGen int64
		Phase                             resource.Phase
		Ready                             bool
	}
	snap := func(r resource.Resource) state {
		return state{r.Generation, r.SyncedGen, r.FailureGen, r.Phase, r.Ready}
	}
	in := ApplyResourceInput{Kind: "noop", Name: "gen", Spec: json.RawMessage(`{"n": 1}`)}
	r := e.apply(t, in)

	steps := []struct {
		reason string
		do     func() resource.Resource
		want   state
	}{
		{
			reason: "a new resource is generation 1, never synced",
			do:     func() resource.Resource { return r },
			want:   state{1, 0, 0, resource.PhaseReconciling, false},
		},
		{
			reason: "a successful reconcile of generation 1 makes it Ready",
			do: func() resource.Resource {
				e.setScalars(t, r.ID, scalars{generation: 1, syncedGen: 1, healthOK: true})
				got, err := e.store.GetResourceByID(ctx, r.ID)
				require.NoError(t, err)
				return got
			},
			want: state{1, 1, 0, resource.PhaseReady, true},
		},
		{
			reason: "a labels-only apply bumps nothing",
			do: func() resource.Resource {
				in.Labels = map[string]string{"team": "t1"}
				return e.apply(t, in)
			},
			want: state{1, 1, 0, resource.PhaseReady, true},
		},
		{
			reason: "a spec change bumps generation: synced_gen lags, Reconciling",
			do: func() resource.Resource {
				in.Spec = json.RawMessage(`{"n": 2}`)
				return e.apply(t, in)
			},
			want: state{2, 1, 0, resource.PhaseReconciling, false},
		},
		{
			reason: "a hard failure of generation 2 is Failed",
			do: func() resource.Resource {
				e.setScalars(t, r.ID, scalars{generation: 2, syncedGen: 1, failureGen: 2, healthOK: true})
				got, err := e.store.GetResourceByID(ctx, r.ID)
				require.NoError(t, err)
				return got
			},
			want: state{2, 1, 2, resource.PhaseFailed, false},
		},
		{
			reason: "a spec change leaves the failure stale (failure_gen 2 ≠ generation 3): no longer Failed",
			do: func() resource.Resource {
				in.Spec = json.RawMessage(`{"n": 3}`)
				return e.apply(t, in)
			},
			want: state{3, 1, 2, resource.PhaseReconciling, false},
		},
		{
			reason: "synced but unhealthy is Degraded, not ready",
			do: func() resource.Resource {
				e.setScalars(t, r.ID, scalars{generation: 3, syncedGen: 3, failureGen: 2, healthOK: false})
				got, err := e.store.GetResourceByID(ctx, r.ID)
				require.NoError(t, err)
				return got
			},
			want: state{3, 3, 2, resource.PhaseDegraded, false},
		},
	}
	for _, st := range steps {
		if diff := cmp.Diff(st.want, snap(st.do())); diff != "" {
			t.Fatalf("%s (-want +got):\n%s", st.reason, diff)
		}
	}
}
