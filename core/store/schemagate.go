package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/core/manifest"
)

// MaxBrokenListed bounds the resources a BreakingChangeError names (its
// Count is the full number).
const MaxBrokenListed = 20

// BreakingChangeError refuses a kind manifest change that would break what
// is stored: a re-applied spec_schema that rejects stored resources or drops
// a required field they carry, a config_schema that rejects stored
// providerconfigs of the kind, or the removal of a kind version that still
// has resources (or, for its last version, providerconfigs or reactor
// bindings naming it). errors.Is(err, ErrConflict). Resources names at most
// MaxBrokenListed of them, by name; Count is how many there are.
type BreakingChangeError struct {
	Kind, Version string
	// Op is what was refused: "apply" (a breaking spec_schema), "config" (a
	// config_schema that rejects stored providerconfigs: Others names them,
	// ConfigCount counts them), "delete", or "reactor" (a version with
	// resources re-applied as reactor-only).
	Op string
	// Count is how many stored resources it would break (or strand).
	Count int
	// Resources names the first MaxBrokenListed, by name.
	Resources []string
	// Fields names what breaks: "spec/cidr [required]", "spec/ipv4 [dropped]".
	Fields []string
	// Others names what else a delete would strand, or the providerconfigs a
	// config_schema breaks ("providerconfig vpc/default").
	Others []string
	// ConfigCount is how many providerconfigs a config_schema breaks.
	ConfigCount int
}

func (e *BreakingChangeError) Error() string {
	var b strings.Builder
	kv := e.Kind + "/" + e.Version
	switch e.Op {
	case "delete":
		fmt.Fprintf(&b, "kind %s still has %d resource(s)", kv, e.Count)
	case "reactor":
		fmt.Fprintf(&b, "kind %s would become reactor-only but still has %d resource(s)", kv, e.Count)
	case "config":
		fmt.Fprintf(&b, "the config_schema of kind %s breaks %d stored providerconfig(s): %s", kv, e.ConfigCount,
			strings.Join(e.Others, ", "))
		if e.ConfigCount > len(e.Others) {
			fmt.Fprintf(&b, " and %d more", e.ConfigCount-len(e.Others))
		}
		if len(e.Fields) > 0 {
			b.WriteString("; fields: " + strings.Join(e.Fields, ", "))
		}
		b.WriteString(" (a providerconfig serves every version of its kind: change them to satisfy it first, " +
			"or apply with acceptBreaking to accept it)")
		return b.String()
	default:
		fmt.Fprintf(&b, "the new spec_schema of kind %s breaks %d stored resource(s)", kv, e.Count)
	}
	if len(e.Resources) > 0 {
		b.WriteString(": " + strings.Join(e.Resources, ", "))
		if e.Count > len(e.Resources) {
			fmt.Fprintf(&b, " and %d more", e.Count-len(e.Resources))
		}
	}
	if len(e.Fields) > 0 {
		b.WriteString("; fields: " + strings.Join(e.Fields, ", "))
	}
	if len(e.Others) > 0 {
		if e.Count == 0 {
			b.Reset()
			fmt.Fprintf(&b, "kind %s is the kind's last version", kv)
		}
		b.WriteString("; still named by " + strings.Join(e.Others, ", "))
	}
	switch e.Op {
	case "delete":
		b.WriteString(" (migrate them to another version by applying them at it, or delete them, first)")
	case "reactor":
		b.WriteString(" (a reactor kind reconciles nothing, so they would sit unreconciled with their queued tasks: delete them, or migrate them to another version, first)")
	default:
		b.WriteString(" (publish the change as a new version, or re-apply with acceptBreaking to accept it)")
	}
	return b.String()
}

// Is makes a BreakingChangeError an ErrConflict.
func (e *BreakingChangeError) Is(target error) bool { return target == ErrConflict }

// checkSchemaStable is the schema-stability gate of a manifest re-apply:
// every stored resource of (kind, version) is validated against the new
// spec_schema, and the old schema's required fields the new one drops are
// looked for in their specs. A violation counts only when the old schema
// does not raise it too: a resource an accepted breaking change left
// invalid is not broken again by a later compatible change, and one the
// change breaks further is named for what it adds. The caller holds the manifest row FOR UPDATE,
// and both writers of resources take that row's key-share lock — resource
// applies (kindVersions) and composes writing children (pipeline loadKinds,
// before it validates them) — so no resource is written against the old
// schema while the scan runs, and one written before it started is
// committed (and scanned) first. The scan streams the kind's rows once, in
// name order.
func checkSchemaStable(ctx context.Context, tx pgx.Tx, kv manifest.KindVersion, oldSpec, newSpec json.RawMessage) error {
	schema, err := manifest.CompileSchema("/spec_schema", newSpec)
	if err != nil {
		return invalid("manifest/spec_schema", "schema_invalid", "%v", err)
	}
	// the old schema compiled as stored; one that no longer compiles judges
	// nothing (every violation of the new one counts)
	old, err := manifest.CompileSchema("/spec_schema", oldSpec)
	if err != nil {
		old = nil
	}
	dropped := manifest.DroppedRequired(oldSpec, newSpec)
	rows, err := tx.Query(ctx, `SELECT name, spec FROM resources WHERE kind = $1 AND version = $2 ORDER BY name`,
		kv.Kind, kv.Version)
	if err != nil {
		return mapErr(err, "kind "+kv.String()+": stored resources")
	}
	defer rows.Close()
	brk := &BreakingChangeError{Kind: kv.Kind, Version: kv.Version, Op: "apply"}
	fields := map[string]bool{}
	addField := func(f string) {
		if !fields[f] && len(brk.Fields) < MaxBrokenListed {
			fields[f] = true
			brk.Fields = append(brk.Fields, f)
		}
	}
	for rows.Next() {
		var (
			name string
			spec json.RawMessage
		)
		if err := rows.Scan(&name, &spec); err != nil {
			return mapErr(err, "kind "+kv.String()+": stored resources")
		}
		broken := false
		if err := schema.Validate(spec); err != nil {
			added, err := newViolations(err, old.Validate(spec))
			if err != nil {
				return fmt.Errorf("kind %s: validate stored resource %s: %w", kv, name, err)
			}
			for _, f := range added {
				addField(f)
				broken = true
			}
		}
		if len(dropped) > 0 {
			var top map[string]json.RawMessage
			if json.Unmarshal(spec, &top) == nil {
				for _, f := range dropped {
					if _, ok := top[f]; ok {
						addField("spec/" + f + " [dropped]")
						broken = true
					}
				}
			}
		}
		if broken {
			brk.Count++
			if len(brk.Resources) < MaxBrokenListed {
				brk.Resources = append(brk.Resources, name)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return mapErr(err, "kind "+kv.String()+": stored resources")
	}
	if brk.Count > 0 {
		return brk
	}
	return nil
}

// newViolations lists the violations of newErr (a validation against the
// new schema) that oldErr (the same document against the old one; nil when
// it passed) does not raise, as "spec<pointer> [<rule>]".
func newViolations(newErr, oldErr error) ([]string, error) {
	var se *manifest.SchemaError
	if !errors.As(newErr, &se) {
		return nil, newErr
	}
	had := map[string]bool{}
	var ose *manifest.SchemaError
	if errors.As(oldErr, &ose) {
		for _, v := range ose.Violations {
			had[fmt.Sprintf("spec%s [%s]", v.Pointer, v.Rule)] = true
		}
	}
	var out []string
	for _, v := range se.Violations {
		if f := fmt.Sprintf("spec%s [%s]", v.Pointer, v.Rule); !had[f] {
			out = append(out, f)
		}
	}
	return out, nil
}

// gateReactorSwitch refuses re-applying a version that still has resources
// as a reactor-only kind: a reactor kind owns nothing in the graph and
// reconciles nothing, so its stored resources and their queued tasks would
// sit untouched for ever. There is no override: nothing could carry them.
func gateReactorSwitch(ctx context.Context, tx pgx.Tx, kv manifest.KindVersion, reactor bool) error {
	if !reactor {
		return nil
	}
	var was bool
	err := tx.QueryRow(ctx, `SELECT is_reactor FROM kind_manifest WHERE kind = $1 AND version = $2 FOR UPDATE`,
		kv.Kind, kv.Version).Scan(&was)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && was) {
		return nil
	}
	if err != nil {
		return mapErr(err, "kind "+kv.String())
	}
	brk, err := strandedBy(ctx, tx, kv, false)
	if err != nil || brk == nil {
		return err
	}
	brk.Op = "reactor"
	return brk
}

// gateManifest locks the applied (kind, version) row, if any, and runs the
// stability check when the spec_schema changes.
func gateManifest(ctx context.Context, tx pgx.Tx, kv manifest.KindVersion, newSpec json.RawMessage) error {
	if len(newSpec) == 0 {
		newSpec = json.RawMessage("null")
	}
	var (
		oldSpec []byte
		same    bool
	)
	err := tx.QueryRow(ctx, `
		SELECT manifest->'spec_schema', coalesce(manifest->'spec_schema', 'null'::jsonb) = $3::jsonb
		  FROM kind_manifest WHERE kind = $1 AND version = $2 FOR UPDATE`,
		kv.Kind, kv.Version, string(newSpec)).Scan(&oldSpec, &same)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && same) {
		return nil
	}
	if err != nil {
		return mapErr(err, "kind "+kv.String())
	}
	return checkSchemaStable(ctx, tx, kv, oldSpec, newSpec)
}

// gateConfigSchema is the config half of the stability gate: a
// providerconfig serves every version of its kind, and its writes are
// checked against each version's config_schema (validateConfigSpec), so an
// apply that creates a version, or changes a version's config_schema, must
// accept every stored providerconfig of the kind. A re-applied version's
// row is held FOR UPDATE while it scans (a providerconfig write takes the
// key-share lock of every version's row before it validates), so no config
// is written against the schema it replaces; a config written while a new
// version is being created validates against the versions it saw. A kind
// holds a handful of configs; the scan reads them all, in name order.
func gateConfigSchema(ctx context.Context, tx pgx.Tx, kv manifest.KindVersion, newConfig json.RawMessage) error {
	if len(newConfig) == 0 {
		newConfig = json.RawMessage("null")
	}
	var (
		same      bool
		oldConfig []byte
	)
	err := tx.QueryRow(ctx, `
		SELECT coalesce(manifest->'config_schema', 'null'::jsonb) = $3::jsonb, manifest->'config_schema'
		  FROM kind_manifest WHERE kind = $1 AND version = $2 FOR UPDATE`,
		kv.Kind, kv.Version, string(newConfig)).Scan(&same, &oldConfig)
	switch {
	case errors.Is(err, pgx.ErrNoRows): // a new version
	case err != nil:
		return mapErr(err, "kind "+kv.String())
	case same:
		return nil
	}
	schema, err := manifest.CompileSchema("/config_schema", newConfig)
	if err != nil {
		return invalid("manifest/config_schema", "schema_invalid", "%v", err)
	}
	// the version's config_schema as stored (none for a new version): a
	// violation it raises already is not this change's
	old, err := manifest.CompileSchema("/config_schema", oldConfig)
	if err != nil {
		old = nil
	}
	rows, err := tx.Query(ctx, `SELECT name, spec FROM providerconfigs WHERE kind = $1 ORDER BY name`, kv.Kind)
	if err != nil {
		return mapErr(err, "kind "+kv.String()+": providerconfigs")
	}
	defer rows.Close()
	brk := &BreakingChangeError{Kind: kv.Kind, Version: kv.Version, Op: "config"}
	for rows.Next() {
		var (
			name string
			spec json.RawMessage
		)
		if err := rows.Scan(&name, &spec); err != nil {
			return mapErr(err, "kind "+kv.String()+": providerconfigs")
		}
		err := schema.Validate(spec)
		if err == nil {
			continue
		}
		added, err := newViolations(err, old.Validate(spec))
		if err != nil {
			return fmt.Errorf("kind %s: validate providerconfig %s: %w", kv, name, err)
		}
		if len(added) == 0 {
			continue
		}
		for _, f := range added {
			if !slices.Contains(brk.Fields, f) && len(brk.Fields) < MaxBrokenListed {
				brk.Fields = append(brk.Fields, f)
			}
		}
		brk.ConfigCount++
		if len(brk.Others) < MaxBrokenListed {
			brk.Others = append(brk.Others, "providerconfig "+kv.Kind+"/"+name)
		}
	}
	if err := rows.Err(); err != nil {
		return mapErr(err, "kind "+kv.String()+": providerconfigs")
	}
	if brk.ConfigCount > 0 {
		return brk
	}
	return nil
}

// DeleteManifest removes one applied kind version and its live policy
// (kind_config). It never strands what depends on it: a version that still
// has resources is refused with a *BreakingChangeError naming them (at most
// MaxBrokenListed, and the count), and so is the kind's last version while
// providerconfigs of the kind or reactor bindings naming it remain. false
// when the version is not applied.
func (s *Store) DeleteManifest(ctx context.Context, kind, version string) (bool, error) {
	if kind == "" || version == "" {
		return false, invalid("version", "version_required", "name both the kind and the version to delete")
	}
	kv := manifest.KindVersion{Kind: kind, Version: version}
	var deleted bool
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var (
			nVersions int
			applied   bool
		)
		err := tx.QueryRow(ctx, `
			SELECT count(*), coalesce(bool_or(version = $2), false)
			  FROM (SELECT version FROM kind_manifest WHERE kind = $1 FOR UPDATE) m`, kind, version).Scan(&nVersions, &applied)
		if err != nil {
			return mapErr(err, "kind "+kv.String())
		}
		if !applied {
			return nil
		}
		brk, err := strandedBy(ctx, tx, kv, nVersions == 1)
		if err != nil {
			return err
		}
		if brk != nil {
			return brk
		}
		// The version's last generation is kept: applied again, it continues
		// from there (00018_manifest_generations), so no process's cache of
		// this document at a generation can be taken for the next one's.
		tag, err := tx.Exec(ctx, `
WITH gone AS (DELETE FROM kind_manifest WHERE kind = $1 AND version = $2 RETURNING kind, version, manifest_gen)
INSERT INTO kind_manifest_generations AS g (kind, version, last_gen)
SELECT kind, version, manifest_gen FROM gone
    ON CONFLICT (kind, version) DO UPDATE SET last_gen = greatest(g.last_gen, EXCLUDED.last_gen)`, kind, version)
		if err != nil {
			return mapErr(err, "kind "+kv.String())
		}
		deleted = tag.RowsAffected() == 1
		if _, err := tx.Exec(ctx, `DELETE FROM kind_config WHERE kind = $1 AND version = $2`, kind, version); err != nil {
			return mapErr(err, "kind "+kv.String()+": policy")
		}
		return nil
	})
	return deleted, err
}

// strandedBy names what deleting kv would strand; nil when nothing.
func strandedBy(ctx context.Context, tx pgx.Tx, kv manifest.KindVersion, last bool) (*BreakingChangeError, error) {
	brk := &BreakingChangeError{Kind: kv.Kind, Version: kv.Version, Op: "delete"}
	err := tx.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM resources WHERE kind = $1 AND version = $2),
		       coalesce((SELECT array_agg(name ORDER BY name) FROM (
		                   SELECT name FROM resources WHERE kind = $1 AND version = $2 ORDER BY name LIMIT $3) n), '{}')`,
		kv.Kind, kv.Version, MaxBrokenListed).Scan(&brk.Count, &brk.Resources)
	if err != nil {
		return nil, mapErr(err, "kind "+kv.String()+": resources")
	}
	if last {
		err := tx.QueryRow(ctx, `
			SELECT coalesce(array_agg(x ORDER BY x), '{}') FROM (
			    (SELECT 'providerconfig ' || kind || '/' || name AS x FROM providerconfigs WHERE kind = $1
			      ORDER BY name LIMIT $2)
			    UNION ALL
			    (SELECT 'reactor binding ' || name FROM reactor_bindings WHERE reactor = $1 OR watch_kind = $1
			      ORDER BY name LIMIT $2)) o`, kv.Kind, MaxBrokenListed).Scan(&brk.Others)
		if err != nil {
			return nil, mapErr(err, "kind "+kv.String()+": dependents")
		}
	}
	if brk.Count == 0 && len(brk.Others) == 0 {
		return nil, nil
	}
	return brk, nil
}
