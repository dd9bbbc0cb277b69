package resource

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// at is every case's updated_at: a synthesized condition reports it as its
// transition time.
var at = time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)

// state builds a resource at generation 3 from the scalars the conditions
// read.
func state(synced, failed int64, terminal, healthy, ready, deleting bool) Resource {
	r := Resource{Generation: 3, SyncedGen: synced, FailureGen: failed, FailureTerminal: terminal,
		HealthOK: healthy, Ready: ready, UpdatedAt: at}
	if deleting {
		r.DeletionRequestedAt = &at
	}
	return r
}

// synthCase is a resource's scalars and the synthesized condition's status,
// reason and message they must give.
type synthCase struct {
	r       Resource
	status  ConditionStatus
	reason  string
	message string
}

// checkSynthesized runs synth over cases: each gives a condition of type typ
// at generation 3, stamped with the row's updated_at and marked synthesized.
func checkSynthesized(t *testing.T, typ string, synth func(Resource) Condition, cases map[string]synthCase) {
	t.Helper()
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, Condition{Type: typ, Status: c.status, Reason: c.reason, Message: c.message,
				ObservedGeneration: 3, LastTransitionTime: at, Synthesized: true}, synth(c.r))
		})
	}
}

func TestReadyCondition_FirstMatchingReasonWins(t *testing.T) {
	t.Parallel()
	checkSynthesized(t, ConditionReady, ReadyCondition, map[string]synthCase{
		"ready":                          {state(3, 0, false, true, true, false), ConditionTrue, ReasonAvailable, "synced and healthy"},
		"deleting, even when failed":     {state(2, 3, true, true, false, true), ConditionFalse, ReasonDeleting, "deletion requested"},
		"failed for the live spec":       {state(2, 3, false, true, false, false), ConditionFalse, ReasonReconcileError, "reconcile of generation 3 failed"},
		"failed, even when never synced": {state(0, 3, false, true, false, false), ConditionFalse, ReasonReconcileError, "reconcile of generation 3 failed"},
		"synced but unhealthy":           {state(3, 0, false, false, false, false), ConditionFalse, ReasonUnavailable, "synced but observed unhealthy"},
		"never reconciled":               {state(0, 0, false, true, false, false), ConditionFalse, ReasonCreating, "not reconciled yet"},
		"a spec change in flight":        {state(2, 0, false, true, false, false), ConditionFalse, ReasonReconciling, "generation 3 not reconciled yet (synced generation 2)"},
		"an older failure, reconciling":  {state(1, 2, false, true, false, false), ConditionFalse, ReasonReconciling, "generation 3 not reconciled yet (synced generation 1)"},
	})
}

func TestSyncedCondition_TheFailureIsCheckedFirst(t *testing.T) {
	t.Parallel()
	checkSynthesized(t, ConditionSynced, SyncedCondition, map[string]synthCase{
		"reconciled":                     {state(3, 0, false, true, true, false), ConditionTrue, ReasonReconcileSuccess, "generation 3 reconciled"},
		"reconciled ahead of generation": {state(4, 0, false, true, true, false), ConditionTrue, ReasonReconcileSuccess, "generation 3 reconciled"},
		"failed, retried":                {state(2, 3, false, true, false, false), ConditionFalse, ReasonReconcileError, "reconcile of generation 3 failed"},
		"failed, terminal":               {state(2, 3, true, true, false, false), ConditionFalse, ReasonReconcileError, "reconcile of generation 3 failed (terminal: not retried until the spec changes)"},
		"failed although synced":         {state(3, 3, false, true, false, false), ConditionFalse, ReasonReconcileError, "reconcile of generation 3 failed"},
		"not reconciled yet":             {state(2, 1, false, true, false, false), ConditionUnknown, ReasonReconciling, "generation 3 not reconciled yet (synced generation 2)"},
	})
}

func TestMergeConditions_StoredWinsThenReadySyncedAndTheRestByName(t *testing.T) {
	t.Parallel()
	r := state(3, 0, false, true, true, false)
	storedReady := Condition{Type: ConditionReady, Status: ConditionFalse, Reason: "Custom", ObservedGeneration: 2}
	zeta := Condition{Type: "Zeta", Status: ConditionTrue}
	alpha := Condition{Type: "Alpha", Status: ConditionUnknown}

	got := MergeConditions(r, []Condition{zeta, storedReady, alpha})
	require.Equal(t, []Condition{storedReady, SyncedCondition(r), alpha, zeta}, got,
		"a stored Ready replaces the synthesized one; Synced is synthesized; the other types follow by name")

	got = MergeConditions(r, nil)
	require.Equal(t, []Condition{ReadyCondition(r), SyncedCondition(r)}, got, "no stored rows: both synthesized")

	storedSynced := Condition{Type: ConditionSynced, Status: ConditionTrue, Reason: "Stored"}
	got = MergeConditions(r, []Condition{storedSynced})
	require.Equal(t, []Condition{ReadyCondition(r), storedSynced}, got, "a stored Synced keeps its place after Ready")
}
