package store

// These tests drive the plpgsql the store delegates to: schedule_eligible
// and enqueue_operation (00002_scheduling.sql), request_resource_deletion,
// quarantine_resource, unquarantine_resource and resync_resource
// (00003_maintenance.sql). They assert the behaviour architecture.md
// specifies for those functions, as seen through the store.

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/resource"
)

const finManifest = `{
	"kind": "fin",
	"finalizer_name": "example.com/teardown",
	"reactions": [
		{"name": "work", "trigger": "specChange", "emits": ["status"]},
		{"name": "teardown", "trigger": "deleteRequested", "emits": ["finalizer"]}
	]
}`

// queued lists the (task_type, generation) work_queue rows of a resource.
func (e env) queued(t *testing.T, id uuid.UUID) []string {
	t.Helper()
	rows, err := e.pool.Query(context.Background(),
		`SELECT task_type || '@' || generation FROM work_queue WHERE resource_id = $1 ORDER BY 1`, id)
	require.NoError(t, err)
	out := []string{}
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

func TestApplyResource_SchedulesOnCreateAndSpecChangeOnly(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	in := ApplyResourceInput{Kind: "noop", Name: "sched", Spec: json.RawMessage(`{"n": 1}`)}
	r := e.apply(t, in)
	require.Equal(t, []string{"reconcile@1"}, e.queued(t, r.ID), "a new resource is scheduled in the same transaction")

	in.Labels = map[string]string{"a": "b"}
	e.apply(t, in)
	require.Equal(t, []string{"reconcile@1"}, e.queued(t, r.ID), "a labels-only change schedules nothing new")

	in.Spec = json.RawMessage(`{"n": 2}`)
	e.apply(t, in)
	require.Equal(t, []string{"reconcile@2"}, e.queued(t, r.ID), "a spec change schedules the new generation")
}

func TestQuarantine_SetsAsideAndUnquarantineLifts(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	r := e.noop(t, "bad-child", nil)
	e.setScalars(t, r.ID, scalars{generation: 1, failureGen: 1, healthOK: true})

	q, err := e.store.Quarantine(ctx, "noop", "bad-child", "ops@example.com")
	require.NoError(t, err)
	require.Equal(t, resource.PhaseQuarantined, q.Phase)
	require.True(t, q.Quarantined)
	require.Nil(t, q.FrozenUntil)

	u, err := e.store.Unquarantine(ctx, "noop", "bad-child", "ops@example.com")
	require.NoError(t, err)
	require.False(t, u.Quarantined)
	require.NotEqual(t, resource.PhaseQuarantined, u.Phase)

	page, err := e.store.ListEvents(ctx, r.ID, 2, "")
	require.NoError(t, err)
	var got [][2]string
	for _, ev := range page.Items {
		got = append(got, [2]string{ev.Reason, ev.Actor})
	}
	if diff := cmp.Diff([][2]string{{"Unquarantined", "ops@example.com"}, {"Quarantined", "ops@example.com"}}, got); diff != "" {
		t.Errorf("operator events (-want +got):\n%s", diff)
	}
	_, err = e.store.Quarantine(ctx, "noop", "nope", "ops")
	require.ErrorIs(t, err, ErrNotFound)
}

// An orphan is frozen already, on a grace deadline: quarantining it would
// drop that deadline for good, and lifting the quarantine would make a
// resource its owner no longer composes live again (scheduled, reconciled,
// never swept). It is refused, naming the deadline, and nothing is written.
// Lifting a quarantine that is not there records nothing either.
func TestQuarantine_RefusesAnOrphanAndUnquarantineOfNoneRecordsNothing(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	r := e.noop(t, "orphan", nil)
	e.setScalars(t, r.ID, scalars{generation: 2, syncedGen: 1, healthOK: true, frozen: "future"})
	before := scalarInt(t, e, `SELECT count(*) FROM resource_events WHERE resource_id = $1`, r.ID)
	e.exec(t, `DELETE FROM work_queue WHERE resource_id = $1`, r.ID) // its create's task, long done

	_, err := e.store.Quarantine(ctx, "noop", "orphan", "ops")
	require.ErrorIs(t, err, ErrConflict)
	require.Contains(t, err.Error(), "resource noop/orphan is orphaned: its owner no longer composes it, and it is deleted at ")
	_, err = e.store.Unquarantine(ctx, "noop", "orphan", "ops")
	require.NoError(t, err)
	got, err := e.store.GetResource(ctx, "noop", "orphan")
	require.NoError(t, err)
	require.Equal(t, resource.PhaseOrphaned, got.Phase, "still an orphan on its grace")
	require.NotNil(t, got.FrozenUntil)
	require.Equal(t, before, scalarInt(t, e, `SELECT count(*) FROM resource_events WHERE resource_id = $1`, r.ID),
		"no Quarantined event for a refusal, no Unquarantined one for a quarantine that was not there")
	require.Zero(t, scalarInt(t, e, `SELECT count(*) FROM work_queue WHERE resource_id = $1`, r.ID), "nothing scheduled")
}

func TestRequestDeletion_MarksDeleting(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	_, _, err := e.store.ApplyManifest(ctx, []byte(finManifest))
	require.NoError(t, err)

	fin := e.apply(t, ApplyResourceInput{Kind: "fin", Name: "with-finalizer", Spec: json.RawMessage(`{}`)})
	got, err := e.store.RequestDeletion(ctx, "fin", "with-finalizer", "ops")
	require.NoError(t, err)
	require.Equal(t, fin.ID, got.ID)
	require.Equal(t, resource.PhaseDeleting, got.Phase)
	require.NotNil(t, got.DeletionRequestedAt)
	require.False(t, got.Ready)
	require.Equal(t, []string{"example.com/teardown"}, got.Finalizers, "the kind's finalizer is seeded")
	stored, err := e.store.GetResourceByID(ctx, fin.ID)
	require.NoError(t, err, "a finalizer-bearing row stays until its teardown ran")
	require.Equal(t, resource.PhaseDeleting, stored.Phase)

	_, _, err = e.store.ApplyResource(ctx, ApplyResourceInput{Kind: "fin", Name: "with-finalizer", Spec: json.RawMessage(`{"x": 1}`)})
	require.ErrorIs(t, err, ErrConflict, "a resource being deleted takes no apply")

	leaf := e.noop(t, "leaf", nil)
	got, err = e.store.RequestDeletion(ctx, "noop", "leaf", "ops")
	require.NoError(t, err)
	require.Equal(t, leaf.ID, got.ID)
	require.Equal(t, resource.PhaseDeleting, got.Phase, "returned Deleting even when the sweep removed it at once")

	_, err = e.store.RequestDeletion(ctx, "noop", "nope", "ops")
	require.ErrorIs(t, err, ErrNotFound)
}

func TestResync_BumpsNoGeneration(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	r := e.noop(t, "drifty", nil)
	e.setScalars(t, r.ID, scalars{generation: 1, syncedGen: 1, healthOK: true})
	got, err := e.store.Resync(ctx, "noop", "drifty", "ops")
	require.NoError(t, err)
	require.Equal(t, int64(1), got.Generation)
	require.Equal(t, "ResyncRequested", e.eventReasons(t, r.ID)[1])
}

func TestRunOperation_RefusesAResourceWhoseConfigIsMissing(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	_, _, err := e.store.ApplyProviderConfig(ctx, ProviderConfigInput{Kind: "vpc", Name: "eu", Spec: json.RawMessage(`{}`)})
	require.NoError(t, err)
	e.apply(t, ApplyResourceInput{Kind: "vpc", Name: "net", Spec: json.RawMessage(`{"cidr": "10.0.0.0/8"}`), ProviderConfigRef: "eu"})
	// A ref left dangling before the API and the keep-named trigger refused
	// that: nothing new can make one.
	_, err = e.pool.Exec(ctx, `DELETE FROM providerconfigs WHERE kind = 'vpc' AND name = 'eu'`)
	require.NoError(t, err)

	before := e.tableCounts(t)
	_, err = e.store.RunOperation(ctx, "vpc", "net", "enable_flow_logs", nil, "ops")
	require.ErrorIs(t, err, ErrConflict, "not run with the kind's default config")
	require.Contains(t, err.Error(), "providerconfig vpc/eu")
	if diff := cmp.Diff(before, e.tableCounts(t)); diff != "" {
		t.Errorf("a refused operation wrote rows (-before +after):\n%s", diff)
	}
}

func TestRunOperation(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	vpc := e.apply(t, ApplyResourceInput{Kind: "vpc", Name: "net", Spec: json.RawMessage(`{"cidr": "10.0.0.0/8"}`)})
	e.noop(t, "plain", nil)
	doomed := e.apply(t, ApplyResourceInput{Kind: "vpc", Name: "doomed", Spec: json.RawMessage(`{"cidr": "10.0.0.0/8"}`)})
	e.setScalars(t, doomed.ID, scalars{generation: 1, healthOK: true, deleting: true})

	before := e.tableCounts(t)
	_, err := e.store.RunOperation(ctx, "vpc", "net", "reboot", nil, "ops")
	requireInvalid(t, err, "verb", "verb_unknown")
	require.Contains(t, err.Error(), "enable_flow_logs", "the error lists the declared verbs")
	_, err = e.store.RunOperation(ctx, "noop", "plain", "enable_flow_logs", nil, "ops")
	requireInvalid(t, err, "verb", "verb_unknown")
	_, err = e.store.RunOperation(ctx, "vpc", "net", "enable_flow_logs", json.RawMessage(`{`), "ops")
	requireInvalid(t, err, "input", "malformed")
	_, err = e.store.RunOperation(ctx, "vpc", "nope", "enable_flow_logs", nil, "ops")
	require.ErrorIs(t, err, ErrNotFound)
	_, err = e.store.RunOperation(ctx, "vpc", "doomed", "enable_flow_logs", nil, "ops")
	require.ErrorIs(t, err, ErrConflict)
	if diff := cmp.Diff(before, e.tableCounts(t)); diff != "" {
		t.Errorf("rejected operations wrote rows (-before +after):\n%s", diff)
	}

	op, err := e.store.RunOperation(ctx, "vpc", "net", "enable_flow_logs", json.RawMessage(`{"retention_days": 7}`), "ops")
	require.NoError(t, err)
	require.Equal(t, vpc.ID, op.ResourceID)
	require.Equal(t, "enable_flow_logs", op.Verb)
	require.Equal(t, resource.OperationPending, op.State)
	require.JSONEq(t, `{"retention_days": 7}`, string(op.Input))
	got, err := e.store.GetOperation(ctx, op.ID)
	require.NoError(t, err)
	require.Equal(t, op, got)
	require.Equal(t, "OperationRequested", e.eventReasons(t, vpc.ID)[1])

	_, err = e.store.GetOperation(ctx, uuid.New())
	require.ErrorIs(t, err, ErrNotFound)
}
