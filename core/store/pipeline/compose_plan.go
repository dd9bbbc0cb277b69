package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store/internal/dbx"
	"github.com/converge-run/converge/core/store/internal/schemacache"
)

// composeState is the root and what it owns, read under lock.
type composeState struct {
	root  uuid.UUID
	top   uuid.UUID // the top composition root: coalesce(root.root_id, root.id)
	owned map[childKey]ownedChild
	// deleting: the root is marked for deletion (read under its lock, so a
	// mark committed before the lock was granted is seen).
	deleting bool
}

type childKey struct{ kind, name string }

type ownedChild struct {
	id                    uuid.UUID
	orphaned, quarantined bool
	deleting              bool
}

// composePlan is the validated composition, resolved to ids.
type composePlan struct {
	children []plannedChild
	edges    []plannedEdge
	configs  []Config
	// keep lists every child the composition wants: the prune spares them.
	keep []uuid.UUID
	// ids maps every child name to its id; skip marks children being torn
	// down, which the application leaves alone.
	ids  map[string]uuid.UUID
	skip map[string]bool
}

type plannedChild struct {
	Child
	id      uuid.UUID
	isNew   bool
	readopt bool
	labels  []byte
	spec    json.RawMessage // after bootstrap value flows
}

type plannedEdge struct {
	dep, up uuid.UUID
	flows   []byte
}

// loadComposeState locks the root and the children it owns in id order (the
// order drainers lock in) and reads them.
//
// The ids come first (the owner index probed for the children), and the rows
// are locked by a probe of the primary key with them, which returns them in
// id order. Asked as "id = root OR owner_id = root ORDER BY id", the
// statement could also be served by walking the whole primary key in order,
// each entry checked, with no sort; a resources table whose statistics were
// taken while it was empty (a fleet torn down and analyzed, another applied)
// looks empty however much it holds, and that walk looked cheapest: 15,000
// buffers for a root of 99 children in a 10k fleet
// (TestPlans_HotStatementsKeepTheirPlans, "emptied fleet").
func (s *Store) loadComposeState(ctx context.Context, tx pgx.Tx, root uuid.UUID) (*composeState, error) {
	rows, err := tx.Query(ctx, `
SELECT r.id, r.kind, r.name, coalesce(r.root_id, r.id),
       coalesce(r.frozen_until <> 'infinity', false), coalesce(r.frozen_until = 'infinity', false),
       r.deletion_requested_at IS NOT NULL
  FROM resources r
 WHERE r.id = ANY (ARRAY(SELECT $1::uuid UNION ALL SELECT c.id FROM resources c WHERE c.owner_id = $1))
 ORDER BY r.id
   FOR NO KEY UPDATE`, root)
	if err != nil {
		return nil, wrap(err, "compose %s: lock", root)
	}
	defer rows.Close()
	st := &composeState{root: root, owned: map[childKey]ownedChild{}}
	found := false
	for rows.Next() {
		var id, top uuid.UUID
		var kind, name string
		var orphaned, quarantined, deleting bool
		if err := rows.Scan(&id, &kind, &name, &top, &orphaned, &quarantined, &deleting); err != nil {
			return nil, wrap(err, "compose %s: read owned", root)
		}
		if id == root {
			found, st.top, st.deleting = true, top, deleting
			continue
		}
		st.owned[childKey{kind, name}] = ownedChild{id: id, orphaned: orphaned, quarantined: quarantined, deleting: deleting}
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(err, "compose %s: lock", root)
	}
	if !found {
		return nil, ErrFenced
	}
	return st, nil
}

// kindInfo is what compose needs of a kind version.
type kindInfo struct {
	gen        int64
	reactor    bool
	specSchema json.RawMessage
	cfgSchema  json.RawMessage
}

// planCompose validates c and resolves it against st: ids, upstreams,
// bootstrap value flows and schemas. Nothing is written.
func (s *Store) planCompose(ctx context.Context, tx pgx.Tx, st *composeState, c Composition) (*composePlan, error) {
	plan, err := planChildren(st, c.Children)
	if err != nil {
		return nil, err
	}
	kinds, err := loadKinds(ctx, tx, c)
	if err != nil {
		return nil, err
	}
	if err := checkOwnership(ctx, tx, st.root, c.Configs); err != nil {
		return nil, err
	}
	if err := planEdges(ctx, tx, st, plan, c); err != nil {
		return nil, err
	}
	if err := bootstrapFlows(ctx, tx, plan); err != nil {
		return nil, err
	}
	for _, ch := range plan.children {
		k, ok := kinds[manifest.KindVersion{Kind: ch.Kind, Version: ch.Version}]
		if !ok {
			return nil, composeErr(ch.Name, "unknown_kind", "kind %s/%s has no manifest", ch.Kind, ch.Version)
		}
		if k.reactor {
			return nil, composeErr(ch.Name, "reactor_kind", "kind %s/%s is a reactor: it owns no resources", ch.Kind, ch.Version)
		}
		sc, err := s.schemas.Schema(ch.Kind, ch.Version, schemacache.Spec, k.gen, k.specSchema)
		if err != nil {
			return nil, composeErr(ch.Name, "schema_invalid", "kind %s/%s spec_schema: %v", ch.Kind, ch.Version, err)
		}
		if err := sc.Validate(ch.spec); err != nil {
			return nil, violation(ch.Name, "spec", err)
		}
	}
	if plan.configs, err = s.planConfigs(kinds, c.Configs); err != nil {
		return nil, err
	}
	if err := checkConfigRefs(ctx, tx, st.root, plan); err != nil {
		return nil, err
	}
	return plan, nil
}

// checkConfigRefs holds the children's providerConfigRefs to the API's rule
// for an applied resource's: the ref names a non-default providerconfig of
// the child's kind. The composition's own configs count (they are written
// with the children); a config the root owns that the composition no longer
// emits does not (this compose prunes it). The others are read in one
// statement, key-share locked so that no delete removes one before the
// commit. A dangling ref would be written, and the child then run with its
// kind's default config (the gate snapshots no config for it), silently.
func checkConfigRefs(ctx context.Context, tx pgx.Tx, root uuid.UUID, plan *composePlan) error {
	composed := make(map[childKey]bool, len(plan.configs))
	for _, cfg := range plan.configs {
		composed[childKey{cfg.Kind, cfg.Name}] = cfg.IsDefault
	}
	var kinds, names []string
	child := map[childKey]string{} // the first child naming each ref
	for _, ch := range plan.children {
		if ch.ProviderConfigRef == "" {
			continue
		}
		key := childKey{ch.Kind, ch.ProviderConfigRef}
		if isDefault, ok := composed[key]; ok {
			if isDefault {
				return defaultConfigRef(ch.Name, key)
			}
			continue
		}
		if _, dup := child[key]; !dup {
			child[key] = ch.Name
			kinds, names = append(kinds, key.kind), append(names, key.name)
		}
	}
	if len(kinds) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, `
SELECT p.kind, p.name, p.is_default, p.owner_id IS NOT DISTINCT FROM $3
  FROM unnest($1::text[], $2::text[]) AS k(kind, name)
 CROSS JOIN LATERAL (SELECT p.kind, p.name, p.is_default, p.owner_id FROM providerconfigs p
                      WHERE p.kind = k.kind AND p.name = k.name OFFSET 0) p
 ORDER BY p.kind, p.name
   FOR KEY SHARE OF p`, kinds, names, root)
	if err != nil {
		return wrap(err, "compose %s: read config refs", root)
	}
	defer rows.Close()
	found := make(map[childKey]bool, len(kinds))
	var refusal error
	for rows.Next() {
		var key childKey
		var isDefault, owned bool
		if err := rows.Scan(&key.kind, &key.name, &isDefault, &owned); err != nil {
			return wrap(err, "compose %s: read config refs", root)
		}
		found[key] = true
		switch {
		case refusal != nil:
		case isDefault:
			refusal = defaultConfigRef(child[key], key)
		case owned:
			refusal = &ComposeError{Child: child[key], Axis: "providerConfigRef", Rule: "not_found",
				Message: fmt.Sprintf("providerconfig %s/%s is owned by this root and the composition no longer emits it, so it is pruned; emit it, or drop the ref",
					key.kind, key.name)}
		}
	}
	if err := rows.Err(); err != nil {
		return wrap(err, "compose %s: read config refs", root)
	}
	if refusal != nil {
		return refusal
	}
	for i := range kinds {
		if key := (childKey{kinds[i], names[i]}); !found[key] {
			return &ComposeError{Child: child[key], Axis: "providerConfigRef", Rule: "not_found",
				Message: fmt.Sprintf("kind %s has no providerconfig %q", key.kind, key.name)}
		}
	}
	return nil
}

// defaultConfigRef is the refusal of a ref to its kind's default config.
func defaultConfigRef(child string, key childKey) error {
	return &ComposeError{Child: child, Axis: "providerConfigRef", Rule: "default_config",
		Message: fmt.Sprintf("providerconfig %s/%s is the kind's default: it applies without a ref; a ref names a non-default config",
			key.kind, key.name)}
}

// planChildren checks the children's names and resolves each to the row the
// root owns (kind, name) or a new id.
func planChildren(st *composeState, children []Child) (*composePlan, error) {
	n := len(children)
	plan := &composePlan{ids: make(map[string]uuid.UUID, n), skip: map[string]bool{},
		children: make([]plannedChild, 0, n), keep: make([]uuid.UUID, 0, n)}
	// Children that share a labels map (a composition read from columns
	// shares one per label set) share its encoding.
	var lastLabels map[string]string
	var lastEncoded []byte
	for _, ch := range children {
		if ch.Version == "" {
			ch.Version = manifest.DefaultVersion
		}
		if ch.Kind == "" {
			return nil, composeErr(ch.Name, "kind_missing", "a child needs a kind")
		}
		if !resource.ValidName(ch.Name) {
			return nil, composeErr(ch.Name, "name_invalid",
				"%q "+resource.NameRule, ch.Name)
		}
		if _, dup := plan.ids[ch.Name]; dup {
			return nil, composeErr(ch.Name, "duplicate_child", "two children are named %q", ch.Name)
		}
		if lastEncoded == nil || !sameMap(ch.Labels, lastLabels) {
			// The API's rules for a resource's labels, spec and config
			// reference hold for a composed one too.
			if err := dbx.ValidateLabels("labels", ch.Labels); err != nil {
				return nil, refused(ch.Name, err)
			}
			lastLabels, lastEncoded = ch.Labels, encodeLabels(ch.Labels)
		}
		spec, err := dbx.JSONObject("spec", ch.Spec)
		if err != nil {
			return nil, refused(ch.Name, err)
		}
		if ch.ProviderConfigRef != "" && !resource.ValidName(ch.ProviderConfigRef) {
			return nil, composeErr(ch.Name, "name_invalid",
				"provider config ref %q "+resource.NameRule, ch.ProviderConfigRef)
		}
		pc := plannedChild{Child: ch, labels: lastEncoded, spec: spec}
		o, owned := st.owned[childKey{ch.Kind, ch.Name}]
		if owned {
			pc.id, pc.readopt = o.id, o.orphaned
		} else {
			// Time-ordered, as the API's ids are: a composition's children
			// are inserted together, so their primary-key entries (here, in
			// the phase index, the labels and the edges) land on the right
			// edge of each index instead of a thousand random leaf pages.
			id, err := uuid.NewV7()
			if err != nil {
				return nil, fmt.Errorf("new id for child %s: %w", ch.Name, err)
			}
			pc.id, pc.isNew = id, true
		}
		plan.ids[ch.Name] = pc.id
		plan.keep = append(plan.keep, pc.id)
		if owned && o.deleting {
			plan.skip[ch.Name] = true // being torn down: neither updated nor pruned; a later compose recreates it
			continue
		}
		plan.children = append(plan.children, pc)
	}
	return plan, nil
}

// planConfigs checks the root's desired configs: names, kinds and each
// spec against its kind's config_schema.
func (s *Store) planConfigs(kinds map[manifest.KindVersion]kindInfo, cfgs []Config) ([]Config, error) {
	seen, defaults := map[childKey]bool{}, map[string]string{}
	out := make([]Config, 0, len(cfgs))
	for _, cfg := range cfgs {
		if !resource.ValidName(cfg.Name) {
			return nil, composeErr(cfg.Name, "name_invalid", "config name %q is not a valid name", cfg.Name)
		}
		key := childKey{cfg.Kind, cfg.Name}
		if seen[key] {
			return nil, composeErr(cfg.Name, "duplicate_config", "two configs %s/%s", cfg.Kind, cfg.Name)
		}
		seen[key] = true
		if cfg.IsDefault {
			if other, dup := defaults[cfg.Kind]; dup {
				return nil, composeErr(cfg.Name, "duplicate_default",
					"configs %s and %s are both the default of kind %s: a kind has one", other, cfg.Name, cfg.Kind)
			}
			defaults[cfg.Kind] = cfg.Name
		}
		// The API's rules for a providerconfig's documents.
		spec, err := dbx.JSONObject("spec", cfg.Spec)
		if err != nil {
			return nil, refused(cfg.Name, err)
		}
		data, err := dbx.JSONValue("data", cfg.Data)
		if err != nil {
			return nil, refused(cfg.Name, err)
		}
		cfg.Spec, cfg.Data = spec, nil
		if data != nil {
			cfg.Data = json.RawMessage(*data)
		}
		k, ok := kinds[manifest.KindVersion{Kind: cfg.Kind, Version: manifest.DefaultVersion}]
		if !ok {
			return nil, composeErr(cfg.Name, "unknown_kind", "config kind %s has no manifest", cfg.Kind)
		}
		sc, err := s.schemas.Schema(cfg.Kind, manifest.DefaultVersion, schemacache.Config, k.gen, k.cfgSchema)
		if err != nil {
			return nil, composeErr(cfg.Name, "schema_invalid", "kind %s config_schema: %v", cfg.Kind, err)
		}
		if err := sc.Validate(cfg.Spec); err != nil {
			return nil, violation(cfg.Name, "config", err)
		}
		out = append(out, cfg)
	}
	return out, nil
}

// loadKinds reads the manifests of the children's and configs' kinds. The
// pairs are made distinct here: a composition of a thousand children names
// a handful of kinds, and the statement need not carry one per child.
func loadKinds(ctx context.Context, tx pgx.Tx, c Composition) (map[manifest.KindVersion]kindInfo, error) {
	var ks, vs []string
	seen := map[manifest.KindVersion]bool{}
	add := func(kind, version string) {
		if version == "" {
			version = manifest.DefaultVersion
		}
		if kv := (manifest.KindVersion{Kind: kind, Version: version}); !seen[kv] {
			seen[kv] = true
			ks, vs = append(ks, kind), append(vs, version)
		}
	}
	for _, ch := range c.Children {
		add(ch.Kind, ch.Version)
	}
	for _, cfg := range c.Configs {
		add(cfg.Kind, "")
	}
	out := map[manifest.KindVersion]kindInfo{}
	if len(ks) == 0 {
		return out, nil
	}
	// FOR KEY SHARE: the schema-stability gate of a manifest re-apply holds
	// the row FOR UPDATE while it scans the stored resources. A compose that
	// locks first makes the gate wait for its children (the gate's scan then
	// sees them); one that comes second waits for the re-apply and reads, and
	// validates against, the schema it committed. So no child is written
	// against a schema the gate has replaced. Rows in key order, as a
	// multi-document apply locks them.
	rows, err := tx.Query(ctx, `
SELECT m.kind, m.version, m.manifest_gen, m.is_reactor, m.manifest->'spec_schema', m.manifest->'config_schema'
  FROM kind_manifest m
 WHERE (m.kind, m.version) IN (SELECT k, v FROM unnest($1::text[], $2::text[]) AS x(k, v))
 ORDER BY m.kind, m.version
   FOR KEY SHARE OF m`, ks, vs)
	if err != nil {
		return nil, wrap(err, "compose: read kinds")
	}
	defer rows.Close()
	for rows.Next() {
		var kv manifest.KindVersion
		var k kindInfo
		if err := rows.Scan(&kv.Kind, &kv.Version, &k.gen, &k.reactor, &k.specSchema, &k.cfgSchema); err != nil {
			return nil, wrap(err, "compose: read kinds")
		}
		out[kv] = k
	}
	return out, wrap(rows.Err(), "compose: read kinds")
}

// checkOwnership refuses a config whose (kind, name) is held by an object
// the root does not own, and a default config of a kind whose default
// another holds (the providerconfigs_one_default index would refuse its
// insert). New children need no probe here: their INSERT
// (writeChildren) lets the resources_kind_name_key constraint decide, so no
// plan can turn the check into a walk of the kind-leading page index.
func checkOwnership(ctx context.Context, tx pgx.Tx, root uuid.UUID, cfgs []Config) error {
	if len(cfgs) == 0 {
		return nil
	}
	var cks, cns []string
	var cds []bool
	for _, c := range cfgs {
		cks, cns, cds = append(cks, c.Kind), append(cns, c.Name), append(cds, c.IsDefault)
	}
	var kind, name, held string
	err := tx.QueryRow(ctx, `
SELECT k.kind, k.name, p.name
  FROM unnest($2::text[], $3::text[], $4::bool[]) AS k(kind, name, is_default)
 CROSS JOIN LATERAL (SELECT p.name FROM providerconfigs p
                      WHERE p.kind = k.kind AND (p.name = k.name OR (k.is_default AND p.is_default))
                        AND p.owner_id IS DISTINCT FROM $1
                      ORDER BY p.name = k.name DESC LIMIT 1) p
LIMIT 1`, root, cks, cns, cds).Scan(&kind, &name, &held)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return wrap(err, "compose %s: check ownership", root)
	}
	if held != name {
		return composeErr(name, "owned_elsewhere",
			"config %s/%s is a default, and kind %s's default is %s, which this root does not own", kind, name, kind, held)
	}
	return ownedElsewhere("config", kind, name)
}

// ownedElsewhere is the refusal of a (kind, name) another owner holds.
func ownedElsewhere(what, kind, name string) error {
	return composeErr(name, "owned_elsewhere", "%s %s/%s exists and is not owned by this root", what, kind, name)
}

// takenChild names a new child among children whose INSERT the (kind, name)
// unique constraint skipped: a resource another owner holds (planChildren
// resolved every (kind, name) the root owns to its row, so a new child that
// was not inserted collides with someone else's).
func takenChild(children []plannedChild, created []uuid.UUID) error {
	made := make(map[uuid.UUID]bool, len(created))
	for _, id := range created {
		made[id] = true
	}
	for _, ch := range children {
		if ch.isNew && !made[ch.id] {
			return ownedElsewhere("resource", ch.Kind, ch.Name)
		}
	}
	return fmt.Errorf("compose: %d of the new children were not inserted", len(created))
}

// sameMap reports whether a and b are the same map (not merely equal).
func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// refused turns the store's refusal of a child's or config's input (an
// *InvalidError: labels, a malformed document) into a ComposeError for it.
func refused(child string, err error) error {
	var ie *dbx.InvalidError
	if errors.As(err, &ie) {
		return &ComposeError{Child: child, Axis: ie.Field, Rule: ie.Rule, Message: ie.Message}
	}
	return err
}

// violation turns a validation failure into a ComposeError for child.
func violation(child, axis string, err error) error {
	var se *manifest.SchemaError
	if errors.As(err, &se) && len(se.Violations) > 0 {
		v := se.Violations[0]
		return &ComposeError{Child: child, Axis: axis, Pointer: v.Pointer, Rule: v.Rule, Message: v.Message}
	}
	return err
}
