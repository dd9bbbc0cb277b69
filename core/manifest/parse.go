package manifest

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// wireManifest decodes a manifest whose policy values may be written as any
// whole JSON number (10, 10.0, 1e1): ValidateManifest and the DB accept them,
// a Go int field would not. The outer fields shadow the embedded ones.
type wireManifest struct {
	KindManifest
	MaxInflight        json.Number `json:"max_inflight"`
	TaskDeadlineSecs   json.Number `json:"task_deadline_secs"`
	ResyncIntervalSecs json.Number `json:"resync_interval_secs"`
	OrphanGraceSecs    json.Number `json:"orphan_grace_secs"`
	// MaxTransientAttempts shadows the embedded pointer field.
	MaxTransientAttempts json.Number `json:"max_transient_attempts"`
}

// Parse validates raw against the legality lattice (ValidateManifest),
// decodes it, defaults Version to DefaultVersion and compiles its three
// schemas, in the order config_schema, spec_schema, status_schema. Every
// rejection is a *ValidationError; a schema that does not compile is rule
// "schema_invalid" at the schema's pointer (e.g. "/spec_schema").
//
// Schema compilation is the one check that is Go-only: the DB CHECK cannot
// compile JSON Schema, so a manifest Parse rejects for schema_invalid may
// still satisfy validate_kind_manifest. Apply manifests through Parse.
// A JSON null schema decodes to a nil RawMessage (untyped).
func Parse(raw []byte) (KindManifest, error) {
	if err := ValidateManifest(raw); err != nil {
		return KindManifest{}, err
	}
	var w wireManifest
	if err := json.Unmarshal(raw, &w); err != nil {
		return KindManifest{}, fmt.Errorf("decode manifest: %w", err)
	}
	m := w.KindManifest
	for _, f := range []struct {
		num json.Number
		dst *int
	}{
		{w.MaxInflight, &m.MaxInflight},
		{w.TaskDeadlineSecs, &m.TaskDeadlineSecs},
		{w.ResyncIntervalSecs, &m.ResyncIntervalSecs},
		{w.OrphanGraceSecs, &m.OrphanGraceSecs},
	} {
		if f.num == "" {
			continue
		}
		n, ok := wholeNumber(string(f.num), maxPolicyInt)
		if !ok { // unreachable after ValidateManifest
			return KindManifest{}, fmt.Errorf("decode manifest: policy value %s is not a non-negative integer", f.num)
		}
		*f.dst = n
	}
	if w.MaxTransientAttempts != "" {
		n, ok := wholeNumber(string(w.MaxTransientAttempts), maxPolicyInt)
		if !ok { // unreachable after ValidateManifest
			return KindManifest{}, fmt.Errorf("decode manifest: policy value %s is not a non-negative integer",
				w.MaxTransientAttempts)
		}
		m.MaxTransientAttempts = &n
	}
	if m.Version == "" {
		m.Version = DefaultVersion
	}
	for _, s := range []struct {
		pointer string
		raw     *json.RawMessage
	}{
		{"/config_schema", &m.ConfigSchema},
		{"/spec_schema", &m.SpecSchema},
		{"/status_schema", &m.StatusSchema},
	} {
		if bytes.Equal(bytes.TrimSpace(*s.raw), []byte("null")) {
			*s.raw = nil
		}
		if _, err := CompileSchema(s.pointer, *s.raw); err != nil {
			return KindManifest{}, err
		}
	}
	return m, nil
}
