package store

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/manifest"
)

func TestApplyReactorBinding_Outcomes(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	in := ReactorBindingInput{Name: "vpc-synced-to-sink", WatchKind: "vpc", Transition: manifest.TransitionSynced, Reactor: "statussink"}
	steps := []struct {
		reason string
		edit   func()
		want   ApplyOutcome
	}{
		{"a new binding is created, enabled by default", func() {}, Created},
		{"the same binding again writes nothing", func() {}, Unchanged},
		{"an explicit enabled=true is the same", func() { in.Enabled = ptr(true) }, Unchanged},
		{"a label match", func() { in.LabelMatch = map[string]string{"team": "a"} }, Configured},
		{"another transition", func() { in.Transition = manifest.TransitionFailed }, Configured},
		{"disabling", func() { in.Enabled = ptr(false) }, Configured},
		{"unchanged again", func() {}, Unchanged},
	}
	for _, st := range steps {
		st.edit()
		_, outcome, err := e.store.ApplyReactorBinding(ctx, in)
		require.NoError(t, err, st.reason)
		require.Equal(t, st.want, outcome, st.reason)
	}
	got, err := e.store.GetReactorBinding(ctx, in.Name)
	require.NoError(t, err)
	want := ReactorBinding{Name: in.Name, WatchKind: "vpc", Transition: manifest.TransitionFailed, Reactor: "statussink",
		LabelMatch: map[string]string{"team": "a"}, Enabled: false}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(ReactorBinding{}, "CreatedAt", "UpdatedAt")); diff != "" {
		t.Errorf("stored binding (-want +got):\n%s", diff)
	}
}

func TestApplyReactorBinding_RejectsBadBindingsAndWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	_, _, err := e.store.ApplyManifest(ctx, []byte(`{"kind":"othersink","reactions":[{"name":"r","trigger":"reactor","emits":["sideEffect"]}]}`))
	require.NoError(t, err)
	good := func(edit func(*ReactorBindingInput)) ReactorBindingInput {
		in := ReactorBindingInput{Name: "b", WatchKind: "vpc", Transition: manifest.TransitionSynced, Reactor: "statussink"}
		edit(&in)
		return in
	}
	cases := map[string]struct {
		reason string
		in     ReactorBindingInput
		field  string
		rule   string
	}{
		"BadName":        {"names are DNS-like", good(func(in *ReactorBindingInput) { in.Name = "B!" }), "name", "name_invalid"},
		"UnknownWatch":   {"the watched kind must be declared", good(func(in *ReactorBindingInput) { in.WatchKind = "nope" }), "watchKind", "unknown_kind"},
		"WatchReactor":   {"a reactor kind has no transitions", good(func(in *ReactorBindingInput) { in.WatchKind = "othersink" }), "watchKind", "reactor_kind"},
		"UnknownReactor": {"the reactor must be declared", good(func(in *ReactorBindingInput) { in.Reactor = "nope" }), "reactor", "not_a_reactor"},
		"WorkKindReactor": {"the reactor must be a reactor kind",
			good(func(in *ReactorBindingInput) { in.Reactor = "noop" }), "reactor", "not_a_reactor"},
		"SelfWatch": {"a reactor cannot watch itself",
			good(func(in *ReactorBindingInput) { in.WatchKind, in.Reactor = "statussink", "statussink" }), "reactor", "reactor_watches_itself"},
		"BadTransition":   {"transitions are a closed set", good(func(in *ReactorBindingInput) { in.Transition = "ready" }), "transition", "transition_unknown"},
		"EmptyTransition": {"a transition is required", good(func(in *ReactorBindingInput) { in.Transition = "" }), "transition", "transition_unknown"},
		"CasedTransition": {"transitions are lowercase", good(func(in *ReactorBindingInput) { in.Transition = "SYNCED" }), "transition", "transition_unknown"},
		"BadLabelMatch": {"label_match keys follow the label syntax",
			good(func(in *ReactorBindingInput) { in.LabelMatch = map[string]string{"a b": "c"} }), "labelMatch", "label_key_invalid"},
	}
	before := e.tableCounts(t)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, _, err := e.store.ApplyReactorBinding(ctx, tc.in)
			requireInvalid(t, err, tc.field, tc.rule)
		})
	}
	if diff := cmp.Diff(before, e.tableCounts(t)); diff != "" {
		t.Errorf("rejected bindings wrote rows (-before +after):\n%s", diff)
	}
}

func TestReactorBindings_ListAndDelete(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	_, _, err := e.store.ApplyManifest(ctx, []byte(`{"kind":"othersink","reactions":[{"name":"r","trigger":"reactor","emits":["sideEffect"]}]}`))
	require.NoError(t, err)
	for _, in := range []ReactorBindingInput{
		{Name: "c-vpc-sink", WatchKind: "vpc", Transition: manifest.TransitionSynced, Reactor: "statussink"},
		{Name: "a-noop-sink", WatchKind: "noop", Transition: manifest.TransitionCreated, Reactor: "statussink"},
		{Name: "b-vpc-other", WatchKind: "vpc", Transition: manifest.TransitionDeleted, Reactor: "othersink"},
	} {
		_, _, err := e.store.ApplyReactorBinding(ctx, in)
		require.NoError(t, err)
	}
	names := func(watch, reactor string) []string {
		bs, err := e.store.ListReactorBindings(ctx, watch, reactor)
		require.NoError(t, err)
		out := []string{}
		for _, b := range bs {
			out = append(out, b.Name)
		}
		return out
	}
	cases := map[string]struct {
		reason         string
		watch, reactor string
		want           []string
	}{
		"All":      {"every binding by name", "", "", []string{"a-noop-sink", "b-vpc-other", "c-vpc-sink"}},
		"Watch":    {"one watched kind", "vpc", "", []string{"b-vpc-other", "c-vpc-sink"}},
		"Reactor":  {"one reactor", "", "statussink", []string{"a-noop-sink", "c-vpc-sink"}},
		"Both":     {"both filters", "vpc", "othersink", []string{"b-vpc-other"}},
		"NoneLeft": {"no match", "statussink", "", []string{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, names(tc.watch, tc.reactor)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
	require.NoError(t, e.store.DeleteReactorBinding(ctx, "b-vpc-other"))
	require.ErrorIs(t, e.store.DeleteReactorBinding(ctx, "b-vpc-other"), ErrNotFound)
	_, err = e.store.GetReactorBinding(ctx, "b-vpc-other")
	require.ErrorIs(t, err, ErrNotFound)
	require.Equal(t, []string{"a-noop-sink", "c-vpc-sink"}, names("", ""))
}

// A disabled binding fires nothing: disabling it, or deleting it, drops its
// pending deliveries in the same transaction. Deliveries already claimed
// finish, and other bindings' rows are left alone.
func TestReactorBinding_DisableAndDeleteDropPendingDeliveries(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	for _, name := range []string{"audit", "other"} {
		_, _, err := e.store.ApplyReactorBinding(ctx, ReactorBindingInput{Name: name, WatchKind: "vpc",
			Transition: manifest.TransitionSynced, Reactor: "statussink"})
		require.NoError(t, err)
	}
	_, err := e.pool.Exec(ctx, `
INSERT INTO lifecycle_outbox (resource_id, transition, generation, binding_name, shard_id, reactor, watch_kind, snapshot,
                              worker_id, claim_epoch, heartbeat_at)
SELECT gen_random_uuid(), 'synced', 1, b, g % 256, 'statussink', 'vpc', '{}',
       CASE WHEN g % 4 = 0 THEN 'broker-1' END, CASE WHEN g % 4 = 0 THEN g END, CASE WHEN g % 4 = 0 THEN now() END
  FROM unnest(ARRAY['audit', 'other']) b, generate_series(1, 40) g`)
	require.NoError(t, err)
	rows := func() map[string][2]int { // binding → {pending, claimed}
		t.Helper()
		out := map[string][2]int{}
		r, err := e.pool.Query(ctx, `SELECT binding_name, count(*) FILTER (WHERE worker_id IS NULL), count(*) FILTER (WHERE worker_id IS NOT NULL)
  FROM lifecycle_outbox GROUP BY 1`)
		require.NoError(t, err)
		for r.Next() {
			var b string
			var p, c int
			require.NoError(t, r.Scan(&b, &p, &c))
			out[b] = [2]int{p, c}
		}
		require.NoError(t, r.Err())
		return out
	}
	require.Equal(t, map[string][2]int{"audit": {30, 10}, "other": {30, 10}}, rows())

	_, outcome, err := e.store.ApplyReactorBinding(ctx, ReactorBindingInput{Name: "audit", WatchKind: "vpc",
		Transition: manifest.TransitionSynced, Reactor: "statussink", Enabled: ptr(false)})
	require.NoError(t, err)
	require.Equal(t, Configured, outcome)
	require.Equal(t, map[string][2]int{"audit": {0, 10}, "other": {30, 10}}, rows(), "disabling drops the binding's pending rows")

	require.NoError(t, e.store.DeleteReactorBinding(ctx, "other"))
	require.Equal(t, map[string][2]int{"audit": {0, 10}, "other": {0, 10}}, rows(), "deleting drops the binding's pending rows")

	err = e.store.DeleteReactorBinding(ctx, "other")
	require.ErrorIs(t, err, ErrNotFound)
}

// A binding re-pointed at another reactor, watched kind, transition or label
// selector drops, in the same transaction, the pending deliveries it no
// longer selects: the old reactor would otherwise keep receiving them (or,
// served by no worker any more, they would sit in the outbox for good, out
// of reach of the binding's delete). Rows the binding still selects stay,
// and claimed ones finish.
func TestReactorBinding_RepointDropsThePendingDeliveriesItNoLongerSelects(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	_, _, err := e.store.ApplyManifest(ctx, []byte(`{"kind":"othersink","reactions":[{"name":"r","trigger":"reactor","emits":["sideEffect"]}]}`))
	require.NoError(t, err)
	_, _, err = e.store.ApplyReactorBinding(ctx, ReactorBindingInput{Name: "audit", WatchKind: "vpc",
		Transition: manifest.TransitionSynced, Reactor: "statussink"})
	require.NoError(t, err)
	_, err = e.pool.Exec(ctx, `
INSERT INTO lifecycle_outbox (resource_id, transition, generation, binding_name, shard_id, reactor, watch_kind, snapshot,
                              worker_id, claim_epoch, heartbeat_at)
SELECT gen_random_uuid(), 'synced', 1, 'audit', g % 256, 'statussink', 'vpc',
       jsonb_build_object('labels', jsonb_build_object('team', CASE WHEN g % 2 = 0 THEN 'a' ELSE 'b' END)),
       CASE WHEN g % 5 = 0 THEN 'broker-1' END, CASE WHEN g % 5 = 0 THEN g END, CASE WHEN g % 5 = 0 THEN now() END
  FROM generate_series(1, 20) g`)
	require.NoError(t, err)
	count := func() (pending, claimed int) {
		t.Helper()
		require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE worker_id IS NULL), count(*) FILTER (WHERE worker_id IS NOT NULL)
  FROM lifecycle_outbox`).Scan(&pending, &claimed))
		return pending, claimed
	}
	p, c := count()
	require.Equal(t, [2]int{16, 4}, [2]int{p, c})

	_, _, err = e.store.ApplyReactorBinding(ctx, ReactorBindingInput{Name: "audit", WatchKind: "vpc",
		Transition: manifest.TransitionSynced, Reactor: "statussink", LabelMatch: map[string]string{"team": "a"}})
	require.NoError(t, err)
	p, c = count()
	require.Equal(t, [2]int{8, 4}, [2]int{p, c}, "a narrower selector drops the pending rows it no longer matches, keeps the rest")

	_, _, err = e.store.ApplyReactorBinding(ctx, ReactorBindingInput{Name: "audit", WatchKind: "vpc",
		Transition: manifest.TransitionSynced, Reactor: "othersink", LabelMatch: map[string]string{"team": "a"}})
	require.NoError(t, err)
	p, c = count()
	require.Equal(t, [2]int{0, 4}, [2]int{p, c}, "another reactor: the old reactor's pending rows are dropped")
}
