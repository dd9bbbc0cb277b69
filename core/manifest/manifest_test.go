package manifest_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/manifest"
)

func TestOutcomeMask_JSONRoundTrip(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason string
		mask   manifest.OutcomeMask
		json   string
	}{
		"Empty": {
			reason: "the empty mask is an empty array, never null",
			mask:   0,
			json:   `[]`,
		},
		"Worker": {
			reason: "one bit is one name",
			mask:   manifest.Mask(manifest.OutcomeStatus),
			json:   `["status"]`,
		},
		"Composer": {
			reason: "names come out in canonical order, whatever order the bits were given in",
			mask:   manifest.Mask(manifest.OutcomeStatus, manifest.OutcomeEdges, manifest.OutcomeChildren),
			json:   `["children","edges","status"]`,
		},
		"All": {
			reason: "every outcome has a name",
			mask: manifest.Mask(manifest.OutcomeChildren, manifest.OutcomeEdges, manifest.OutcomeConfigs,
				manifest.OutcomeStatus, manifest.OutcomeConditions, manifest.OutcomeFinalizer,
				manifest.OutcomeOperationOutput, manifest.OutcomeSideEffect),
			json: `["children","edges","configs","status","conditions","finalizer","operationOutput","sideEffect"]`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := json.Marshal(tc.mask)
			require.NoError(t, err)
			if diff := cmp.Diff(tc.json, string(got)); diff != "" {
				t.Errorf("%s\nMarshal: -want +got:\n%s", tc.reason, diff)
			}
			var back manifest.OutcomeMask
			require.NoError(t, json.Unmarshal(got, &back))
			if diff := cmp.Diff(tc.mask, back); diff != "" {
				t.Errorf("%s\nround trip: -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestOutcomeMask_UnmarshalJSON(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason  string
		json    string
		want    manifest.OutcomeMask
		wantErr string
	}{
		"AnyOrder": {
			reason: "input order does not matter",
			json:   `["sideEffect","children"]`,
			want:   manifest.Mask(manifest.OutcomeChildren, manifest.OutcomeSideEffect),
		},
		"UnknownOutcome": {
			reason:  "the outcome set is closed",
			json:    `["status","logs"]`,
			wantErr: `emits: unknown outcome "logs"`,
		},
		"NotAnArray": {
			reason:  "emits is an array of names",
			json:    `"status"`,
			wantErr: "emits: ",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var got manifest.OutcomeMask
			err := json.Unmarshal([]byte(tc.json), &got)
			if tc.wantErr != "" {
				require.Error(t, err, tc.reason)
				require.True(t, strings.HasPrefix(err.Error(), tc.wantErr), "%s: got %q", tc.reason, err)
				return
			}
			require.NoError(t, err, tc.reason)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\n-want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestReadMask_JSONRoundTrip(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason string
		mask   manifest.ReadMask
		json   string
	}{
		"Empty": {
			reason: "the empty mask (identity only) is an empty array, never null",
			mask:   0,
			json:   `[]`,
		},
		"Spec": {
			reason: "one bit is one name",
			mask:   manifest.ReadMask(manifest.ReadSpec),
			json:   `["spec"]`,
		},
		"Rollup": {
			reason: "names come out in canonical order, whatever order the bits were given in",
			mask:   manifest.ReadMask(manifest.ReadChildStatus | manifest.ReadLabels | manifest.ReadStatus),
			json:   `["status","labels","childStatus"]`,
		},
		"All": {
			reason: "every part has a name; AllReads is all five",
			mask:   manifest.AllReads,
			json:   `["spec","status","labels","finalizers","childStatus"]`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := json.Marshal(tc.mask)
			require.NoError(t, err)
			if diff := cmp.Diff(tc.json, string(got)); diff != "" {
				t.Errorf("%s\nMarshal: -want +got:\n%s", tc.reason, diff)
			}
			var back manifest.ReadMask
			require.NoError(t, json.Unmarshal(got, &back))
			if diff := cmp.Diff(tc.mask, back); diff != "" {
				t.Errorf("%s\nround trip: -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestReadMask_UnmarshalJSON(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason  string
		json    string
		want    manifest.ReadMask
		wantErr string
	}{
		"AnyOrder": {
			reason: "input order does not matter",
			json:   `["finalizers","spec"]`,
			want:   manifest.ReadMask(manifest.ReadSpec | manifest.ReadFinalizers),
		},
		"UnknownPart": {
			reason:  "the part set is closed",
			json:    `["spec","children"]`,
			wantErr: `reads: unknown part "children"`,
		},
		"CaseSensitive": {
			reason:  "part names are case-sensitive",
			json:    `["childstatus"]`,
			wantErr: `reads: unknown part "childstatus"`,
		},
		"NotAnArray": {
			reason:  "reads is an array of names",
			json:    `"spec"`,
			wantErr: "reads: ",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var got manifest.ReadMask
			err := json.Unmarshal([]byte(tc.json), &got)
			if tc.wantErr != "" {
				require.Error(t, err, tc.reason)
				require.True(t, strings.HasPrefix(err.Error(), tc.wantErr), "%s: got %q", tc.reason, err)
				return
			}
			require.NoError(t, err, tc.reason)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\n-want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestReadBit_Names(t *testing.T) {
	t.Parallel()
	for _, name := range manifest.AllReads.Names() {
		bit, ok := manifest.ParseRead(name)
		require.True(t, ok, "%s parses", name)
		require.Equal(t, name, bit.String(), "String is the manifest name")
		require.True(t, manifest.AllReads.Has(bit))
	}
	_, ok := manifest.ParseRead("Spec")
	require.False(t, ok, "names are case-sensitive")
	require.Equal(t, "ReadBit(64)", manifest.ReadBit(64).String(), "a bit outside the set names its value")
	require.False(t, manifest.AllReads.Has(manifest.ReadBit(64)), "AllReads is the five parts only")
}

func TestReactionDecl_Reading(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason   string
		decl     string
		want     manifest.ReadMask
		wantJSON string
	}{
		"Absent": {
			reason:   "a reaction that declares no reads reads every part, and re-encodes without reads",
			decl:     `{"name":"work","trigger":"specChange","emits":["status"]}`,
			want:     manifest.AllReads,
			wantJSON: `{"name":"work","trigger":"specChange","emits":["status"]}`,
		},
		"Empty": {
			reason:   "an empty reads is identity only, and stays explicit when re-encoded",
			decl:     `{"name":"work","trigger":"specChange","emits":["status"],"reads":[]}`,
			want:     0,
			wantJSON: `{"name":"work","trigger":"specChange","emits":["status"],"reads":[]}`,
		},
		"Listed": {
			reason:   "a list reads exactly its parts, re-encoded in canonical order",
			decl:     `{"name":"rollup","trigger":"childrenSettled","emits":["status"],"reads":["childStatus","spec"]}`,
			want:     manifest.ReadMask(manifest.ReadSpec | manifest.ReadChildStatus),
			wantJSON: `{"name":"rollup","trigger":"childrenSettled","emits":["status"],"reads":["spec","childStatus"]}`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var r manifest.ReactionDecl
			require.NoError(t, json.Unmarshal([]byte(tc.decl), &r))
			if diff := cmp.Diff(tc.want, r.Reading()); diff != "" {
				t.Errorf("%s\nReading: -want +got:\n%s", tc.reason, diff)
			}
			out, err := json.Marshal(r)
			require.NoError(t, err)
			if diff := cmp.Diff(tc.wantJSON, string(out)); diff != "" {
				t.Errorf("%s\nMarshal: -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func reaction(name string, trigger manifest.Trigger, bits ...manifest.OutcomeBit) manifest.ReactionDecl {
	return manifest.ReactionDecl{Name: name, Trigger: trigger, Emits: manifest.Mask(bits...)}
}

func TestKindManifest_IsReactor(t *testing.T) {
	t.Parallel()
	react := reaction("react", manifest.TriggerReactor, manifest.OutcomeSideEffect)
	cases := map[string]struct {
		reason    string
		reactions []manifest.ReactionDecl
		want      bool
	}{
		"NoReactions": {
			reason: "a kind with no reactions is not a reactor (≥1 required)",
			want:   false,
		},
		"OnlyReactor": {
			reason:    "only reactor reactions: a reactor kind",
			reactions: []manifest.ReactionDecl{react},
			want:      true,
		},
		"Worker": {
			reason:    "a work kind owns resources",
			reactions: []manifest.ReactionDecl{reaction("work", manifest.TriggerSpecChange, manifest.OutcomeStatus)},
			want:      false,
		},
		"Mixed": {
			reason:    "a reactor reaction next to a specChange one is a work kind",
			reactions: []manifest.ReactionDecl{react, reaction("work", manifest.TriggerSpecChange, manifest.OutcomeStatus)},
			want:      false,
		},
		"ReactorAndOperation": {
			reason: "an operation makes it a work kind too",
			reactions: []manifest.ReactionDecl{react,
				{Name: "poke", Trigger: manifest.TriggerOperation, Emits: manifest.Mask(manifest.OutcomeOperationOutput), Verb: "poke"}},
			want: false,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m := manifest.KindManifest{Kind: "k", Reactions: tc.reactions}
			if diff := cmp.Diff(tc.want, m.IsReactor()); diff != "" {
				t.Errorf("%s\n-want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// roles is what the accessors find in a manifest: the name of each role's
// reaction ("" = none), the finalizer and the verbs.
type roles struct {
	Composer, Worker, Rollup, Resync, Deleter, Reactor, Operation string
	Finalizer                                                     string
	Verbs                                                         []string
}

func rolesOf(m manifest.KindManifest, verb string) roles {
	name := func(r manifest.ReactionDecl, ok bool) string {
		if !ok {
			return ""
		}
		return r.Name
	}
	return roles{
		Composer:  name(m.Composer()),
		Worker:    name(m.Worker()),
		Rollup:    name(m.Rollup()),
		Resync:    name(m.Resync()),
		Deleter:   name(m.Deleter()),
		Reactor:   name(m.Reactor()),
		Operation: name(m.Operation(verb)),
		Finalizer: m.Finalizer(),
		Verbs:     m.Verbs(),
	}
}

func TestKindManifest_Accessors(t *testing.T) {
	t.Parallel()
	teardown := manifest.ReactionDecl{Name: "teardown", Trigger: manifest.TriggerDeleteRequested,
		Emits: manifest.Mask(manifest.OutcomeFinalizer), Finalizer: "converge.run/own"}
	snapshot := manifest.ReactionDecl{Name: "snap", Trigger: manifest.TriggerOperation,
		Emits: manifest.Mask(manifest.OutcomeOperationOutput), Verb: "snapshot"}
	restore := manifest.ReactionDecl{Name: "restore", Trigger: manifest.TriggerOperation,
		Emits: manifest.Mask(manifest.OutcomeOperationOutput), Verb: "restore"}
	cases := map[string]struct {
		reason string
		m      manifest.KindManifest
		verb   string
		want   roles
	}{
		"Empty": {
			reason: "no reactions, no roles, hard delete",
			want:   roles{},
		},
		"Composite": {
			reason: "a composer, a worker, a rollup, a resync and a deleter are each found by their (Trigger, Emits)",
			m: manifest.KindManifest{Reactions: []manifest.ReactionDecl{
				reaction("probe", manifest.TriggerSpecChange, manifest.OutcomeStatus),
				reaction("compose", manifest.TriggerSpecChange, manifest.OutcomeChildren, manifest.OutcomeStatus),
				reaction("notice", manifest.TriggerChildrenSettled, manifest.OutcomeConditions),
				reaction("rollup", manifest.TriggerChildrenSettled, manifest.OutcomeStatus),
				reaction("observe", manifest.TriggerResync, manifest.OutcomeStatus),
				teardown,
			}},
			want: roles{Composer: "compose", Worker: "probe", Rollup: "rollup", Resync: "observe",
				Deleter: "teardown", Finalizer: "converge.run/own"},
		},
		"FinalizerNameWins": {
			reason: "the manifest's finalizer_name takes precedence over the deleter's own",
			m:      manifest.KindManifest{FinalizerName: "converge.run/kind", Reactions: []manifest.ReactionDecl{teardown}},
			want:   roles{Deleter: "teardown", Finalizer: "converge.run/kind"},
		},
		"FinalizerOnManifestOnly": {
			reason: "a deleter without its own finalizer uses finalizer_name",
			m: manifest.KindManifest{FinalizerName: "converge.run/kind", Reactions: []manifest.ReactionDecl{
				reaction("teardown", manifest.TriggerDeleteRequested, manifest.OutcomeFinalizer)}},
			want: roles{Deleter: "teardown", Finalizer: "converge.run/kind"},
		},
		"ChildrenSettledWithoutStatus": {
			reason: "a childrenSettled reaction that does not emit status is no rollup",
			m: manifest.KindManifest{Reactions: []manifest.ReactionDecl{
				reaction("notice", manifest.TriggerChildrenSettled, manifest.OutcomeConditions)}},
			want: roles{},
		},
		"Operations": {
			reason: "Operation finds the reaction for one verb; Verbs lists them in declaration order",
			m:      manifest.KindManifest{Reactions: []manifest.ReactionDecl{snapshot, restore}},
			verb:   "restore",
			want:   roles{Operation: "restore", Verbs: []string{"snapshot", "restore"}},
		},
		"UnknownVerb": {
			reason: "no reaction handles an undeclared verb",
			m:      manifest.KindManifest{Reactions: []manifest.ReactionDecl{snapshot}},
			verb:   "resize",
			want:   roles{Verbs: []string{"snapshot"}},
		},
		"Reactor": {
			reason: "the reactor reaction",
			m: manifest.KindManifest{Reactions: []manifest.ReactionDecl{
				reaction("react", manifest.TriggerReactor, manifest.OutcomeSideEffect)}},
			want: roles{Reactor: "react"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, rolesOf(tc.m, tc.verb)); diff != "" {
				t.Errorf("%s\n-want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestKindManifest_JSONRoundTrip: every legal corpus manifest that parses
// marshals back to a document that parses to the same manifest.
func TestKindManifest_JSONRoundTrip(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(corpusDir, "legal-*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	compact := cmp.Transformer("compact", func(r json.RawMessage) string {
		if len(r) == 0 {
			return ""
		}
		var v any
		require.NoError(t, json.Unmarshal(r, &v))
		b, err := json.Marshal(v)
		require.NoError(t, err)
		return string(b)
	})
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".json"), func(t *testing.T) {
			t.Parallel()
			raw, err := os.ReadFile(f)
			require.NoError(t, err)
			first, err := manifest.Parse(raw)
			if err != nil {
				require.Contains(t, corpus[filepath.Base(f)].parseRule, manifest.RuleSchemaInvalid, "only a schema may fail to parse")
				return
			}
			out, err := json.Marshal(first)
			require.NoError(t, err)
			second, err := manifest.Parse(out)
			require.NoError(t, err, "re-parse %s", out)
			if diff := cmp.Diff(first, second, compact); diff != "" {
				t.Errorf("round trip: -first +second:\n%s", diff)
			}
		})
	}
}
