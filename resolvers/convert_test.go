package resolvers

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/graph/model"
)

// The GraphQL model carries no core type; the nested resolvers rebuild the
// core row from it, so the round trip must keep every field.
func TestFromResource_InvertsToResource(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	later := now.Add(time.Hour)
	owner, root := uuid.New(), uuid.New()
	cases := map[string]struct {
		reason string
		in     resource.Resource
	}{
		"Full": {
			reason: "every field set survives the round trip",
			in: resource.Resource{ID: uuid.New(), Kind: "net", Version: "v1", Name: "a",
				Labels: map[string]string{"team": "x"}, Spec: json.RawMessage(`{"cidr":"10.0.0.0/8"}`),
				Status: json.RawMessage(`{"ok":true}`), Phase: resource.PhaseReconciling, Ready: false,
				Generation: 4, SyncedGen: 3, ComposedGen: 4, HealthOK: true, FailureGen: 2, FailureTerminal: true,
				Finalizers: []string{"f"}, DeletionRequestedAt: &now, FrozenUntil: &later, Quarantined: true,
				OwnerID: &owner, RootID: &root, ProviderConfigRef: "impatient", ShardID: 7,
				CreatedAt: now, UpdatedAt: later},
		},
		"Root": {
			reason: "a root has no owner, no root and the default config",
			in: resource.Resource{ID: uuid.New(), Kind: "net", Version: "v1", Name: "b", Labels: map[string]string{},
				Spec: json.RawMessage(`{}`), Phase: resource.PhaseReady, Ready: true, Generation: 1, SyncedGen: 1,
				HealthOK: true, Finalizers: []string{}, CreatedAt: now, UpdatedAt: now},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.in, fromResource(toResource(tc.in))); diff != "" {
				t.Errorf("%s: fromResource(toResource(r)) -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// Reaction.reads is the handler's effective reads: what the manifest
// declares, or every part when it declares none.
func TestToKind_ReactionReads(t *testing.T) {
	t.Parallel()
	all := []model.ResourcePart{model.ResourcePartSpec, model.ResourcePartStatus, model.ResourcePartLabels,
		model.ResourcePartFinalizers, model.ResourcePartChildStatus}
	cases := map[string]struct {
		reason    string
		reactions string
		want      [][]model.ResourcePart
	}{
		"Absent": {
			reason:    "a reaction without reads receives every part, CHILD_STATUS included",
			reactions: `[{"name":"work","trigger":"specChange","emits":["status"]}]`,
			want:      [][]model.ResourcePart{all},
		},
		"Empty": {
			reason:    "an empty reads is identity only: an empty list, never null",
			reactions: `[{"name":"work","trigger":"specChange","emits":["status"],"reads":[]}]`,
			want:      [][]model.ResourcePart{{}},
		},
		"Listed": {
			reason: "declared parts in canonical order, whatever order the manifest lists them in",
			reactions: `[{"name":"compose","trigger":"specChange","emits":["children","status"],"reads":["labels","spec"]},
				{"name":"rollup","trigger":"childrenSettled","emits":["status"],"reads":["childStatus","status"]},
				{"name":"teardown","trigger":"deleteRequested","emits":["finalizer"],"finalizer":"f","reads":["finalizers"]},
				{"name":"probe","trigger":"resync","emits":["status"]}]`,
			want: [][]model.ResourcePart{
				{model.ResourcePartSpec, model.ResourcePartLabels},
				{model.ResourcePartStatus, model.ResourcePartChildStatus},
				{model.ResourcePartFinalizers},
				all,
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m, err := manifest.Parse([]byte(`{"kind":"net","reactions":` + tc.reactions + `}`))
			if err != nil {
				t.Fatalf("%s: parse: %v", tc.reason, err)
			}
			k := toKind(store.Kind{Name: m.Kind, Version: m.Version, Manifest: m})
			got := make([][]model.ResourcePart, len(k.Reactions))
			for i, r := range k.Reactions {
				got[i] = r.Reads
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s: Reaction.reads -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// Every read bit has a GraphQL part: AllReads maps to every ResourcePart.
func TestReadParts_CoverEveryBit(t *testing.T) {
	t.Parallel()
	got := toReads(manifest.ReactionDecl{})
	if diff := cmp.Diff(model.AllResourcePart, got); diff != "" {
		t.Errorf("the parts of AllReads -every ResourcePart +mapped:\n%s", diff)
	}
	var mapped manifest.ReadMask
	for _, p := range readParts {
		mapped |= manifest.ReadMask(p.bit)
	}
	if mapped != manifest.AllReads {
		t.Errorf("readParts maps %b, AllReads is %b", mapped, manifest.AllReads)
	}
}

// planResource's outcome is an enum: every outcome the store's apply can
// return must be one of its values (gqlgen writes an enum out unchecked, so
// one missing from the schema reaches clients as a value the schema does not
// declare).
func TestToOutcome_EveryStoreOutcomeIsInTheSchema(t *testing.T) {
	t.Parallel()
	for _, o := range []store.ApplyOutcome{store.Created, store.Configured, store.Unchanged, store.Migrated} {
		if got := toOutcome(o); !got.IsValid() {
			t.Errorf("store outcome %q maps to %q, which the ApplyOutcome enum does not declare", o, got)
		}
	}
}
