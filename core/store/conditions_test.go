package store

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/resource"
)

func TestConditions_SynthesizedFromTheScalars(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	type cond struct {
		Type   string
		Status resource.ConditionStatus
		Reason string
	}
	cases := map[string]struct {
		reason string
		s      *scalars
		want   []cond
	}{
		"New": {"never reconciled", nil, []cond{
			{"Ready", resource.ConditionFalse, resource.ReasonCreating},
			{"Synced", resource.ConditionUnknown, resource.ReasonReconciling}}},
		"Ready": {"synced and healthy", &scalars{generation: 2, syncedGen: 2, healthOK: true}, []cond{
			{"Ready", resource.ConditionTrue, resource.ReasonAvailable},
			{"Synced", resource.ConditionTrue, resource.ReasonReconcileSuccess}}},
		"SpecInFlight": {"a spec change not reconciled yet", &scalars{generation: 3, syncedGen: 2, healthOK: true}, []cond{
			{"Ready", resource.ConditionFalse, resource.ReasonReconciling},
			{"Synced", resource.ConditionUnknown, resource.ReasonReconciling}}},
		"Degraded": {"synced but unhealthy", &scalars{generation: 2, syncedGen: 2, healthOK: false}, []cond{
			{"Ready", resource.ConditionFalse, resource.ReasonUnavailable},
			{"Synced", resource.ConditionTrue, resource.ReasonReconcileSuccess}}},
		"Failed": {"failed for the live spec", &scalars{generation: 2, syncedGen: 1, failureGen: 2, healthOK: true}, []cond{
			{"Ready", resource.ConditionFalse, resource.ReasonReconcileError},
			{"Synced", resource.ConditionFalse, resource.ReasonReconcileError}}},
		"StaleFailure": {"a failure of an older generation is not a failure", &scalars{generation: 3, syncedGen: 1, failureGen: 2, healthOK: true}, []cond{
			{"Ready", resource.ConditionFalse, resource.ReasonReconciling},
			{"Synced", resource.ConditionUnknown, resource.ReasonReconciling}}},
		"Deleting": {"being deleted is not ready, whatever else holds", &scalars{generation: 2, syncedGen: 2, healthOK: true, deleting: true}, []cond{
			{"Ready", resource.ConditionFalse, resource.ReasonDeleting},
			{"Synced", resource.ConditionTrue, resource.ReasonReconcileSuccess}}},
		"QuarantinedReady": {"Ready mirrors is_ready, which quarantine does not change", &scalars{generation: 2, syncedGen: 2, healthOK: true, frozen: "infinity"}, []cond{
			{"Ready", resource.ConditionTrue, resource.ReasonAvailable},
			{"Synced", resource.ConditionTrue, resource.ReasonReconcileSuccess}}},
	}
	for name, tc := range cases {
		r := e.noop(t, "c-"+uuid.NewString()[:8], nil)
		if tc.s != nil {
			e.setScalars(t, r.ID, *tc.s)
		}
		t.Run(name, func(t *testing.T) {
			got, err := e.store.Conditions(ctx, r.ID)
			require.NoError(t, err)
			var gotC []cond
			for _, c := range got {
				require.True(t, c.Synthesized)
				require.NotEmpty(t, c.Message)
				require.False(t, c.LastTransitionTime.IsZero())
				gotC = append(gotC, cond{c.Type, c.Status, c.Reason})
			}
			if diff := cmp.Diff(tc.want, gotC); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
			}
			row, err := e.store.GetResourceByID(ctx, r.ID)
			require.NoError(t, err)
			require.Equal(t, row.Ready, got[0].Status == resource.ConditionTrue, "Ready condition mirrors is_ready")
		})
	}
}

func TestConditions_StoredRowsWinOverSynthesized(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	r := e.noop(t, "stored", nil)
	e.setScalars(t, r.ID, scalars{generation: 1, syncedGen: 1, healthOK: false})
	plain := e.noop(t, "plain", nil)
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	// Stands in for the drainer's condition upsert on transition.
	_, err := e.pool.Exec(ctx, `INSERT INTO resource_conditions (resource_id, type, status, reason, message, observed_generation, last_transition_time)
		VALUES ($1, 'Ready', 'False', 'ChildrenNotReady', '2 of 5 children not ready', 1, $2),
		       ($1, 'Zeta', 'True', 'Fine', '', 1, $2),
		       ($1, 'Alpha', 'Unknown', NULL, NULL, 1, $2)`, r.ID, at)
	require.NoError(t, err)

	all, err := e.store.ConditionsFor(ctx, []uuid.UUID{r.ID, plain.ID, uuid.New()})
	require.NoError(t, err)
	require.Len(t, all, 2, "unknown ids are absent")
	want := []resource.Condition{
		{Type: "Ready", Status: resource.ConditionFalse, Reason: "ChildrenNotReady", Message: "2 of 5 children not ready", ObservedGeneration: 1, LastTransitionTime: at},
		{Type: "Synced", Status: resource.ConditionTrue, Reason: resource.ReasonReconcileSuccess, ObservedGeneration: 1, Synthesized: true},
		{Type: "Alpha", Status: resource.ConditionUnknown, ObservedGeneration: 1, LastTransitionTime: at},
		{Type: "Zeta", Status: resource.ConditionTrue, Reason: "Fine", ObservedGeneration: 1, LastTransitionTime: at},
	}
	ignore := cmpopts.IgnoreFields(resource.Condition{}, "Message")
	if diff := cmp.Diff(want, all[r.ID], ignore, cmpopts.IgnoreFields(resource.Condition{}, "LastTransitionTime"),
		cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
		t.Errorf("merged conditions (-want +got):\n%s", diff)
	}
	require.Equal(t, "2 of 5 children not ready", all[r.ID][0].Message)
	require.True(t, all[r.ID][0].LastTransitionTime.Equal(at))
	require.Len(t, all[plain.ID], 2)

	_, err = e.store.Conditions(ctx, uuid.New())
	require.ErrorIs(t, err, ErrNotFound)
}
