package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/core/store/internal/dbx"
)

// Composition is what a composer returned for its root: the desired
// children, the dependency edges between them (or to resources outside the
// composition) and the provider configs the root owns.
type Composition struct {
	Children []Child
	Edges    []Edge
	Configs  []Config
}

// Child is one desired composed resource. Its identity is (Kind, Name); Name
// is also how edges refer to it, so names are unique within a composition.
type Child struct {
	Kind    string
	Version string // "" = v1
	Name    string
	Labels  map[string]string
	Spec    json.RawMessage
	// ProviderConfigRef attaches a non-default providerconfig of Kind.
	ProviderConfigRef string
}

// Edge makes the child Dependent wait on Dependency, and copies the
// dependency's status fields into the dependent's spec (ValueFlows).
type Edge struct {
	Dependent  string
	Dependency Ref
	ValueFlows []ValueFlow
}

// Ref names an edge's dependency: a child of the composition by Child name,
// or an existing resource by Kind and Name.
type Ref struct {
	Child      string
	Kind, Name string
}

// ValueFlow copies the upstream's status at SrcField (a JSON pointer) into
// the dependent's spec at DepField.
type ValueFlow struct {
	SrcField string `json:"src_field"`
	DepField string `json:"dep_field"`
}

// Config is a providerconfig the root owns: deleted when the composition
// stops emitting it and with the root, unless resources name it (then kept,
// or handed over as hand-authored: providerconfigs_keep_named).
type Config struct {
	Kind      string
	Name      string
	IsDefault bool
	Spec      json.RawMessage
	Data      json.RawMessage
}

// ComposeResult counts what a compose application changed.
type ComposeResult struct {
	Created   int // new children
	Updated   int // children whose spec, labels, version or config ref changed, or that were re-adopted
	Readopted int // orphaned children the composition emitted again
	Orphaned  int // vanished children stamped with their kind's orphan grace
	Deleted   int // vanished children hard-deleted
	Teardown  int // vanished children handed to request_resource_deletion
	Edges     int // edges inserted, changed or removed
	Configs   int // configs inserted, changed or removed
	Scheduled int // children the gate queued
	// RootDeleting: the root was marked for deletion; nothing was written.
	RootDeleting bool
}

// Changed reports whether the application wrote anything beyond composed_gen.
func (r ComposeResult) Changed() bool {
	return r.Created+r.Updated+r.Orphaned+r.Deleted+r.Teardown+r.Edges+r.Configs > 0
}

// ComposeError is a composition the store refused: nothing was written. It
// is terminal — the same composition fails the same way — so the caller
// reports it as a terminal reconcile failure of the root; except a
// Transient one, which names a state that passes by itself.
type ComposeError struct {
	// Child names the offending child or config ("" for the composition as
	// a whole).
	Child string
	// Axis is "spec" (a child's) or "config" (a config's spec) for a schema
	// violation, and Pointer the JSON pointer into that document; "labels",
	// "spec" or "data" for input the API would refuse too (a bad label, a
	// malformed document, a spec that is not an object); "providerConfigRef"
	// for a child's ref to a config the API would refuse (rules not_found,
	// default_config).
	Axis    string
	Pointer string
	// Rule is the JSON Schema keyword that failed, or one of the compose
	// rules (unknown_kind, name_invalid, duplicate_child, unknown_dependency,
	// duplicate_edge, edge_cycle, owned_elsewhere, dependency_deleting,
	// dependency_pruned, …).
	Rule    string
	Message string
}

// RuleDependencyDeleting refuses an edge to a resource being deleted: the
// composition is retried, and composes once the dependency is gone (or
// fails then as unknown_dependency, if it still names it).
const RuleDependencyDeleting = "dependency_deleting"

// Transient reports whether the refusal passes by itself, so the caller
// retries the compose instead of failing the root for good.
func (e *ComposeError) Transient() bool { return e.Rule == RuleDependencyDeleting }

// Error renders `compose: child "vpc-a": spec/cidr: expected string [type]`.
func (e *ComposeError) Error() string {
	where := "composition"
	if e.Child != "" {
		where = fmt.Sprintf("child %q", e.Child)
	}
	if e.Axis != "" {
		where += ": " + e.Axis + e.Pointer
	}
	return fmt.Sprintf("compose: %s: %s [%s]", where, e.Message, e.Rule)
}

func composeErr(child, rule, format string, args ...any) *ComposeError {
	return &ComposeError{Child: child, Rule: rule, Message: fmt.Sprintf(format, args...)}
}

// ApplyCompose applies a composer's output for the root of task, in one
// transaction fenced on the task's claim_epoch (ErrFenced when the lease
// moved on). Only the delta against what the root owns is written:
//   - new children are inserted (owner_id = root, root_id = the top root,
//     shard_id = shard_of(id)); changed ones updated (a spec change bumps
//     their generation); an orphaned child emitted again is re-adopted
//     (a finite frozen_until cleared, never a quarantine);
//   - each child's spec gets bootstrap value flows from upstreams that
//     already have status, then is validated against its kind's spec_schema:
//     a violation is a *ComposeError naming child and pointer;
//   - vanished children are pruned: orphan grace (frozen_until = now +
//     orphan_grace_secs) for kinds that have it, request_resource_deletion
//     for finalizer kinds and composites, a hard delete otherwise; a
//     quarantined child is left alone;
//   - the desired children's edges and the root's configs are reconciled;
//   - composed_gen = the task's generation, and the new, changed and
//     re-adopted children go through the gate (schedule_eligible), with
//     every dependent whose edge to a child went away (the edge dropped,
//     or its upstream hard-deleted): its gate may have opened.
//
// A root marked for deletion since the task was claimed gets nothing
// written (RootDeleting): its tree is being torn down. An edge to a
// resource outside the composition that is being deleted is refused with a
// transient *ComposeError (rule dependency_deleting): its teardown would
// wait for the new dependent forever. An edge to a child of the root that
// the composition no longer emits, so prunes, is refused for good (rule
// dependency_pruned).
func (s *Store) ApplyCompose(ctx context.Context, task Task, c Composition) (ComposeResult, error) {
	var res ComposeResult
	root := task.Key.ResourceID
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return res, wrap(err, "compose %s: begin", root)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// The batch statements below can be estimated above jit_above_cost on a
	// large table; compiling them costs far more than running them. Every
	// statement of a compose, and every foreign-key check its inserts fire,
	// reaches its rows by key (dbx.ByKeyOnlySQL, in the same round trip).
	if _, err := tx.Exec(ctx, `SET LOCAL jit = off; `+dbx.ByKeyOnlySQL); err != nil {
		return res, wrap(err, "compose %s: set planner options", root)
	}

	var gen int64
	err = tx.QueryRow(ctx, `
SELECT generation FROM work_queue
 WHERE shard_id = $1 AND resource_id = $2 AND task_type = 'reconcile'
   AND op_id = '00000000-0000-0000-0000-000000000000' AND claim_epoch = $3
   FOR KEY SHARE`, task.Key.ShardID, root, task.ClaimEpoch).Scan(&gen)
	if errors.Is(err, pgx.ErrNoRows) {
		return res, ErrFenced
	}
	if err != nil {
		return res, wrap(err, "compose %s: fence", root)
	}

	st, err := s.loadComposeState(ctx, tx, root)
	if err != nil {
		return res, err
	}
	if st.deleting {
		// Marked for deletion after this compose was claimed (the mark drops
		// only unleased tasks): its tree is being torn down, and a child
		// written now would be one the mark never saw — live, queued, and
		// keeping the root from ever being removed.
		res.RootDeleting = true
		return res, nil
	}
	plan, err := s.planCompose(ctx, tx, st, c)
	if err != nil {
		return res, err
	}
	if err := s.writeCompose(ctx, tx, st, plan, gen, &res); err != nil {
		return res, err
	}
	if err := tx.Commit(ctx); err != nil {
		return res, wrap(err, "compose %s: commit", root)
	}
	return res, nil
}
