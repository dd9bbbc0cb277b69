package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The legality lattice's rule codes: the "[rule]" suffix of a
// *ValidationError, identical to those validate_kind_manifest raises.
const (
	RuleMalformed                  = "malformed" // Go-only: not JSON Postgres would store
	RuleUnknownField               = "unknown_field"
	RuleKindInvalid                = "kind_invalid"
	RuleVersionInvalid             = "version_invalid"
	RuleDescriptionInvalid         = "description_invalid"
	RuleSchemaInvalid              = "schema_invalid"
	RulePolicyInvalid              = "policy_invalid"
	RuleFinalizerNameInvalid       = "finalizer_name_invalid"
	RuleReactionsMissing           = "reactions_missing"
	RuleReactionInvalid            = "reaction_invalid"
	RuleReactionNameInvalid        = "reaction_name_invalid"
	RuleReactionNameDuplicate      = "reaction_name_duplicate"
	RuleTriggerUnknown             = "trigger_unknown"
	RuleEmitsInvalid               = "emits_invalid"
	RuleReadsInvalid               = "reads_invalid"
	RuleVerbWithoutOperation       = "verb_without_operation"
	RuleOperationRequiresVerb      = "operation_requires_verb"
	RuleVerbDuplicate              = "verb_duplicate"
	RuleFinalizerWithoutDelete     = "finalizer_without_delete"
	RuleDeleteRequiresFinalizer    = "delete_requires_finalizer"
	RuleComposerRequiresStatus     = "composer_requires_status"
	RuleComposerSideEffect         = "composer_side_effect"
	RuleReactorEmitsSideEffectOnly = "reactor_emits_side_effect_only"
	RuleMultipleComposers          = "multiple_composers"
	RuleMultipleRollups            = "multiple_rollups"
	RuleMultipleReactors           = "multiple_reactors"
	RuleFinalizerMismatch          = "finalizer_mismatch"
	RuleMultipleWorkers            = "multiple_workers"
	RuleMultipleResyncs            = "multiple_resyncs"
	RuleMultipleDeleters           = "multiple_deleters"
)

// ValidationError is a manifest that breaks the legality lattice (or, from
// Parse, carries a schema that does not compile).
type ValidationError struct {
	// Pointer is the JSON pointer of the offending value ("" = the document).
	Pointer string
	Message string
	// Rule is the lattice rule code, e.g. "composer_requires_status".
	Rule string
}

// Error renders the violation exactly as the DB CHECK raises it.
func (e *ValidationError) Error() string {
	return fmt.Sprintf("manifest %s: %s [%s]", e.Pointer, e.Message, e.Rule)
}

func violation(pointer, message, rule string) *ValidationError {
	return &ValidationError{Pointer: pointer, Message: message, Rule: rule}
}

var (
	kindRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
	// versionRE: v1, v2beta1, v1alpha2.
	versionRE = regexp.MustCompile(`^v[0-9]+((alpha|beta)[0-9]+)?$`)
	// nameRE matches reaction names and operation verbs.
	nameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,62}$`)
)

var (
	topLevelKeys = []string{"kind", "version", "description", "spec_schema", "status_schema", "config_schema",
		"reactions", "finalizer_name", "max_inflight", "task_deadline_secs",
		"resync_interval_secs", "resync_recomposes", "orphan_grace_secs", "max_transient_attempts"}
	reactionKeys = []string{"name", "trigger", "emits", "verb", "finalizer", "reads"}
	// schemaKeys and policyIntKeys are in the order the DB checks them.
	schemaKeys    = []string{"config_schema", "spec_schema", "status_schema"}
	policyIntKeys = []string{"max_inflight", "max_transient_attempts", "orphan_grace_secs", "resync_interval_secs",
		"task_deadline_secs"}
)

// maxPolicyInt is the largest policy value (kind_config's columns are int4).
const maxPolicyInt = 2147483647

// ValidateManifest is the Go half of the legality lattice; the DB half is
// validate_kind_manifest() in db/functions/validate_kind_manifest.sql, the CHECK on
// kind_manifest.manifest. It works on the raw JSON document so it checks
// exactly what the DB checks, in the same order, with the same rule codes,
// pointers and messages: the first violation wins. The violation is a
// *ValidationError; input Postgres would not store as jsonb (not JSON, not
// UTF-8, a \u0000 escape, an unpaired surrogate) is rule "malformed".
//
// It does not compile the JSON Schemas (the DB cannot); Parse does.
func ValidateManifest(raw []byte) error {
	doc, err := decodeDocument(raw)
	if err != nil {
		return err
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return violation("", "must be a JSON object", RuleUnknownField)
	}
	if err := validateTopLevel(m); err != nil {
		return err
	}
	finalizerName, _ := m["finalizer_name"].(string)
	var l lattice
	for i, r := range m["reactions"].([]any) { // an array: validateTopLevel checked
		if err := l.reaction("/reactions/"+strconv.Itoa(i), r, finalizerName); err != nil {
			return err
		}
	}
	return l.counts()
}

// validateTopLevel checks the manifest's own fields, up to reactions_missing.
func validateTopLevel(m map[string]any) error {
	for _, k := range sortedKeys(m) {
		if !slices.Contains(topLevelKeys, k) {
			return violation("/"+escapePointerToken(k), "unknown field", RuleUnknownField)
		}
	}
	if s, ok := m["kind"].(string); !ok || !kindRE.MatchString(s) {
		return violation("/kind", "must be a lowercase name matching ^[a-z][a-z0-9-]{0,62}$", RuleKindInvalid)
	}
	if v, ok := m["version"]; ok {
		if s, isStr := v.(string); !isStr || !versionRE.MatchString(s) {
			return violation("/version", "must look like v1, v2beta1 or v1alpha2", RuleVersionInvalid)
		}
	}
	if v, ok := m["description"]; ok && !isStringOrNull(v) {
		return violation("/description", "must be a string", RuleDescriptionInvalid)
	}
	for _, k := range schemaKeys {
		if v, ok := m[k]; ok {
			switch v.(type) {
			case map[string]any, bool, nil:
			default:
				return violation("/"+k, "must be a JSON Schema object", RuleSchemaInvalid)
			}
		}
	}
	for _, k := range policyIntKeys {
		if v, ok := m[k]; ok {
			if _, ok := policyInt(v); !ok {
				return violation("/"+k, "must be a non-negative integer", RulePolicyInvalid)
			}
		}
	}
	if v, ok := m["resync_recomposes"]; ok {
		if _, isBool := v.(bool); !isBool {
			return violation("/resync_recomposes", "must be a boolean", RulePolicyInvalid)
		}
	}
	if v, ok := m["finalizer_name"]; ok && !isStringOrNull(v) {
		return violation("/finalizer_name", "must be a string", RuleFinalizerNameInvalid)
	}
	if reactions, ok := m["reactions"].([]any); !ok || len(reactions) == 0 {
		return violation("/reactions", "must declare at least one reaction", RuleReactionsMissing)
	}
	return nil
}

// lattice accumulates what the per-reaction checks have seen so far.
type lattice struct {
	names, verbs                 []string
	composers, rollups, reactors int
	// workers (specChange not emitting children), resyncs and deleters:
	// the broker runs the first of each, so a second would never run.
	workers, resyncs, deleters int
}

// reaction checks one reaction at ptr, in the DB's order: reaction_invalid,
// unknown_field, reaction_name_invalid, reaction_name_duplicate,
// trigger_unknown, emits_invalid, reads_invalid, then verbAndFinalizer's
// rules and role's.
func (l *lattice) reaction(ptr string, rv any, finalizerName string) error {
	r, ok := rv.(map[string]any)
	if !ok {
		return violation(ptr, "must be an object", RuleReactionInvalid)
	}
	for _, k := range sortedKeys(r) {
		if !slices.Contains(reactionKeys, k) {
			return violation(ptr+"/"+escapePointerToken(k), "unknown field", RuleUnknownField)
		}
	}
	name, ok := r["name"].(string)
	if !ok || !nameRE.MatchString(name) {
		return violation(ptr+"/name", "must be a name matching ^[A-Za-z][A-Za-z0-9_-]{0,62}$", RuleReactionNameInvalid)
	}
	if slices.Contains(l.names, name) {
		return violation(ptr+"/name", fmt.Sprintf("duplicate reaction name '%s'", name), RuleReactionNameDuplicate)
	}
	l.names = append(l.names, name)
	ts, _ := r["trigger"].(string)
	trigger := Trigger(ts)
	if !trigger.Valid() {
		return violation(ptr+"/trigger",
			"must be one of specChange, childrenSettled, deleteRequested, operation, reactor, resync", RuleTriggerUnknown)
	}
	emits, err := parseEmits(ptr+"/emits", r["emits"])
	if err != nil {
		return err
	}
	if v, ok := r["reads"]; ok {
		if err := checkReads(ptr+"/reads", v, trigger); err != nil {
			return err
		}
	}
	if err := l.verbAndFinalizer(ptr, r, trigger, finalizerName); err != nil {
		return err
	}
	return l.role(ptr, trigger, emits)
}

// parseEmits reads a non-empty array of distinct outcome names.
func parseEmits(ptr string, v any) (OutcomeMask, error) {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return 0, violation(ptr, "must list at least one outcome", RuleEmitsInvalid)
	}
	var emits OutcomeMask
	for _, e := range list {
		s, _ := e.(string)
		bit, ok := ParseOutcome(s)
		if !ok {
			return 0, violation(ptr,
				"outcomes must be among children, edges, configs, status, conditions, finalizer, operationOutput, sideEffect",
				RuleEmitsInvalid)
		}
		if emits.Has(bit) {
			return 0, violation(ptr, fmt.Sprintf("duplicate outcome '%s'", s), RuleEmitsInvalid)
		}
		emits |= OutcomeMask(bit)
	}
	return emits, nil
}

// checkReads checks a present reads: an array of distinct part names,
// childStatus only on a childrenSettled reaction. Each element is checked in
// turn: known, then not a duplicate, then its trigger.
func checkReads(ptr string, v any, trigger Trigger) error {
	list, ok := v.([]any)
	if !ok {
		return violation(ptr, "must be an array of parts among spec, status, labels, finalizers, childStatus",
			RuleReadsInvalid)
	}
	var reads ReadMask
	for _, e := range list {
		s, _ := e.(string)
		bit, ok := ParseRead(s)
		if !ok {
			return violation(ptr, "parts must be among spec, status, labels, finalizers, childStatus", RuleReadsInvalid)
		}
		if reads.Has(bit) {
			return violation(ptr, fmt.Sprintf("duplicate read '%s'", s), RuleReadsInvalid)
		}
		if bit == ReadChildStatus && trigger != TriggerChildrenSettled {
			return violation(ptr, "childStatus is only for childrenSettled reactions", RuleReadsInvalid)
		}
		reads |= ReadMask(bit)
	}
	return nil
}

// verbAndFinalizer checks that verb belongs to operations and finalizer to
// deleteRequested, that each of those has its own, and that a deleter's own
// finalizer is finalizer_name when both are set: resources are seeded with
// finalizer_name and the delete removes the deleter's, so two names would
// leave every deleted resource waiting forever.
func (l *lattice) verbAndFinalizer(ptr string, r map[string]any, trigger Trigger, finalizerName string) error {
	if v, ok := r["verb"]; ok && nonEmpty(v) && trigger != TriggerOperation {
		return violation(ptr+"/verb", "verb is only for operation reactions", RuleVerbWithoutOperation)
	}
	if trigger == TriggerOperation {
		verb, ok := r["verb"].(string)
		if !ok || !nameRE.MatchString(verb) {
			return violation(ptr+"/verb", "operation reaction requires a verb", RuleOperationRequiresVerb)
		}
		if slices.Contains(l.verbs, verb) {
			return violation(ptr+"/verb", fmt.Sprintf("duplicate operation verb '%s'", verb), RuleVerbDuplicate)
		}
		l.verbs = append(l.verbs, verb)
	}
	if v, ok := r["finalizer"]; ok && nonEmpty(v) && trigger != TriggerDeleteRequested {
		return violation(ptr+"/finalizer", "finalizer is only for deleteRequested reactions", RuleFinalizerWithoutDelete)
	}
	if trigger == TriggerDeleteRequested {
		if v, ok := r["finalizer"]; ok && !isStringOrNull(v) {
			return violation(ptr+"/finalizer", "must be a string", RuleDeleteRequiresFinalizer)
		}
		if f, _ := r["finalizer"].(string); f == "" && finalizerName == "" {
			return violation(ptr+"/finalizer",
				"deleteRequested reaction requires a finalizer (on the reaction or finalizer_name)", RuleDeleteRequiresFinalizer)
		}
		if f, _ := r["finalizer"].(string); f != "" && finalizerName != "" && f != finalizerName {
			return violation(ptr+"/finalizer",
				fmt.Sprintf("must equal finalizer_name '%s' (or be left out): resources are seeded with finalizer_name", finalizerName),
				RuleFinalizerMismatch)
		}
	}
	return nil
}

// role checks the (Trigger, Emits) shape of composers and reactors and
// counts composers, rollups and reactors.
func (l *lattice) role(ptr string, trigger Trigger, emits OutcomeMask) error {
	if trigger == TriggerSpecChange && emits.Has(OutcomeChildren) {
		if !emits.Has(OutcomeStatus) && !emits.Has(OutcomeConditions) {
			return violation(ptr+"/emits", "a composer (specChange emitting children) must also emit status or conditions",
				RuleComposerRequiresStatus)
		}
		if emits.Has(OutcomeSideEffect) {
			return violation(ptr+"/emits", "a composer (specChange emitting children) may not emit sideEffect",
				RuleComposerSideEffect)
		}
		l.composers++
	}
	if trigger == TriggerReactor {
		if emits != Mask(OutcomeSideEffect) {
			return violation(ptr+"/emits", "a reactor reaction must emit sideEffect and nothing else",
				RuleReactorEmitsSideEffectOnly)
		}
		l.reactors++
	}
	if trigger == TriggerChildrenSettled && emits.Has(OutcomeStatus) {
		l.rollups++
	}
	switch {
	case trigger == TriggerSpecChange && !emits.Has(OutcomeChildren):
		l.workers++
	case trigger == TriggerResync:
		l.resyncs++
	case trigger == TriggerDeleteRequested:
		l.deleters++
	}
	return nil
}

// counts checks the at-most-one rules once every reaction passed.
func (l *lattice) counts() error {
	if l.composers > 1 {
		return violation("/reactions", "at most one composer (specChange emitting children) per kind", RuleMultipleComposers)
	}
	if l.rollups > 1 {
		return violation("/reactions", "at most one rollup (childrenSettled emitting status) per kind", RuleMultipleRollups)
	}
	if l.reactors > 1 {
		return violation("/reactions", "at most one reactor reaction per kind", RuleMultipleReactors)
	}
	if l.workers > 1 {
		return violation("/reactions", "at most one worker (specChange not emitting children) per kind", RuleMultipleWorkers)
	}
	if l.resyncs > 1 {
		return violation("/reactions", "at most one resync reaction per kind", RuleMultipleResyncs)
	}
	if l.deleters > 1 {
		return violation("/reactions", "at most one deleteRequested reaction per kind", RuleMultipleDeleters)
	}
	return nil
}

// decodeDocument decodes raw the way Postgres reads jsonb: duplicate keys
// keep the last value, numbers keep their literal. Input jsonb refuses is a
// "malformed" *ValidationError.
func decodeDocument(raw []byte) (any, error) {
	if !utf8.Valid(raw) {
		return nil, violation("", "not valid UTF-8", RuleMalformed)
	}
	if err := checkEscapes(raw); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, violation("", fmt.Sprintf("not JSON: %v", err), RuleMalformed)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, violation("", "not JSON: data after the top-level value", RuleMalformed)
	}
	return doc, nil
}

// checkEscapes rejects the \u escapes Postgres's jsonb input refuses though
// encoding/json accepts them: \u0000 (text cannot hold NUL) and unpaired
// UTF-16 surrogates. Syntax errors are left to the decoder.
func checkEscapes(raw []byte) error {
	inString := false
	pendingHigh := false // the previous escape was a high surrogate
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if !inString {
			if c == '"' {
				inString = true
			}
			continue
		}
		if c != '\\' {
			if pendingHigh {
				return violation("", "not JSON Postgres accepts: unpaired UTF-16 high surrogate", RuleMalformed)
			}
			if c == '"' {
				inString = false
			}
			continue
		}
		if i+1 >= len(raw) {
			return nil
		}
		i++
		if raw[i] != 'u' {
			if pendingHigh {
				return violation("", "not JSON Postgres accepts: unpaired UTF-16 high surrogate", RuleMalformed)
			}
			continue
		}
		if i+4 >= len(raw) {
			return nil
		}
		code, err := strconv.ParseUint(string(raw[i+1:i+5]), 16, 16)
		if err != nil {
			return nil //nolint:nilerr // a syntax error: the decoder reports it
		}
		i += 4
		switch {
		case code == 0:
			return violation("", `not JSON Postgres accepts: \u0000 cannot be stored in text`, RuleMalformed)
		case code >= 0xD800 && code <= 0xDBFF:
			if pendingHigh {
				return violation("", "not JSON Postgres accepts: unpaired UTF-16 high surrogate", RuleMalformed)
			}
			pendingHigh = true
		case code >= 0xDC00 && code <= 0xDFFF:
			if !pendingHigh {
				return violation("", "not JSON Postgres accepts: unpaired UTF-16 low surrogate", RuleMalformed)
			}
			pendingHigh = false
		default:
			if pendingHigh {
				return violation("", "not JSON Postgres accepts: unpaired UTF-16 high surrogate", RuleMalformed)
			}
		}
	}
	return nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys) // byte order, as the DB's ORDER BY key COLLATE "C"
	return keys
}

func isStringOrNull(v any) bool {
	switch v.(type) {
	case string, nil:
		return true
	}
	return false
}

// nonEmpty mirrors the DB's "present, not null and ->> not ”": every
// non-string value has non-empty text.
func nonEmpty(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case string:
		return x != ""
	}
	return true
}

// policyInt reads a policy value: a JSON number that is a whole number in
// [0, 2^31-1]. Like Postgres numeric (and JSON Schema's "integer"), 10.0 and
// 1e2 are whole numbers; 1.5 is not.
func policyInt(v any) (int, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	return wholeNumber(string(n), maxPolicyInt)
}

// wholeNumber decides exactly, without floating point, whether the JSON
// number literal lit is a whole number in [0, limit], and returns it.
func wholeNumber(lit string, limit int) (int, bool) {
	neg := strings.HasPrefix(lit, "-")
	lit = strings.TrimPrefix(lit, "-")
	mant, exp := lit, int64(0)
	if i := strings.IndexAny(lit, "eE"); i >= 0 {
		mant = lit[:i]
		e, err := strconv.ParseInt(lit[i+1:], 10, 64)
		if err != nil { // an exponent past int64: astronomically large or small
			if strings.HasPrefix(lit[i+1:], "-") {
				e = -1 << 62
			} else {
				e = 1 << 62
			}
		}
		exp = e
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(intPart+frac, "0")
	if digits == "" {
		return 0, true // zero, also -0 and 0.0e5
	}
	// value = digits × 10^scale, with scale = exp − len(frac) after moving
	// the trailing zeros of digits into scale.
	scale := exp - int64(len(frac))
	trimmed := strings.TrimRight(digits, "0")
	scale += int64(len(digits) - len(trimmed))
	if scale < 0 {
		return 0, false // a fractional part remains
	}
	if neg {
		return 0, false
	}
	if int64(len(trimmed))+scale > int64(len(strconv.Itoa(limit))) {
		return 0, false
	}
	n, err := strconv.Atoi(trimmed + strings.Repeat("0", int(scale)))
	if err != nil || n > limit {
		return 0, false
	}
	return n, true
}
