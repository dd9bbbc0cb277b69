package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store/internal/dbx"
)

// SpecRevision is one applied generation of a resource, as its spec history
// keeps it (resource_spec_history).
type SpecRevision struct {
	Generation        int64
	Spec              json.RawMessage
	Labels            map[string]string
	ProviderConfigRef string
	// Version is the kind version it was applied at ("" when it was kept
	// before the history recorded versions).
	Version string
	// Reason is Created, SpecUpdated, LabelsUpdated, VersionMigrated or
	// RolledBack.
	Reason string
	Actor  string
	// RolledBackFrom is the generation a rollback copied (0 otherwise).
	RolledBackFrom int64
	CreatedAt      time.Time
}

// MaxHistoryLimit is the most generations a kind may keep per resource.
const MaxHistoryLimit = 1000

// recordHistory keeps the resource's current generation in its history and
// prunes it to the kind's history_limit (record_spec_history).
func recordHistory(ctx context.Context, q querier, id uuid.UUID, reason, actor string, from int64) error {
	var fromArg *int64
	if from > 0 {
		fromArg = &from
	}
	if actor == "" {
		actor = resource.ActorSystem
	}
	if _, err := q.Exec(ctx, `SELECT record_spec_history($1, $2, $3, $4)`, id, reason, actor, fromArg); err != nil {
		return mapErr(err, "spec history of resource "+id.String())
	}
	return nil
}

// SpecHistory returns resource id's kept generations, newest first, at most
// limit (1-1000; 0 = all kept).
func (s *Store) SpecHistory(ctx context.Context, id uuid.UUID, limit int) ([]SpecRevision, error) {
	key := SpecHistoryKey{ID: id, Limit: limit}
	all, err := s.SpecHistoriesFor(ctx, []SpecHistoryKey{key})
	if err != nil {
		return nil, err
	}
	if all[key] == nil {
		return []SpecRevision{}, nil
	}
	return all[key], nil
}

// SpecHistoryKey asks for at most Limit kept generations of one resource
// (1-1000; 0 = all kept).
type SpecHistoryKey struct {
	ID    uuid.UUID
	Limit int
}

// SpecHistoriesFor is SpecHistory for many resources (the batch behind the
// API's Resource.specHistory): one statement per distinct limit, as one
// batch, each a LATERAL walk of the history's primary key per resource.
// Keys without kept generations are absent.
func (s *Store) SpecHistoriesFor(ctx context.Context, keys []SpecHistoryKey) (map[SpecHistoryKey][]SpecRevision, error) {
	byLimit := map[int][]uuid.UUID{}
	var limits []int
	for _, k := range keys {
		if k.Limit < 0 || k.Limit > MaxHistoryLimit {
			return nil, invalid("first", "out_of_range", "first must be 1-%d, got %d", MaxHistoryLimit, k.Limit)
		}
		if _, ok := byLimit[k.Limit]; !ok {
			limits = append(limits, k.Limit)
		}
		byLimit[k.Limit] = append(byLimit[k.Limit], k.ID)
	}
	out := make(map[SpecHistoryKey][]SpecRevision, len(keys))
	if len(limits) == 0 {
		return out, nil
	}
	batch := &pgx.Batch{}
	for _, l := range limits {
		n := l
		if n == 0 {
			n = MaxHistoryLimit
		}
		batch.Queue(`
		SELECT u.id, h.generation, h.spec, h.labels, coalesce(h.provider_config_ref, ''), coalesce(h.version, ''),
		       h.reason, h.actor, coalesce(h.rolled_back_from, 0), h.created_at
		  FROM unnest($1::uuid[]) AS u(id)
		 CROSS JOIN LATERAL (SELECT * FROM resource_spec_history x WHERE x.resource_id = u.id
		                      ORDER BY x.generation DESC LIMIT $2) h
		 ORDER BY u.id, h.generation DESC`, byLimit[l], n)
	}
	br := s.read.SendBatch(ctx, batch)
	defer func() { _ = br.Close() }()
	for _, l := range limits {
		rows, err := br.Query()
		if err != nil {
			return nil, mapErr(err, "spec histories")
		}
		for rows.Next() {
			var id uuid.UUID
			var h SpecRevision
			if err := rows.Scan(&id, &h.Generation, &h.Spec, (*labelMap)(&h.Labels), &h.ProviderConfigRef, &h.Version,
				&h.Reason, &h.Actor, &h.RolledBackFrom, &h.CreatedAt); err != nil {
				rows.Close()
				return nil, mapErr(err, "spec histories")
			}
			if h.Labels == nil {
				h.Labels = map[string]string{}
			}
			k := SpecHistoryKey{ID: id, Limit: l}
			out[k] = append(out[k], h)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, mapErr(err, "spec histories")
		}
	}
	return out, nil
}

// RollbackResource applies generation toGeneration's kept spec, labels and
// provider config ref to resource (kind, name) again, at the kind version it
// was applied at: a new generation carrying the old spec, validated against
// that version's schema as any apply is (a resource that has moved to
// another version since migrates back live: Migrated), recorded in the
// events as RolledBack with its actor and in the history with the generation
// it copied; when only its labels differ from the live ones they are restored
// without a new generation, recorded as RolledBack all the same. When the
// kept revision equals the live one nothing is written (Unchanged). Errors: no such resource or generation not kept →
// ErrNotFound; a generation that is not older than the live one, or one
// applied at a version the kind no longer has → *InvalidError; a resource
// being deleted → ErrConflict. The resource, its kept generation and the
// apply are read and written in one transaction, under the resource's row
// lock: a resource deleted meanwhile is ErrNotFound, never created again.
// DryRun writes nothing and returns what the rollback would.
func (s *Store) RollbackResource(ctx context.Context, kind, name string, toGeneration int64, actor string,
	dryRun bool) (resource.Resource, ApplyOutcome, error) {
	if actor == "" {
		actor = resource.ActorSystem
	}
	if dryRun {
		ctx = WithDryRun(ctx)
	}
	var (
		r       resource.Resource
		outcome ApplyOutcome
		in      ApplyResourceInput
	)
	// One transaction: the resource and its kept generation are read under
	// the row lock the apply writes under, so a concurrent delete (or a
	// delete and a new resource of the same name) cannot slip between them.
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		if in, err = s.rollbackInput(ctx, tx, kind, name, toGeneration, actor); err != nil {
			return err
		}
		r, outcome, err = s.applyResource(ctx, tx, in)
		return err
	})
	var ie *InvalidError
	if errors.As(err, &ie) && ie.Field == "version" && ie.Rule == "unknown_version" {
		return resource.Resource{}, "", invalid("toGeneration", "unknown_version",
			"resource %s/%s: generation %d was applied at version %s, which kind %s no longer has: "+
				"roll back to a generation of an applied version", kind, name, toGeneration, in.Version, kind)
	}
	if err != nil {
		return resource.Resource{}, "", err
	}
	return r, outcome, nil
}

// rollbackInput locks resource (kind, name) in tx and reads the apply that
// restores its kept generation toGeneration. The kind's versions are locked
// first, as every apply locks them, so a rollback and a manifest re-apply
// take their locks in the same order.
func (s *Store) rollbackInput(ctx context.Context, tx pgx.Tx, kind, name string, toGeneration int64,
	actor string) (ApplyResourceInput, error) {
	if err := dbx.ByKeyOnly(ctx, tx); err != nil {
		return ApplyResourceInput{}, err
	}
	if _, err := s.kindVersions(ctx, tx, kind); err != nil {
		return ApplyResourceInput{}, err
	}
	what := fmt.Sprintf("resource %s/%s", kind, name)
	var (
		id         uuid.UUID
		generation int64
		curVersion string
	)
	err := tx.QueryRow(ctx, `SELECT id, generation, version FROM resources WHERE kind = $1 AND name = $2 FOR UPDATE`,
		kind, name).Scan(&id, &generation, &curVersion)
	if err != nil {
		return ApplyResourceInput{}, mapErr(err, what)
	}
	if generation <= 1 {
		return ApplyResourceInput{}, invalid("toGeneration", "out_of_range",
			"resource %s/%s is at generation 1: there is no earlier generation to roll back to", kind, name)
	}
	if toGeneration < 1 || toGeneration >= generation {
		return ApplyResourceInput{}, invalid("toGeneration", "out_of_range",
			"toGeneration must be an earlier generation (1-%d), got %d", generation-1, toGeneration)
	}
	var h SpecRevision
	err = tx.QueryRow(ctx, `
		SELECT spec, labels, coalesce(provider_config_ref, ''), coalesce(version, '') FROM resource_spec_history
		 WHERE resource_id = $1 AND generation = $2`, id, toGeneration).
		Scan(&h.Spec, (*labelMap)(&h.Labels), &h.ProviderConfigRef, &h.Version)
	if errors.Is(err, pgx.ErrNoRows) {
		return ApplyResourceInput{}, notFound("resource %s/%s: generation %d is not in its spec history "+
			"(kept: the kind's history_limit newest applied generations)", kind, name, toGeneration)
	}
	if err != nil {
		return ApplyResourceInput{}, mapErr(err, "spec history of "+what)
	}
	if h.Version == "" { // kept before the history recorded versions
		h.Version = curVersion
	}
	return ApplyResourceInput{Kind: kind, Name: name, Version: h.Version, Labels: nonNilLabels(h.Labels),
		Spec: h.Spec, ProviderConfigRef: h.ProviderConfigRef, Actor: actor, rollbackFrom: toGeneration}, nil
}

// ApplyPlan is what an apply would do, computed by a dry run: the outcome,
// the stored object (nil when the apply would create it), the would-be
// object, and the spec and labels changes between them.
type ApplyPlan struct {
	Outcome       ApplyOutcome
	Before        *resource.Resource
	After         resource.Resource
	SpecChanges   []resource.Change
	LabelsChanges []resource.Change
}

// PlanResource runs the apply as a dry run (every check a real apply makes,
// the same errors, nothing written) and diffs the result against the
// stored object.
func (s *Store) PlanResource(ctx context.Context, in ApplyResourceInput) (ApplyPlan, error) {
	var before *resource.Resource
	cur, err := s.PrimaryReads().GetResource(ctx, in.Kind, in.Name)
	switch {
	case err == nil:
		before = &cur
	case !errors.Is(err, ErrNotFound):
		return ApplyPlan{}, err
	}
	in.DryRun = true
	after, outcome, err := s.ApplyResource(ctx, in)
	if err != nil {
		return ApplyPlan{}, err
	}
	p := ApplyPlan{Outcome: outcome, Before: before, After: after}
	var oldSpec, oldLabels json.RawMessage
	if before != nil {
		oldSpec = before.Spec
		if oldLabels, err = json.Marshal(before.Labels); err != nil {
			return ApplyPlan{}, fmt.Errorf("plan: labels: %w", err)
		}
	}
	newLabels, err := json.Marshal(after.Labels)
	if err != nil {
		return ApplyPlan{}, fmt.Errorf("plan: labels: %w", err)
	}
	if p.SpecChanges, err = resource.Diff(oldSpec, after.Spec); err != nil {
		return ApplyPlan{}, err
	}
	if p.LabelsChanges, err = resource.Diff(oldLabels, newLabels); err != nil {
		return ApplyPlan{}, err
	}
	return p, nil
}

// SetHistoryLimit sets how many applied generations a kind version keeps per
// resource (0-1000; 0 keeps none). Existing histories are pruned on their
// next apply. ErrNotFound when the kind version has no config.
func (s *Store) SetHistoryLimit(ctx context.Context, kind, version string, limit int) error {
	if limit < 0 || limit > MaxHistoryLimit {
		return invalid("historyLimit", "out_of_range", "historyLimit must be 0-%d, got %d", MaxHistoryLimit, limit)
	}
	tag, err := s.primary.Exec(ctx, `UPDATE kind_config SET history_limit = $3, updated_at = now()
		WHERE kind = $1 AND version = $2`, kind, version, limit)
	if err != nil {
		return mapErr(err, fmt.Sprintf("kind %s/%s", kind, version))
	}
	if tag.RowsAffected() == 0 {
		return notFound("kind %s/%s not found", kind, version)
	}
	return nil
}

// HistoryLimit returns the kind version's history_limit.
func (s *Store) HistoryLimit(ctx context.Context, kind, version string) (int, error) {
	var n int
	err := s.read.QueryRow(ctx, `SELECT history_limit FROM kind_config WHERE kind = $1 AND version = $2`, kind, version).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, notFound("kind %s/%s not found", kind, version)
	}
	return n, mapErr(err, fmt.Sprintf("kind %s/%s", kind, version))
}

// GenerationDiff is the spec and labels changes between two kept
// generations.
type GenerationDiff struct {
	Spec, Labels []resource.Change
}

// SpecDiff diffs kept generations from and to of resource id. ErrNotFound
// when either is not kept.
func (s *Store) SpecDiff(ctx context.Context, id uuid.UUID, from, to int64) (GenerationDiff, error) {
	rows, err := s.read.Query(ctx, `SELECT generation, spec, labels FROM resource_spec_history
		WHERE resource_id = $1 AND generation = ANY ($2)`, id, []int64{from, to})
	if err != nil {
		return GenerationDiff{}, mapErr(err, "spec history of resource "+id.String())
	}
	type rev struct{ spec, labels json.RawMessage }
	got := map[int64]rev{}
	for rows.Next() {
		var g int64
		var r rev
		if err := rows.Scan(&g, &r.spec, &r.labels); err != nil {
			rows.Close()
			return GenerationDiff{}, mapErr(err, "spec history of resource "+id.String())
		}
		got[g] = r
	}
	if err := rows.Err(); err != nil {
		return GenerationDiff{}, mapErr(err, "spec history of resource "+id.String())
	}
	for _, g := range []int64{from, to} {
		if _, ok := got[g]; !ok {
			return GenerationDiff{}, notFound("resource %s: generation %d is not in its spec history", id, g)
		}
	}
	var d GenerationDiff
	if d.Spec, err = resource.Diff(got[from].spec, got[to].spec); err != nil {
		return GenerationDiff{}, err
	}
	if d.Labels, err = resource.Diff(got[from].labels, got[to].labels); err != nil {
		return GenerationDiff{}, err
	}
	return d, nil
}
