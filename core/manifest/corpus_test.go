package manifest_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/db/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const corpusDir = "testdata/manifests"

// corpusCase is the expected outcome of one file in testdata/manifests. The
// file name's prefix says the same: legal-*, illegal-* (a lattice rule) or
// malformed-* (not JSON Postgres stores).
type corpusCase struct {
	reason string
	// rule and pointer are what ValidateManifest and the DB CHECK both
	// report; rule "" means both accept.
	rule, pointer string
	// message, when set, is the violation's message (before " [rule]"):
	// cases that pin which of several violations wins.
	message string
	// parseRule is Parse's rule where it differs: schema compilation is
	// Go-only, so Parse can reject what the lattice accepts.
	parseRule string
	// reading, when set, is each parsed reaction's effective reads
	// (ReactionDecl.Reading), in declaration order.
	reading []manifest.ReadMask
}

var corpus = map[string]corpusCase{
	// Legal.
	"legal-worker.json": {
		reason: "the spec's leaf work kind: one specChange reaction emitting status, typed spec and status"},
	"legal-composer-with-rollup-and-finalizer.json": {
		reason: "a composite: one composer (children+edges+configs+status), one rollup, a deleter using finalizer_name; $schema is ignored"},
	"legal-composer-with-conditions-only.json": {
		reason: "a composer may report conditions instead of status; emits order is free"},
	"legal-composer-and-worker.json": {
		reason: "a composer and a plain specChange worker may coexist: only composers are limited to one"},
	"legal-reactor-kind.json": {
		reason: "the spec's reactor kind: exactly one reactor reaction emitting only sideEffect"},
	"legal-mixed-worker-and-reactor.json": {
		reason: "a kind may mix a worker with a reactor reaction (it is then not a reactor kind)"},
	"legal-finalizer-on-manifest.json": {
		reason: "deleteRequested takes its finalizer from finalizer_name"},
	"legal-finalizer-on-reaction.json": {
		reason: "deleteRequested takes its finalizer from the reaction"},
	"legal-finalizer-on-both-agree.json": {
		reason: "a deleter may repeat finalizer_name"},
	"legal-finalizer-on-manifest-only-no-deleter.json": {
		reason: "the lattice does not require a deleter when finalizer_name is set (see the report's open issue)"},
	"legal-operation-verbs.json": {
		reason: "operation reactions with distinct verbs"},
	"legal-null-optional-fields.json": {
		reason: "null description, schemas, finalizer_name, verb and finalizer are allowed and mean absent"},
	"legal-empty-verb-and-finalizer-on-worker.json": {
		reason: "an empty verb or finalizer on a non-operation/non-delete reaction counts as absent"},
	"legal-boolean-schemas.json": {
		reason: "true and false are JSON Schemas"},
	"legal-version-v2beta1.json": {
		reason: "a beta version name"},
	"legal-resync.json": {
		reason: "a resync reaction with resync policy"},
	"legal-childrensettled-without-status-is-not-a-rollup.json": {
		reason: "a childrenSettled reaction without status is not a second rollup"},
	"legal-policy-zero-and-max.json": {
		reason: "policy integers at both bounds, resync_recomposes false"},
	"legal-policy-whole-decimals.json": {
		reason: "10.0, 1e2, 3000E-1 and -0 are whole numbers in range, as in Postgres numeric and JSON Schema's integer"},
	"legal-duplicate-keys-last-wins.json": {
		reason: "duplicate keys: the last value wins, as in jsonb"},
	"legal-unicode-escapes.json": {
		reason: "\\u escapes in a key's value, a surrogate pair and an escaped backslash before u0000 are fine"},
	"legal-invalid-json-schema-db-accepts.json": {
		reason:    "the DB cannot compile JSON Schema: {\"type\":5} passes the lattice, Parse rejects it",
		parseRule: manifest.RuleSchemaInvalid},
	"legal-external-ref-schema-db-accepts.json": {
		reason:    "an external $ref passes the lattice; Parse refuses to load it (schemas are self-contained)",
		parseRule: manifest.RuleSchemaInvalid},
	"legal-reads-list.json": {
		reason: "reads lists parts in any order on any trigger; a reaction without reads reads every part",
		reading: []manifest.ReadMask{
			manifest.Reads(manifest.ReadSpec, manifest.ReadLabels),
			manifest.Reads(manifest.ReadSpec, manifest.ReadFinalizers),
			manifest.Reads(manifest.ReadSpec, manifest.ReadStatus),
			manifest.AllReads,
			manifest.Reads(manifest.ReadStatus, manifest.ReadLabels),
		}},
	"legal-reads-empty.json": {
		reason:  "an empty reads is legal: the handler gets the resource's identity only",
		reading: []manifest.ReadMask{0}},
	"legal-reads-child-status-on-rollup.json": {
		reason: "childStatus on childrenSettled reactions, a rollup or not; a composer reads its spec and labels",
		reading: []manifest.ReadMask{
			manifest.Reads(manifest.ReadSpec, manifest.ReadLabels),
			manifest.Reads(manifest.ReadStatus, manifest.ReadChildStatus),
			manifest.Reads(manifest.ReadChildStatus),
		}},
	"legal-reads-rollup-without-child-status.json": {
		reason:  "a rollup may read nothing: its children's kind, name, phase and health always ride",
		reading: []manifest.ReadMask{manifest.AllReads, 0}},

	// Illegal, one rule at a time in the DB's order.
	"illegal-not-an-object.json": {
		reason: "the document must be an object", rule: manifest.RuleUnknownField, pointer: ""},
	"illegal-null-document.json": {
		reason: "JSON null is not an object", rule: manifest.RuleUnknownField, pointer: ""},
	"illegal-unknown-top-level-fields.json": {
		reason: "unknown keys are reported in byte order: alpha before zeta", rule: manifest.RuleUnknownField, pointer: "/alpha"},
	"illegal-unknown-field-camelcase.json": {
		reason: "keys are snake_case and case-sensitive", rule: manifest.RuleUnknownField, pointer: "/specSchema"},
	"illegal-unknown-field-pointer-escaped.json": {
		reason: "a key with / and ~ is escaped in the JSON pointer (RFC 6901)", rule: manifest.RuleUnknownField, pointer: "/a~1b~0c"},
	"illegal-unknown-field-before-kind.json": {
		reason: "unknown fields are checked before kind", rule: manifest.RuleUnknownField, pointer: "/Kind"},
	"illegal-kind-missing.json": {
		reason: "kind is required", rule: manifest.RuleKindInvalid, pointer: "/kind"},
	"illegal-kind-uppercase.json": {
		reason: "kind is lowercase", rule: manifest.RuleKindInvalid, pointer: "/kind"},
	"illegal-kind-trailing-newline.json": {
		reason: "$ anchors at the very end in both regex engines", rule: manifest.RuleKindInvalid, pointer: "/kind"},
	"illegal-kind-number.json": {
		reason: "kind must be a string", rule: manifest.RuleKindInvalid, pointer: "/kind"},
	"illegal-kind-too-long.json": {
		reason: "kind is at most 63 characters", rule: manifest.RuleKindInvalid, pointer: "/kind"},
	"illegal-duplicate-keys-last-wins.json": {
		reason: "duplicate keys: the last (invalid) kind wins", rule: manifest.RuleKindInvalid, pointer: "/kind"},
	"illegal-order-kind-before-reactions.json": {
		reason: "kind is checked before reactions", rule: manifest.RuleKindInvalid, pointer: "/kind"},
	"illegal-version-null.json": {
		reason: "version may be absent but not null", rule: manifest.RuleVersionInvalid, pointer: "/version"},
	"illegal-version-format.json": {
		reason: "version looks like v1", rule: manifest.RuleVersionInvalid, pointer: "/version"},
	"illegal-description-number.json": {
		reason: "description is a string", rule: manifest.RuleDescriptionInvalid, pointer: "/description"},
	"illegal-schema-string.json": {
		reason: "a schema is an object, a boolean or null", rule: manifest.RuleSchemaInvalid, pointer: "/spec_schema"},
	"illegal-schemas-checked-config-first.json": {
		reason: "schemas are checked config, spec, status", rule: manifest.RuleSchemaInvalid, pointer: "/config_schema"},
	"illegal-policy-fraction.json": {
		reason: "1.5 is not an integer", rule: manifest.RulePolicyInvalid, pointer: "/max_inflight"},
	"illegal-policy-tiny-fraction.json": {
		reason: "1.0000000000000000000000000000001 is not an integer (exact, no float rounding)", rule: manifest.RulePolicyInvalid, pointer: "/max_inflight"},
	"illegal-policy-huge-exponent.json": {
		reason: "1e300 is an integer but out of int4 range", rule: manifest.RulePolicyInvalid, pointer: "/max_inflight"},
	"illegal-policy-negative.json": {
		reason: "policy integers are non-negative", rule: manifest.RulePolicyInvalid, pointer: "/orphan_grace_secs"},
	"illegal-policy-too-large.json": {
		reason: "policy integers fit int4", rule: manifest.RulePolicyInvalid, pointer: "/task_deadline_secs"},
	"illegal-policy-string.json": {
		reason: "a numeric string is not a number", rule: manifest.RulePolicyInvalid, pointer: "/resync_interval_secs"},
	"illegal-policy-null.json": {
		reason: "policy integers may be absent but not null", rule: manifest.RulePolicyInvalid, pointer: "/max_inflight"},
	"illegal-policy-bool.json": {
		reason: "true is not a number", rule: manifest.RulePolicyInvalid, pointer: "/max_inflight"},
	"illegal-resync-recomposes-string.json": {
		reason: "resync_recomposes is a boolean", rule: manifest.RulePolicyInvalid, pointer: "/resync_recomposes"},
	"illegal-finalizer-name-number.json": {
		reason: "finalizer_name is a string", rule: manifest.RuleFinalizerNameInvalid, pointer: "/finalizer_name"},
	"illegal-reactions-missing.json": {
		reason: "a kind declares at least one reaction", rule: manifest.RuleReactionsMissing, pointer: "/reactions"},
	"illegal-reactions-empty.json": {
		reason: "an empty reaction list", rule: manifest.RuleReactionsMissing, pointer: "/reactions"},
	"illegal-reactions-null.json": {
		reason: "null reactions", rule: manifest.RuleReactionsMissing, pointer: "/reactions"},
	"illegal-reactions-object.json": {
		reason: "reactions is an array", rule: manifest.RuleReactionsMissing, pointer: "/reactions"},
	"illegal-reaction-not-object.json": {
		reason: "each reaction is an object", rule: manifest.RuleReactionInvalid, pointer: "/reactions/1"},
	"illegal-reactor-with-transition.json": {
		reason: "a reactor CRD carries no transition: that lives on the binding", rule: manifest.RuleUnknownField, pointer: "/reactions/0/transition"},
	"illegal-reaction-name-invalid.json": {
		reason: "a reaction name starts with a letter", rule: manifest.RuleReactionNameInvalid, pointer: "/reactions/0/name"},
	"illegal-reaction-name-missing.json": {
		reason: "a reaction has a name", rule: manifest.RuleReactionNameInvalid, pointer: "/reactions/0/name"},
	"illegal-reaction-name-duplicate.json": {
		reason: "reaction names are unique", rule: manifest.RuleReactionNameDuplicate, pointer: "/reactions/1/name"},
	"illegal-trigger-unknown.json": {
		reason: "the trigger set is closed", rule: manifest.RuleTriggerUnknown, pointer: "/reactions/0/trigger"},
	"illegal-trigger-wrong-case.json": {
		reason: "triggers are case-sensitive", rule: manifest.RuleTriggerUnknown, pointer: "/reactions/0/trigger"},
	"illegal-trigger-missing.json": {
		reason: "a reaction has a trigger", rule: manifest.RuleTriggerUnknown, pointer: "/reactions/0/trigger"},
	"illegal-emits-empty.json": {
		reason: "a reaction emits something", rule: manifest.RuleEmitsInvalid, pointer: "/reactions/0/emits"},
	"illegal-emits-not-array.json": {
		reason: "emits is an array of names", rule: manifest.RuleEmitsInvalid, pointer: "/reactions/0/emits"},
	"illegal-emits-unknown-outcome.json": {
		reason: "the outcome set is closed", rule: manifest.RuleEmitsInvalid, pointer: "/reactions/0/emits"},
	"illegal-emits-duplicate-outcome.json": {
		reason: "an outcome is listed once", rule: manifest.RuleEmitsInvalid, pointer: "/reactions/0/emits"},
	"illegal-reads-not-array.json": {
		reason: "reads is an array of names", rule: manifest.RuleReadsInvalid, pointer: "/reactions/0/reads",
		message: "must be an array of parts among spec, status, labels, finalizers, childStatus"},
	"illegal-reads-null.json": {
		reason: "reads may be absent (every part) but not null", rule: manifest.RuleReadsInvalid, pointer: "/reactions/0/reads",
		message: "must be an array of parts among spec, status, labels, finalizers, childStatus"},
	"illegal-reads-object.json": {
		reason: "an object of flags is not an array", rule: manifest.RuleReadsInvalid, pointer: "/reactions/0/reads"},
	"illegal-reads-unknown-part.json": {
		reason: "the part set is closed", rule: manifest.RuleReadsInvalid, pointer: "/reactions/0/reads",
		message: "parts must be among spec, status, labels, finalizers, childStatus"},
	"illegal-reads-wrong-case.json": {
		reason: "part names are case-sensitive", rule: manifest.RuleReadsInvalid, pointer: "/reactions/0/reads"},
	"illegal-reads-number.json": {
		reason: "a part is a string", rule: manifest.RuleReadsInvalid, pointer: "/reactions/0/reads"},
	"illegal-reads-nested-array.json": {
		reason: "a nested array is not a part name", rule: manifest.RuleReadsInvalid, pointer: "/reactions/0/reads"},
	"illegal-reads-duplicate.json": {
		reason: "a part is listed once", rule: manifest.RuleReadsInvalid, pointer: "/reactions/0/reads",
		message: "duplicate read 'spec'"},
	"illegal-reads-child-status-on-worker.json": {
		reason: "childStatus is only for childrenSettled", rule: manifest.RuleReadsInvalid, pointer: "/reactions/0/reads",
		message: "childStatus is only for childrenSettled reactions"},
	"illegal-reads-child-status-on-deleter.json": {
		reason: "a deleter has no settled children to read", rule: manifest.RuleReadsInvalid, pointer: "/reactions/0/reads"},
	"illegal-reads-child-status-on-composer.json": {
		reason: "a composer runs before its children settle", rule: manifest.RuleReadsInvalid, pointer: "/reactions/0/reads"},
	"illegal-reads-misspelled-key.json": {
		reason: "read is not reads", rule: manifest.RuleUnknownField, pointer: "/reactions/0/read"},
	"illegal-reads-on-second-reaction.json": {
		reason: "a rollup lists childStatus once", rule: manifest.RuleReadsInvalid, pointer: "/reactions/1/reads",
		message: "duplicate read 'childStatus'"},
	"illegal-order-emits-before-reads.json": {
		reason: "emits is checked before reads", rule: manifest.RuleEmitsInvalid, pointer: "/reactions/0/emits"},
	"illegal-order-reads-duplicate-before-unknown.json": {
		reason: "reads' elements are checked in order: the duplicate second before the unknown third",
		rule:   manifest.RuleReadsInvalid, pointer: "/reactions/0/reads",
		message: "duplicate read 'spec'"},
	"illegal-order-reads-child-status-before-duplicate.json": {
		reason: "an element's trigger is checked before the next element's duplicate",
		rule:   manifest.RuleReadsInvalid, pointer: "/reactions/0/reads",
		message: "childStatus is only for childrenSettled reactions"},
	"illegal-order-reads-unknown-before-child-status.json": {
		reason: "an unknown first element is reported before a misplaced childStatus second",
		rule:   manifest.RuleReadsInvalid, pointer: "/reactions/0/reads",
		message: "parts must be among spec, status, labels, finalizers, childStatus"},
	"illegal-order-reads-before-verb.json": {
		reason: "reads is checked before verb", rule: manifest.RuleReadsInvalid, pointer: "/reactions/0/reads"},
	"illegal-order-reads-before-composer-rule.json": {
		reason: "reads is checked before the composer's emits rules", rule: manifest.RuleReadsInvalid, pointer: "/reactions/0/reads"},
	"illegal-verb-without-operation.json": {
		reason: "verb is only for operation reactions", rule: manifest.RuleVerbWithoutOperation, pointer: "/reactions/0/verb"},
	"illegal-verb-number-on-worker.json": {
		reason: "a non-string verb is never empty", rule: manifest.RuleVerbWithoutOperation, pointer: "/reactions/0/verb"},
	"illegal-order-verb-before-finalizer.json": {
		reason: "verb is checked before finalizer", rule: manifest.RuleVerbWithoutOperation, pointer: "/reactions/0/verb"},
	"illegal-operation-without-verb.json": {
		reason: "an operation reaction needs a verb", rule: manifest.RuleOperationRequiresVerb, pointer: "/reactions/0/verb"},
	"illegal-operation-empty-verb.json": {
		reason: "an empty verb is no verb", rule: manifest.RuleOperationRequiresVerb, pointer: "/reactions/0/verb"},
	"illegal-duplicate-verbs.json": {
		reason: "one reaction per verb", rule: manifest.RuleVerbDuplicate, pointer: "/reactions/1/verb"},
	"illegal-finalizer-without-delete.json": {
		reason: "finalizer is only for deleteRequested reactions", rule: manifest.RuleFinalizerWithoutDelete, pointer: "/reactions/0/finalizer"},
	"illegal-delete-without-finalizer.json": {
		reason: "deleteRequested needs a finalizer somewhere", rule: manifest.RuleDeleteRequiresFinalizer, pointer: "/reactions/0/finalizer"},
	"illegal-delete-with-empty-finalizers.json": {
		reason: "empty finalizers on both levels are none", rule: manifest.RuleDeleteRequiresFinalizer, pointer: "/reactions/0/finalizer"},
	"illegal-finalizer-mismatch.json": {
		reason: "a deleter's finalizer differing from finalizer_name would never be removed from the resources seeded with finalizer_name",
		rule:   manifest.RuleFinalizerMismatch, pointer: "/reactions/1/finalizer",
		message: "must equal finalizer_name 'a.example.com/teardown' (or be left out): resources are seeded with finalizer_name"},
	"illegal-delete-finalizer-not-string.json": {
		reason: "a deleter's own finalizer must be a string even when finalizer_name is set", rule: manifest.RuleDeleteRequiresFinalizer, pointer: "/reactions/0/finalizer"},
	"illegal-composer-without-status.json": {
		reason: "a composer must also emit status or conditions", rule: manifest.RuleComposerRequiresStatus, pointer: "/reactions/0/emits"},
	"illegal-order-earlier-reaction-wins.json": {
		reason: "reactions are checked in order: reaction 0's composer rule before reaction 1's name", rule: manifest.RuleComposerRequiresStatus, pointer: "/reactions/0/emits"},
	"illegal-composer-side-effect.json": {
		reason: "a composer may not emit sideEffect", rule: manifest.RuleComposerSideEffect, pointer: "/reactions/0/emits"},
	"illegal-reactor-emits-status.json": {
		reason: "a reactor emits only sideEffect", rule: manifest.RuleReactorEmitsSideEffectOnly, pointer: "/reactions/0/emits"},
	"illegal-reactor-emits-side-effect-and-more.json": {
		reason: "a reactor emits sideEffect and nothing else", rule: manifest.RuleReactorEmitsSideEffectOnly, pointer: "/reactions/0/emits"},
	"illegal-order-in-loop-before-multiples.json": {
		reason: "per-reaction rules win over the count rules", rule: manifest.RuleReactorEmitsSideEffectOnly, pointer: "/reactions/2/emits"},
	"illegal-multiple-composers.json": {
		reason: "at most one composer", rule: manifest.RuleMultipleComposers, pointer: "/reactions"},
	"illegal-order-composers-before-reactors.json": {
		reason: "multiple composers is reported before multiple reactors", rule: manifest.RuleMultipleComposers, pointer: "/reactions"},
	"illegal-multiple-rollups.json": {
		reason: "at most one rollup", rule: manifest.RuleMultipleRollups, pointer: "/reactions"},
	"illegal-multiple-reactors.json": {
		reason: "at most one reactor reaction", rule: manifest.RuleMultipleReactors, pointer: "/reactions"},
	"illegal-multiple-workers.json": {
		reason: "at most one worker (specChange not emitting children): the broker runs only the first", rule: manifest.RuleMultipleWorkers, pointer: "/reactions"},
	"illegal-multiple-resyncs.json": {
		reason: "at most one resync reaction: the broker runs only the first", rule: manifest.RuleMultipleResyncs, pointer: "/reactions"},
	"illegal-multiple-deleters.json": {
		reason: "at most one deleteRequested reaction: the broker runs only the first", rule: manifest.RuleMultipleDeleters, pointer: "/reactions"},
	"illegal-order-workers-before-deleters.json": {
		reason: "multiple workers is reported before multiple deleters", rule: manifest.RuleMultipleWorkers, pointer: "/reactions"},

	// Not JSON that Postgres stores: the DB fails before the CHECK.
	"malformed-truncated.json": {
		reason: "truncated JSON", rule: manifest.RuleMalformed},
	"malformed-trailing-data.json": {
		reason: "a second value after the document", rule: manifest.RuleMalformed},
	"malformed-empty.json": {
		reason: "an empty file", rule: manifest.RuleMalformed},
	"malformed-single-quotes.json": {
		reason: "JSON strings use double quotes", rule: manifest.RuleMalformed},
	"malformed-nul-escape.json": {
		reason: "\\u0000 is valid JSON that jsonb cannot store", rule: manifest.RuleMalformed},
	"malformed-lone-surrogate.json": {
		reason: "an unpaired surrogate escape is valid for encoding/json, not for Postgres", rule: manifest.RuleMalformed},
	"malformed-invalid-utf8.json": {
		reason: "a Latin-1 byte is not UTF-8", rule: manifest.RuleMalformed},
}

// outcome is what one validator said about a manifest.
type outcome struct {
	Rule, Pointer, Message string
}

var ruleSuffix = regexp.MustCompile(`\[([a-z_]+)\]$`)

// TestCorpus_GoValidatorAgreesWithDBCheck feeds every manifest in the corpus
// to ValidateManifest and to the kind_manifest CHECK (validate_kind_manifest)
// of a real, migrated database, and requires the expected outcome from both:
// both accept, or both reject with the same rule, pointer and message.
func TestCorpus_GoValidatorAgreesWithDBCheck(t *testing.T) {
	t.Parallel()
	entries, err := os.ReadDir(corpusDir)
	require.NoError(t, err)
	var files []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".json") {
			files = append(files, e.Name())
		}
	}
	var listed []string
	for name := range corpus {
		listed = append(listed, name)
	}
	slices.Sort(listed)
	require.Empty(t, cmp.Diff(listed, files), "every corpus file has an expectation and every expectation a file (-listed +files)")
	require.GreaterOrEqual(t, len(files), 30)

	pool := pgtest.Pool(t)
	for _, name := range files {
		tc := corpus[name]
		t.Run(strings.TrimSuffix(name, ".json"), func(t *testing.T) {
			t.Parallel()
			raw, err := os.ReadFile(filepath.Join(corpusDir, name))
			require.NoError(t, err)

			prefix, _, _ := strings.Cut(name, "-")
			switch tc.rule {
			case "":
				require.Equal(t, "legal", prefix, "%s: a legal case is named legal-*", tc.reason)
			case manifest.RuleMalformed:
				require.Equal(t, "malformed", prefix, "%s: a malformed case is named malformed-*", tc.reason)
			default:
				require.Equal(t, "illegal", prefix, "%s: an illegal case is named illegal-*", tc.reason)
			}

			goGot := goOutcome(t, manifest.ValidateManifest(raw))
			want := outcome{Rule: tc.rule, Pointer: tc.pointer, Message: goGot.Message}
			if tc.message != "" {
				want.Message = (&manifest.ValidationError{Pointer: tc.pointer, Message: tc.message, Rule: tc.rule}).Error()
			}
			if diff := cmp.Diff(want, goGot); diff != "" {
				t.Errorf("%s\nValidateManifest: -want +got:\n%s", tc.reason, diff)
			}

			dbGot, dbConfig := dbOutcome(t, pool, raw)
			if tc.rule == manifest.RuleMalformed {
				goGot.Pointer, goGot.Message = "", "" // the DB fails in the jsonb parser, with its own words
			}
			if diff := cmp.Diff(goGot, dbGot); diff != "" {
				t.Errorf("%s\nGo and DB disagree: -ValidateManifest +validate_kind_manifest:\n%s", tc.reason, diff)
			}

			wantParse := tc.rule
			if tc.parseRule != "" {
				wantParse = tc.parseRule
			}
			m, err := manifest.Parse(raw)
			if diff := cmp.Diff(wantParse, goOutcome(t, err).Rule); diff != "" {
				t.Errorf("%s\nParse rule: -want +got:\n%s", tc.reason, diff)
			}
			if err == nil {
				require.NotEmpty(t, m.Kind)
				require.NotEmpty(t, m.Version, "Parse defaults the version")
				// The DB's kind_config projection of the accepted row agrees
				// with the decoded manifest and its accessors.
				_, hasComposer := m.Composer()
				_, hasRollup := m.Rollup()
				goConfig := &kindConfig{
					MaxInflight: m.MaxInflight, TaskDeadlineSecs: m.TaskDeadlineSecs,
					ResyncIntervalSecs: m.ResyncIntervalSecs, ResyncRecomposes: m.ResyncRecomposes,
					OrphanGraceSecs: m.OrphanGraceSecs, Finalizer: m.Finalizer(),
					HasComposer: hasComposer, HasRollup: hasRollup, IsReactor: m.IsReactor(),
				}
				if diff := cmp.Diff(goConfig, dbConfig); diff != "" {
					t.Errorf("%s\nkind_config: -Parse +DB:\n%s", tc.reason, diff)
				}
				if tc.reading != nil {
					got := make([]manifest.ReadMask, len(m.Reactions))
					for i, r := range m.Reactions {
						got[i] = r.Reading()
					}
					if diff := cmp.Diff(tc.reading, got); diff != "" {
						t.Errorf("%s\nReading: -want +got:\n%s", tc.reason, diff)
					}
				}
			}
		})
	}
}

// goOutcome reads a *ValidationError; nil is acceptance.
func goOutcome(t *testing.T, err error) outcome {
	t.Helper()
	if err == nil {
		return outcome{}
	}
	var ve *manifest.ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, ve.Error(), err.Error(), "the error is the bare ValidationError")
	return outcome{Rule: ve.Rule, Pointer: ve.Pointer, Message: err.Error()}
}

// kindConfig is the kind_config row the DB projects from an applied
// manifest.
type kindConfig struct {
	MaxInflight, TaskDeadlineSecs, ResyncIntervalSecs, OrphanGraceSecs int
	ResyncRecomposes                                                   bool
	Finalizer                                                          string
	HasComposer, HasRollup, IsReactor                                  bool
}

// dbOutcome inserts raw into kind_manifest in a rolled-back transaction: a
// check_violation is the lattice's verdict; a data exception (SQLSTATE class
// 22) is jsonb refusing the input, i.e. "malformed". An accepted manifest
// also returns its kind_config projection.
func dbOutcome(t *testing.T, pool *pgxpool.Pool, raw []byte) (outcome, *kindConfig) {
	t.Helper()
	ctx := context.Background()
	kind, version := "unnamed", manifest.DefaultVersion
	// The row's kind must equal manifest->>'kind' (a separate CHECK), so ask
	// jsonb for it; malformed input has none.
	var k, v *string
	if err := pool.QueryRow(ctx, `SELECT $1::jsonb->>'kind', CASE WHEN jsonb_typeof($1::jsonb->'version') = 'string' THEN $1::jsonb->>'version' END`, raw).Scan(&k, &v); err == nil {
		if k != nil {
			kind = *k
		}
		if v != nil {
			version = *v
		}
	}

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `INSERT INTO kind_manifest (kind, version, manifest) VALUES ($1,$2,$3)`, kind, version, raw)
	if err == nil {
		var c kindConfig
		require.NoError(t, tx.QueryRow(ctx, `
			SELECT max_inflight, task_deadline_secs, resync_interval_secs, orphan_grace_secs, resync_recomposes,
			       coalesce(finalizer_name, ''), has_composer, has_rollup, is_reactor
			  FROM kind_config WHERE kind = $1 AND version = $2`, kind, version).Scan(
			&c.MaxInflight, &c.TaskDeadlineSecs, &c.ResyncIntervalSecs, &c.OrphanGraceSecs, &c.ResyncRecomposes,
			&c.Finalizer, &c.HasComposer, &c.HasRollup, &c.IsReactor))
		return outcome{}, &c
	}
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	switch {
	case pgErr.Code == "23514" && pgErr.ConstraintName == "kind_manifest_legal":
		m := ruleSuffix.FindStringSubmatch(pgErr.Message)
		require.NotNil(t, m, "a lattice violation ends in [rule]: %q", pgErr.Message)
		ptr, _, _ := strings.Cut(strings.TrimPrefix(pgErr.Message, "manifest "), ": ")
		return outcome{Rule: m[1], Pointer: ptr, Message: pgErr.Message}, nil
	case strings.HasPrefix(pgErr.Code, "22"):
		return outcome{Rule: manifest.RuleMalformed}, nil
	}
	t.Fatalf("unexpected DB error: %v", err)
	return outcome{}, nil
}
