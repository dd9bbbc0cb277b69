package store

// The batch reads behind the GraphQL API's dataloaders and the subscription
// hub: each takes the keys one response (or one hub wake) collected and
// answers them in one statement, or one statement per distinct page shape
// sent as one pgx batch (one round trip), so a page of 50 resources with its
// nested owner, children, conditions, dependencies, dependents, provider
// config and kind costs a small constant number of statements.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/resource"
)

// PrimaryReads returns a view of the store whose reads go to the primary:
// the read-your-writes path (a mutation's nested fields, a hub re-read that
// must not trail the NOTIFY it follows). It shares the kind cache.
func (s *Store) PrimaryReads() *Store {
	c := *s
	c.read = s.primary
	return &c
}

// ChildrenKey asks for one page of a resource's direct composed children.
// It is comparable (a dataloader key): Phases is the canonical form
// PhaseKey returns.
type ChildrenKey struct {
	OwnerID uuid.UUID
	Phases  string
	Limit   int
	After   string
}

// PhaseKey is the canonical, comparable form of a phase filter: the
// distinct phases in precedence order, comma-joined ("" = all).
func PhaseKey(phases []resource.Phase) string {
	var out []string
	for _, p := range resource.AllPhases {
		if slices.Contains(phases, p) {
			out = append(out, string(p))
		}
	}
	for _, p := range phases { // unknown phases are kept so validation names them
		if !p.Valid() && !slices.Contains(out, string(p)) {
			out = append(out, string(p))
		}
	}
	return strings.Join(out, ",")
}

func parsePhaseKey(k string) []resource.Phase {
	if k == "" {
		return nil
	}
	var out []resource.Phase
	for _, p := range strings.Split(k, ",") {
		out = append(out, resource.Phase(p))
	}
	return out
}

// ChildrenPages answers many children pages at once: one statement per
// distinct (phases, limit, after) among the keys — usually one — each a
// LATERAL per owner over the same per-phase owner index branches
// ListResources uses, all sent as one batch.
func (s *Store) ChildrenPages(ctx context.Context, keys []ChildrenKey) (map[ChildrenKey]Page, error) {
	type shape struct {
		phases string
		limit  int
		after  string
	}
	groups := map[shape][]uuid.UUID{}
	var order []shape
	for _, k := range keys {
		sh := shape{k.Phases, k.Limit, k.After}
		if _, ok := groups[sh]; !ok {
			order = append(order, sh)
		}
		groups[sh] = append(groups[sh], k.OwnerID)
	}
	batch := &pgx.Batch{}
	limits := make([]int, len(order))
	for i, sh := range order {
		limit, err := pageLimit(sh.limit)
		if err != nil {
			return nil, err
		}
		limits[i] = limit
		phases, err := phaseSet(parsePhaseKey(sh.phases))
		if err != nil {
			return nil, err
		}
		args := []any{groups[sh], phases, limit + 1}
		cursor := ""
		if sh.after != "" {
			k, err := decodeKeyset(sh.after)
			if err != nil {
				return nil, err
			}
			args = append(args, k.at, k.id)
			cursor = ` AND (r.created_at, r.id) < ($4::timestamptz, $5::uuid)`
		}
		batch.Queue(`
SELECT `+resourceColumns+`, o.owner_id
  FROM unnest($1::uuid[]) AS o(owner_id)
 CROSS JOIN LATERAL (
        SELECT b.id, b.created_at
          FROM unnest($2::text[]) AS p(phase)
         CROSS JOIN LATERAL (
                SELECT r.id, r.created_at
                  FROM resources r
                 WHERE r.owner_id = o.owner_id AND r.phase = p.phase`+cursor+`
                 ORDER BY r.created_at DESC, r.id DESC
                 LIMIT $3
               ) b
         ORDER BY b.created_at DESC, b.id DESC
         LIMIT $3
       ) page
  JOIN resources r ON r.id = page.id
 ORDER BY o.owner_id, r.created_at DESC, r.id DESC`, args...)
	}
	out := make(map[ChildrenKey]Page, len(keys))
	if len(order) == 0 {
		return out, nil
	}
	br := s.read.SendBatch(ctx, batch)
	defer func() { _ = br.Close() }()
	for i, sh := range order {
		rows, err := br.Query()
		if err != nil {
			return nil, mapErr(err, "children pages")
		}
		byOwner := map[uuid.UUID][]resource.Resource{}
		for rows.Next() {
			var owner uuid.UUID
			r, err := scanResource(rows, &owner)
			if err != nil {
				rows.Close()
				return nil, mapErr(err, "children pages")
			}
			byOwner[owner] = append(byOwner[owner], r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, mapErr(err, "children pages")
		}
		for _, owner := range groups[sh] {
			items := byOwner[owner]
			page := Page{Items: items}
			if len(items) > limits[i] {
				page.Items = items[:limits[i]]
				last := page.Items[limits[i]-1]
				page.NextCursor = encodeKeyset(last.CreatedAt, last.ID)
			}
			if page.Items == nil {
				page.Items = []resource.Resource{}
			}
			out[ChildrenKey{OwnerID: owner, Phases: sh.phases, Limit: sh.limit, After: sh.after}] = page
		}
	}
	return out, nil
}

// ValueFlow copies a field of an upstream's status (Src, a JSON pointer) into
// the dependent's spec (Dep).
type ValueFlow struct {
	Src string `json:"src_field"`
	Dep string `json:"dep_field"`
}

// Dependency is one upstream edge with its value flows.
type Dependency struct {
	Upstream   resource.Resource
	ValueFlows []ValueFlow
}

// DependenciesFor returns the upstream edges of each resource (with the
// upstream rows), in one statement. Ids without edges are absent.
func (s *Store) DependenciesFor(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID][]Dependency, error) {
	out := map[uuid.UUID][]Dependency{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.read.Query(ctx, `
SELECT `+resourceColumns+`, d.dependent_id, d.value_flows
  FROM resource_deps d JOIN resources r ON r.id = d.dependency_id
 WHERE d.dependent_id = ANY($1::uuid[])
 ORDER BY d.dependent_id, r.kind, r.name`, ids)
	if err != nil {
		return nil, mapErr(err, "dependencies")
	}
	defer rows.Close()
	for rows.Next() {
		var id uuid.UUID
		var flows []byte
		r, err := scanResource(rows, &id, &flows)
		if err != nil {
			return nil, mapErr(err, "dependencies")
		}
		dep := Dependency{Upstream: r, ValueFlows: []ValueFlow{}}
		if len(flows) > 0 {
			if err := json.Unmarshal(flows, &dep.ValueFlows); err != nil {
				return nil, fmt.Errorf("dependencies: value flows of %s: %w", id, err)
			}
		}
		out[id] = append(out[id], dep)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(err, "dependencies")
	}
	return out, nil
}

// DependentsKey asks for at most Limit dependents of one resource.
type DependentsKey struct {
	ID    uuid.UUID
	Limit int
}

// DependentsFor returns, for each key, the resources whose edges point at
// the key's resource (newest first, at most Limit, capped at 500): one
// statement per distinct limit, as one batch.
func (s *Store) DependentsFor(ctx context.Context, keys []DependentsKey) (map[DependentsKey][]resource.Resource, error) {
	byLimit := map[int][]uuid.UUID{}
	var limits []int
	for _, k := range keys {
		if _, ok := byLimit[k.Limit]; !ok {
			limits = append(limits, k.Limit)
		}
		byLimit[k.Limit] = append(byLimit[k.Limit], k.ID)
	}
	out := make(map[DependentsKey][]resource.Resource, len(keys))
	if len(limits) == 0 {
		return out, nil
	}
	batch := &pgx.Batch{}
	for _, l := range limits {
		n, err := pageLimit(l)
		if err != nil {
			return nil, err
		}
		batch.Queue(`
SELECT `+resourceColumns+`, u.id
  FROM unnest($1::uuid[]) AS u(id)
 CROSS JOIN LATERAL (
        SELECT d.dependent_id FROM resource_deps d
          JOIN resources x ON x.id = d.dependent_id
         WHERE d.dependency_id = u.id
         ORDER BY x.created_at DESC, x.id DESC
         LIMIT $2
       ) e
  JOIN resources r ON r.id = e.dependent_id
 ORDER BY u.id, r.created_at DESC, r.id DESC`, byLimit[l], n)
	}
	br := s.read.SendBatch(ctx, batch)
	defer func() { _ = br.Close() }()
	for _, l := range limits {
		rows, err := br.Query()
		if err != nil {
			return nil, mapErr(err, "dependents")
		}
		for rows.Next() {
			var id uuid.UUID
			r, err := scanResource(rows, &id)
			if err != nil {
				rows.Close()
				return nil, mapErr(err, "dependents")
			}
			k := DependentsKey{ID: id, Limit: l}
			out[k] = append(out[k], r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, mapErr(err, "dependents")
		}
	}
	return out, nil
}

// StoredConditionsFor returns the stored resource_conditions rows of each
// resource (no synthesis: merge them with resource.MergeConditions and the
// row already in hand), in one statement.
func (s *Store) StoredConditionsFor(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID][]resource.Condition, error) {
	out := map[uuid.UUID][]resource.Condition{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.read.Query(ctx, `
SELECT resource_id, type, status, coalesce(reason, ''), coalesce(message, ''), observed_generation, last_transition_time
  FROM resource_conditions WHERE resource_id = ANY($1::uuid[])`, ids)
	if err != nil {
		return nil, mapErr(err, "conditions")
	}
	defer rows.Close()
	for rows.Next() {
		var id uuid.UUID
		var c resource.Condition
		var status string
		if err := rows.Scan(&id, &c.Type, &status, &c.Reason, &c.Message, &c.ObservedGeneration,
			&c.LastTransitionTime); err != nil {
			return nil, mapErr(err, "conditions")
		}
		c.Status = resource.ConditionStatus(status)
		out[id] = append(out[id], c)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(err, "conditions")
	}
	return out, nil
}

// ConfigKey names the providerconfig a resource runs with: Name is its
// providerConfigRef, "" for the kind's default.
type ConfigKey struct {
	Kind string
	Name string
}

// ProviderConfigsFor resolves many config keys in one statement; a key with
// no config (no default, or a dangling ref) is absent.
func (s *Store) ProviderConfigsFor(ctx context.Context, keys []ConfigKey) (map[ConfigKey]ProviderConfig, error) {
	out := make(map[ConfigKey]ProviderConfig, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	kinds, names := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		kinds[i], names[i] = k.Kind, k.Name
	}
	rows, err := s.read.Query(ctx, `
SELECT `+providerConfigColumns+`, k.kind, k.name
  FROM unnest($1::text[], $2::text[]) AS k(kind, name)
  JOIN providerconfigs pc ON pc.kind = k.kind
                         AND CASE WHEN k.name = '' THEN pc.is_default ELSE pc.name = k.name END`, kinds, names)
	if err != nil {
		return nil, mapErr(err, "providerconfigs")
	}
	defer rows.Close()
	for rows.Next() {
		var k ConfigKey
		pc, err := scanProviderConfig(rows, &k.Kind, &k.Name)
		if err != nil {
			return nil, mapErr(err, "providerconfigs")
		}
		out[k] = pc
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(err, "providerconfigs")
	}
	return out, nil
}

// KindsFor returns the applied kind versions among keys, in one statement.
func (s *Store) KindsFor(ctx context.Context, keys []manifest.KindVersion) (map[manifest.KindVersion]Kind, error) {
	out := make(map[manifest.KindVersion]Kind, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	kinds, versions := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		kinds[i], versions[i] = k.Kind, k.Version
	}
	rows, err := s.read.Query(ctx, `SELECT `+kindColumns+` FROM `+kindFrom+`
		JOIN unnest($1::text[], $2::text[]) AS k(kind, version) ON k.kind = m.kind AND k.version = m.version`,
		kinds, versions)
	if err != nil {
		return nil, mapErr(err, "kinds")
	}
	defer rows.Close()
	for rows.Next() {
		k, err := s.scanKind(ctx, s.read, rows)
		if err != nil {
			return nil, mapErr(err, "kinds")
		}
		out[manifest.KindVersion{Kind: k.Name, Version: k.Version}] = k
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(err, "kinds")
	}
	return out, nil
}

// OperationsKey asks for the newest Limit operations of one resource.
type OperationsKey struct {
	ResourceID uuid.UUID
	Limit      int
}

// OperationsFor returns each resource's operations, newest first: one
// statement per distinct limit (capped at 100), as one batch.
func (s *Store) OperationsFor(ctx context.Context, keys []OperationsKey) (map[OperationsKey][]resource.Operation, error) {
	byLimit := map[int][]uuid.UUID{}
	var limits []int
	for _, k := range keys {
		if _, ok := byLimit[k.Limit]; !ok {
			limits = append(limits, k.Limit)
		}
		byLimit[k.Limit] = append(byLimit[k.Limit], k.ResourceID)
	}
	out := make(map[OperationsKey][]resource.Operation, len(keys))
	if len(limits) == 0 {
		return out, nil
	}
	batch := &pgx.Batch{}
	for _, l := range limits {
		if l < 0 {
			return nil, invalid("first", "limit_invalid", "must be positive, got %d", l)
		}
		batch.Queue(`
SELECT `+operationColumns+`
  FROM unnest($1::uuid[]) AS u(id)
 CROSS JOIN LATERAL (
        SELECT * FROM resource_operations x WHERE x.resource_id = u.id
         ORDER BY x.created_at DESC LIMIT $2
       ) o
 ORDER BY o.resource_id, o.created_at DESC`, byLimit[l], min(max(l, 1), 100))
	}
	br := s.read.SendBatch(ctx, batch)
	defer func() { _ = br.Close() }()
	for _, l := range limits {
		rows, err := br.Query()
		if err != nil {
			return nil, mapErr(err, "operations")
		}
		for rows.Next() {
			op, err := scanOperation(rows)
			if err != nil {
				rows.Close()
				return nil, mapErr(err, "operations")
			}
			k := OperationsKey{ResourceID: op.ResourceID, Limit: l}
			out[k] = append(out[k], op)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, mapErr(err, "operations")
		}
	}
	return out, nil
}

// OperationsByIDs returns the operations with the given ids, keyed by id
// (the subscription hub's re-read).
func (s *Store) OperationsByIDs(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]resource.Operation, error) {
	out := make(map[uuid.UUID]resource.Operation, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.read.Query(ctx, `SELECT `+operationColumns+` FROM resource_operations o WHERE o.id = ANY($1::uuid[])`, ids)
	if err != nil {
		return nil, mapErr(err, "operations by id")
	}
	defer rows.Close()
	for rows.Next() {
		op, err := scanOperation(rows)
		if err != nil {
			return nil, mapErr(err, "operations by id")
		}
		out[op.ID] = op
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(err, "operations by id")
	}
	return out, nil
}

// PhaseCountsByKind returns the phase counts of every kind in one statement
// (the hub recomputes the counts of all its subscribers' kinds at once):
// kind → phase → count, only non-zero entries.
func (s *Store) PhaseCountsByKind(ctx context.Context) (map[string]map[resource.Phase]int64, error) {
	rows, err := s.read.Query(ctx, `
SELECT kind, phase, sum(n)::bigint FROM (
	SELECT kind, phase, n FROM resource_phase_counts
	UNION ALL
	SELECT kind, phase, dn FROM resource_phase_deltas
) t
GROUP BY kind, phase
HAVING sum(n) <> 0`)
	if err != nil {
		return nil, mapErr(err, "phase counts by kind")
	}
	defer rows.Close()
	out := map[string]map[resource.Phase]int64{}
	for rows.Next() {
		var kind, phase string
		var n int64
		if err := rows.Scan(&kind, &phase, &n); err != nil {
			return nil, mapErr(err, "phase counts by kind")
		}
		if out[kind] == nil {
			out[kind] = map[resource.Phase]int64{}
		}
		out[kind][resource.Phase(phase)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(err, "phase counts by kind")
	}
	return out, nil
}

// CursorAt is the page cursor that continues after the row (createdAt, id)
// in the (created_at DESC, id DESC) order, as a page's NextCursor would be.
func CursorAt(createdAt time.Time, id uuid.UUID) string { return encodeKeyset(createdAt, id) }
