package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store/internal/dbx"
)

// ApplyResourceInput is the desired state of one resource. An apply is a full
// replace of the user-owned fields: labels nil means no labels, an empty
// ProviderConfigRef means the kind's default config.
type ApplyResourceInput struct {
	Kind string
	Name string
	// Version defaults to the resource's version, else the kind's only one.
	Version           string
	Labels            map[string]string
	Spec              json.RawMessage
	ProviderConfigRef string
	// Actor is recorded on the resource event ("" = "system").
	Actor string
	// DryRun validates and applies in a transaction that is rolled back:
	// the result is what the apply would return, and nothing is written.
	DryRun bool
	// rollbackFrom is the generation a rollback copies (0: a plain apply).
	rollbackFrom int64
}

// resourceColumns is the select list scanResource reads, over alias r.
const resourceColumns = `r.id, r.kind, r.version, r.name, r.labels, r.spec, r.status, r.phase, r.is_ready,
	r.generation, r.synced_gen, r.composed_gen, r.health_ok, r.failure_gen, r.failure_terminal,
	r.finalizers, r.deletion_requested_at,
	CASE WHEN r.frozen_until = 'infinity' THEN NULL ELSE r.frozen_until END,
	coalesce(r.frozen_until = 'infinity', false),
	r.owner_id, r.root_id, coalesce(r.provider_config_ref, ''), r.shard_id, r.created_at, r.updated_at`

// scanResource reads resourceColumns, followed by extra destinations.
func scanResource(row pgx.Row, extra ...any) (resource.Resource, error) {
	var r resource.Resource
	var phase string
	dest := []any{&r.ID, &r.Kind, &r.Version, &r.Name, (*labelMap)(&r.Labels), &r.Spec, &r.Status, &phase, &r.Ready,
		&r.Generation, &r.SyncedGen, &r.ComposedGen, &r.HealthOK, &r.FailureGen, &r.FailureTerminal,
		&r.Finalizers, &r.DeletionRequestedAt, &r.FrozenUntil, &r.Quarantined,
		&r.OwnerID, &r.RootID, &r.ProviderConfigRef, &r.ShardID, &r.CreatedAt, &r.UpdatedAt}
	if err := row.Scan(append(dest, extra...)...); err != nil {
		return resource.Resource{}, err
	}
	r.Phase = resource.Phase(phase)
	if r.Labels == nil {
		r.Labels = map[string]string{}
	}
	if r.Finalizers == nil {
		r.Finalizers = []string{}
	}
	return r, nil
}

// labelMap decodes a labels object leniently: the store writes only string
// values, but the column accepts any object (composers write it too), and a
// stray number or boolean must not make a row unreadable: it is kept as its
// JSON text.
type labelMap map[string]string

func (m *labelMap) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("labels: %w", err)
	}
	out := make(labelMap, len(raw))
	for k, v := range raw {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			s = string(v)
		}
		out[k] = s
	}
	*m = out
	return nil
}

func collectResources(rows pgx.Rows) ([]resource.Resource, error) {
	defer rows.Close()
	var out []resource.Resource
	for rows.Next() {
		r, err := scanResource(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// errApplyRace: a concurrent apply created the same (kind, name) between our
// read and our insert; the apply is retried and becomes an update.
var errApplyRace = errors.New("concurrent create")

// ApplyResource creates the resource or updates its spec, labels and
// provider config ref, in one transaction:
//
//   - create: INSERT with shard_id = shard_of(id), then schedule_eligible;
//   - a spec change bumps generation (the table's trigger) and schedules;
//     a change of providerConfigRef bumps it too (the effective config
//     changed, so the resource must be reconciled again);
//   - a labels-only change bumps nothing and schedules nothing;
//   - no change writes nothing (Unchanged).
//
// Each write appends a resource event (Created, SpecUpdated, LabelsUpdated)
// and keeps the applied generation in the spec history (record_spec_history).
// A DryRun does all of it in a transaction it rolls back: the same checks
// and errors, the would-be result, nothing written.
// Errors: unknown kind, reactor kind, unknown version, schema violation,
// bad name or labels, bad providerConfigRef → *InvalidError; a resource
// being deleted → ErrConflict. Naming another applied version of the kind
// migrates the resource live (migrateResource): Migrated. Nothing is written
// when anything fails.
func (s *Store) ApplyResource(ctx context.Context, in ApplyResourceInput) (resource.Resource, ApplyOutcome, error) {
	if err := validateName("name", in.Name); err != nil {
		return resource.Resource{}, "", err
	}
	if err := validateLabels("labels", in.Labels); err != nil {
		return resource.Resource{}, "", err
	}
	spec, err := jsonObject("spec", in.Spec)
	if err != nil {
		return resource.Resource{}, "", err
	}
	in.Spec, in.Labels = spec, nonNilLabels(in.Labels)
	if in.ProviderConfigRef != "" {
		if err := validateName("providerConfigRef", in.ProviderConfigRef); err != nil {
			return resource.Resource{}, "", err
		}
	}
	if in.Actor == "" {
		in.Actor = resource.ActorSystem
	}
	if in.DryRun {
		ctx = WithDryRun(ctx)
	}
	for attempt := 0; ; attempt++ {
		var (
			r       resource.Resource
			outcome ApplyOutcome
		)
		err := s.inTx(ctx, func(tx pgx.Tx) error {
			var err error
			r, outcome, err = s.applyResource(ctx, tx, in)
			return err
		})
		if errors.Is(err, errApplyRace) {
			if attempt < 3 {
				continue
			}
			return resource.Resource{}, "", conflict("resource %s/%s: concurrent applies, retry", in.Kind, in.Name)
		}
		if err != nil {
			return resource.Resource{}, "", err
		}
		return r, outcome, nil
	}
}

// kindVersionRow is one applied version of a kind, as apply paths need it.
type kindVersionRow struct {
	version   string
	gen       int64
	isReactor bool
}

// kindVersions reads the kind's applied versions under a key-share lock, so
// a manifest re-apply's stability gate (which locks the row FOR UPDATE)
// never races a resource written against the schema it replaces.
func (s *Store) kindVersions(ctx context.Context, q querier, kind string) ([]kindVersionRow, error) {
	rows, err := q.Query(ctx,
		`SELECT version, manifest_gen, is_reactor FROM kind_manifest WHERE kind = $1 ORDER BY version FOR KEY SHARE`, kind)
	if err != nil {
		return nil, mapErr(err, "kind "+kind)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (kindVersionRow, error) {
		var k kindVersionRow
		err := row.Scan(&k.version, &k.gen, &k.isReactor)
		return k, err
	})
	if err != nil {
		return nil, mapErr(err, "kind "+kind)
	}
	return out, nil
}

// pickVersion chooses the kind version an apply targets: want, else the
// kind's only version.
func pickVersion(field, kind, want string, versions []kindVersionRow) (kindVersionRow, error) {
	if len(versions) == 0 {
		return kindVersionRow{}, invalid(field, "unknown_kind", "kind %q is not declared (apply its manifest first)", kind)
	}
	if want == "" {
		if len(versions) > 1 {
			names := make([]string, len(versions))
			for i, v := range versions {
				names[i] = v.version
			}
			return kindVersionRow{}, invalid("version", "version_required",
				"kind %s has versions %s: name one", kind, strings.Join(names, ", "))
		}
		return versions[0], nil
	}
	i := slices.IndexFunc(versions, func(v kindVersionRow) bool { return v.version == want })
	if i < 0 {
		return kindVersionRow{}, invalid("version", "unknown_version", "kind %s has no version %q", kind, want)
	}
	return versions[i], nil
}

func (s *Store) applyResource(ctx context.Context, tx pgx.Tx, in ApplyResourceInput) (resource.Resource, ApplyOutcome, error) {
	if err := dbx.ByKeyOnly(ctx, tx); err != nil {
		return resource.Resource{}, "", err
	}
	versions, err := s.kindVersions(ctx, tx, in.Kind)
	if err != nil {
		return resource.Resource{}, "", err
	}
	what := fmt.Sprintf("resource %s/%s", in.Kind, in.Name)
	var sameSpec, sameLabels bool
	cur, err := scanResource(tx.QueryRow(ctx, `SELECT `+resourceColumns+`, r.spec = $3::jsonb, r.labels = $4::jsonb
		FROM resources r WHERE r.kind = $1 AND r.name = $2 FOR UPDATE`,
		in.Kind, in.Name, string(in.Spec), in.Labels), &sameSpec, &sameLabels)
	exists := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return resource.Resource{}, "", mapErr(err, what)
	}

	want := in.Version
	migrate := exists && want != "" && want != cur.Version
	if exists && !migrate {
		want = cur.Version
	}
	kv, err := pickVersion("kind", in.Kind, want, versions)
	if err != nil {
		return resource.Resource{}, "", err
	}
	if kv.isReactor {
		return resource.Resource{}, "", invalid("kind", "reactor_kind",
			"kind %s is a reactor: it owns no resources (subscribe it with a reactor binding)", in.Kind)
	}
	if exists && cur.DeletionRequestedAt != nil {
		return resource.Resource{}, "", conflict("%s is being deleted", what)
	}
	if err := s.checkResourceInput(ctx, tx, in, kv); err != nil {
		return resource.Resource{}, "", err
	}

	if !exists {
		r, err := createResource(ctx, tx, in, kv.version)
		return r, Created, err
	}
	if migrate {
		r, err := migrateResource(ctx, tx, in, cur, kv.version, what)
		return r, Migrated, err
	}
	if sameSpec && sameLabels && cur.ProviderConfigRef == in.ProviderConfigRef {
		return cur, Unchanged, nil
	}
	r, err := updateResource(ctx, tx, in, cur, what)
	if err != nil {
		return resource.Resource{}, "", err
	}
	return r, Configured, nil
}

// checkResourceInput validates the spec against kind version kv's schema
// and the providerconfig reference, if any.
func (s *Store) checkResourceInput(ctx context.Context, tx pgx.Tx, in ApplyResourceInput, kv kindVersionRow) error {
	entry, err := s.kinds.get(ctx, tx, in.Kind, kv.version, kv.gen, nil)
	if err != nil {
		return err
	}
	spec, err := entry.spec()
	if err != nil {
		return err
	}
	if err := spec.Validate(in.Spec); err != nil {
		return schemaInvalid("spec", err)
	}
	if in.ProviderConfigRef != "" {
		return checkConfigRef(ctx, tx, in.Kind, in.ProviderConfigRef)
	}
	return nil
}

// updateResource writes a changed spec, labels or config reference over cur,
// re-gates the resource when its generation moved, and records the event.
func updateResource(ctx context.Context, tx pgx.Tx, in ApplyResourceInput, cur resource.Resource, what string) (resource.Resource, error) {
	r, err := scanResource(tx.QueryRow(ctx, `
		UPDATE resources r SET
			spec = $2::jsonb,
			labels = $3::jsonb,
			provider_config_ref = nullif($4, ''),
			generation = CASE WHEN r.provider_config_ref IS DISTINCT FROM nullif($4, '')
			                  THEN r.generation + 1 ELSE r.generation END,
			updated_at = now()
		WHERE r.id = $1
		RETURNING `+resourceColumns, cur.ID, string(in.Spec), in.Labels, in.ProviderConfigRef))
	if err != nil {
		return resource.Resource{}, mapErr(err, what)
	}
	ev := resource.Event{ResourceID: r.ID, Type: resource.EventNormal, Actor: in.Actor}
	if r.Generation != cur.Generation {
		if err := scheduleEligible(ctx, tx, r.ID); err != nil {
			return resource.Resource{}, err
		}
		ev.Reason, ev.Message = resource.ReasonSpecUpdated, fmt.Sprintf("generation %d", r.Generation)
		if in.rollbackFrom > 0 {
			ev.Reason = resource.ReasonRolledBack
			ev.Message = fmt.Sprintf("generation %d carries the spec of generation %d", r.Generation, in.rollbackFrom)
		}
	} else {
		ev.Reason, ev.Message = resource.ReasonLabelsUpdated, "labels changed"
		if in.rollbackFrom > 0 { // the kept spec is the live one: only its labels come back
			ev.Reason = resource.ReasonRolledBack
			ev.Message = fmt.Sprintf("generation %d carries the labels of generation %d", r.Generation, in.rollbackFrom)
		}
	}
	if _, err := appendEvent(ctx, tx, ev); err != nil {
		return resource.Resource{}, err
	}
	if err := recordHistory(ctx, tx, r.ID, ev.Reason, in.Actor, in.rollbackFrom); err != nil {
		return resource.Resource{}, err
	}
	return r, nil
}

func createResource(ctx context.Context, tx pgx.Tx, in ApplyResourceInput, version string) (resource.Resource, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return resource.Resource{}, fmt.Errorf("new resource id: %w", err)
	}
	what := fmt.Sprintf("resource %s/%s", in.Kind, in.Name)
	r, err := scanResource(tx.QueryRow(ctx, `
		INSERT INTO resources AS r (id, kind, version, name, labels, spec, provider_config_ref, shard_id)
		VALUES ($1, $2, $3, $4, $5::jsonb, $6::jsonb, nullif($7, ''), shard_of($1))
		ON CONFLICT (kind, name) DO NOTHING
		RETURNING `+resourceColumns,
		id, in.Kind, version, in.Name, in.Labels, string(in.Spec), in.ProviderConfigRef))
	if errors.Is(err, pgx.ErrNoRows) {
		return resource.Resource{}, errApplyRace
	}
	if err != nil {
		return resource.Resource{}, mapErr(err, what)
	}
	if err := scheduleEligible(ctx, tx, r.ID); err != nil {
		return resource.Resource{}, err
	}
	_, err = appendEvent(ctx, tx, resource.Event{ResourceID: r.ID, Type: resource.EventNormal,
		Reason: resource.ReasonCreated, Message: fmt.Sprintf("generation %d", r.Generation), Actor: in.Actor})
	if err != nil {
		return resource.Resource{}, err
	}
	return r, recordHistory(ctx, tx, r.ID, resource.ReasonCreated, in.Actor, 0)
}

// scheduleEligible hands the resource to the scheduling gate
// (db/functions/schedule_eligible.sql), which enqueues its reconcile
// if it is eligible; it is idempotent.
func scheduleEligible(ctx context.Context, q querier, id uuid.UUID) error {
	if _, err := q.Exec(ctx, `SELECT schedule_eligible(ARRAY[$1::uuid])`, id); err != nil {
		return mapErr(err, "schedule resource "+id.String())
	}
	return nil
}

// checkConfigRef checks that name is an existing non-default providerconfig
// of kind, and share-locks it so it cannot vanish before the commit.
func checkConfigRef(ctx context.Context, tx pgx.Tx, kind, name string) error {
	var isDefault bool
	err := tx.QueryRow(ctx, `SELECT is_default FROM providerconfigs WHERE kind = $1 AND name = $2 FOR SHARE`,
		kind, name).Scan(&isDefault)
	if errors.Is(err, pgx.ErrNoRows) {
		return invalid("providerConfigRef", "not_found", "kind %s has no providerconfig %q", kind, name)
	}
	if err != nil {
		return mapErr(err, fmt.Sprintf("providerconfig %s/%s", kind, name))
	}
	if isDefault {
		return invalid("providerConfigRef", "default_config",
			"providerconfig %s/%s is the kind's default: it applies without a ref; a ref names a non-default config", kind, name)
	}
	return nil
}

// GetResource returns the resource (kind, name).
func (s *Store) GetResource(ctx context.Context, kind, name string) (resource.Resource, error) {
	r, err := scanResource(s.read.QueryRow(ctx,
		`SELECT `+resourceColumns+` FROM resources r WHERE r.kind = $1 AND r.name = $2`, kind, name))
	return r, mapErr(err, fmt.Sprintf("resource %s/%s", kind, name))
}

// GetResourceByID returns the resource with id.
func (s *Store) GetResourceByID(ctx context.Context, id uuid.UUID) (resource.Resource, error) {
	r, err := scanResource(s.read.QueryRow(ctx, `SELECT `+resourceColumns+` FROM resources r WHERE r.id = $1`, id))
	return r, mapErr(err, "resource "+id.String())
}

// ResourcesByIDs returns the resources with the given ids, keyed by id; an
// id with no resource is absent from the map (the batch read behind the API's
// dataloaders).
func (s *Store) ResourcesByIDs(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]resource.Resource, error) {
	out := make(map[uuid.UUID]resource.Resource, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.read.Query(ctx, `SELECT `+resourceColumns+` FROM resources r WHERE r.id = ANY($1::uuid[])`, ids)
	if err != nil {
		return nil, mapErr(err, "resources by id")
	}
	list, err := collectResources(rows)
	if err != nil {
		return nil, mapErr(err, "resources by id")
	}
	for _, r := range list {
		out[r.ID] = r
	}
	return out, nil
}
