package manifest_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/manifest"
)

func TestParse(t *testing.T) {
	t.Parallel()
	work := manifest.ReactionDecl{Name: "work", Trigger: manifest.TriggerSpecChange, Emits: manifest.Mask(manifest.OutcomeStatus)}
	cases := map[string]struct {
		reason  string
		raw     string
		want    manifest.KindManifest
		wantErr *manifest.ValidationError
	}{
		"DefaultsVersion": {
			reason: "a manifest without a version is v1",
			raw:    `{"kind": "vpc", "reactions": [{"name": "work", "trigger": "specChange", "emits": ["status"]}]}`,
			want:   manifest.KindManifest{Kind: "vpc", Version: "v1", Reactions: []manifest.ReactionDecl{work}},
		},
		"Everything": {
			reason: "every field decodes; whole-number policy values in any notation; null schemas are untyped",
			raw: `{"kind": "db", "version": "v2alpha1", "description": "d", "spec_schema": {"type": "object"},
				"status_schema": null, "config_schema": true, "finalizer_name": "converge.run/db",
				"max_inflight": 5.0, "task_deadline_secs": 6e1, "resync_interval_secs": 70, "orphan_grace_secs": 80,
				"resync_recomposes": true,
				"reactions": [
					{"name": "work", "trigger": "specChange", "emits": ["status"], "verb": null},
					{"name": "snap", "trigger": "operation", "emits": ["operationOutput"], "verb": "snapshot"},
					{"name": "teardown", "trigger": "deleteRequested", "emits": ["finalizer"], "finalizer": "converge.run/db"}]}`,
			want: manifest.KindManifest{Kind: "db", Version: "v2alpha1", Description: "d",
				SpecSchema: json.RawMessage(`{"type": "object"}`), ConfigSchema: json.RawMessage(`true`),
				FinalizerName: "converge.run/db", MaxInflight: 5, TaskDeadlineSecs: 60, ResyncIntervalSecs: 70,
				OrphanGraceSecs: 80, ResyncRecomposes: true,
				Reactions: []manifest.ReactionDecl{work,
					{Name: "snap", Trigger: manifest.TriggerOperation, Emits: manifest.Mask(manifest.OutcomeOperationOutput), Verb: "snapshot"},
					{Name: "teardown", Trigger: manifest.TriggerDeleteRequested, Emits: manifest.Mask(manifest.OutcomeFinalizer), Finalizer: "converge.run/db"}}},
		},
		"Reads": {
			reason: "reads decodes to a mask; absent is nil (every part), [] is an empty mask (identity only)",
			raw: `{"kind": "net", "reactions": [
					{"name": "compose", "trigger": "specChange", "emits": ["children", "status"], "reads": ["spec"]},
					{"name": "rollup", "trigger": "childrenSettled", "emits": ["status"], "reads": ["childStatus", "status"]},
					{"name": "probe", "trigger": "resync", "emits": ["status"], "reads": []},
					{"name": "work", "trigger": "specChange", "emits": ["status"]}]}`,
			want: manifest.KindManifest{Kind: "net", Version: "v1", Reactions: []manifest.ReactionDecl{
				{Name: "compose", Trigger: manifest.TriggerSpecChange, Emits: manifest.Mask(manifest.OutcomeChildren, manifest.OutcomeStatus),
					Reads: readMask(manifest.ReadSpec)},
				{Name: "rollup", Trigger: manifest.TriggerChildrenSettled, Emits: manifest.Mask(manifest.OutcomeStatus),
					Reads: readMask(manifest.ReadStatus, manifest.ReadChildStatus)},
				{Name: "probe", Trigger: manifest.TriggerResync, Emits: manifest.Mask(manifest.OutcomeStatus),
					Reads: readMask()},
				work}},
		},
		"ReadsChildStatusOnWorker": {
			reason:  "childStatus is only for childrenSettled reactions",
			raw:     `{"kind": "vpc", "reactions": [{"name": "work", "trigger": "specChange", "emits": ["status"], "reads": ["spec", "childStatus"]}]}`,
			wantErr: &manifest.ValidationError{Pointer: "/reactions/0/reads", Rule: manifest.RuleReadsInvalid, Message: "childStatus is only for childrenSettled reactions"},
		},
		"LatticeFirst": {
			reason:  "the lattice is checked before any schema is compiled",
			raw:     `{"kind": "vpc", "spec_schema": {"type": 5}, "reactions": []}`,
			wantErr: &manifest.ValidationError{Pointer: "/reactions", Rule: manifest.RuleReactionsMissing, Message: "must declare at least one reaction"},
		},
		"SchemasInDBOrder": {
			reason:  "schemas compile config, spec, status: the first invalid one is reported, at its pointer",
			raw:     `{"kind": "vpc", "spec_schema": {"type": 5}, "config_schema": {"minimum": "x"}, "reactions": [{"name": "work", "trigger": "specChange", "emits": ["status"]}]}`,
			wantErr: &manifest.ValidationError{Pointer: "/config_schema", Rule: manifest.RuleSchemaInvalid},
		},
		"StatusSchemaInvalid": {
			reason:  "the advisory status schema must compile too",
			raw:     `{"kind": "vpc", "status_schema": {"required": "id"}, "reactions": [{"name": "work", "trigger": "specChange", "emits": ["status"]}]}`,
			wantErr: &manifest.ValidationError{Pointer: "/status_schema", Rule: manifest.RuleSchemaInvalid},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := manifest.Parse([]byte(tc.raw))
			if tc.wantErr != nil {
				var ve *manifest.ValidationError
				require.ErrorAs(t, err, &ve, tc.reason)
				gotErr := *ve
				if tc.wantErr.Message == "" {
					gotErr.Message = ""
				}
				if diff := cmp.Diff(*tc.wantErr, gotErr); diff != "" {
					t.Errorf("%s\n-want +got:\n%s", tc.reason, diff)
				}
				return
			}
			require.NoError(t, err, tc.reason)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\n-want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// readMask is a non-nil *ReadMask of bits: a reaction's declared reads.
func readMask(bits ...manifest.ReadBit) *manifest.ReadMask {
	m := manifest.Reads(bits...)
	return &m
}
