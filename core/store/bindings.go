package store

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/core/manifest"
)

// ReactorBinding subscribes a reactor kind to a watched kind's lifecycle
// transition: the only place a transition is wired.
type ReactorBinding struct {
	Name       string
	WatchKind  string
	Transition manifest.Transition
	Reactor    string
	// LabelMatch selects the watched resources whose labels contain it
	// (empty = all).
	LabelMatch map[string]string
	Enabled    bool
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// ReactorBindingInput is the desired state of a binding (a full replace).
type ReactorBindingInput struct {
	Name       string
	WatchKind  string
	Transition manifest.Transition
	Reactor    string
	LabelMatch map[string]string
	// Enabled defaults to true.
	Enabled *bool
}

const bindingColumns = `b.name, b.watch_kind, b.transition, b.reactor, b.label_match, b.enabled, b.created_at, b.updated_at`

func scanBinding(row pgx.Row, extra ...any) (ReactorBinding, error) {
	var b ReactorBinding
	var transition string
	dest := []any{&b.Name, &b.WatchKind, &transition, &b.Reactor, &b.LabelMatch, &b.Enabled, &b.CreatedAt, &b.UpdatedAt}
	if err := row.Scan(append(dest, extra...)...); err != nil {
		return ReactorBinding{}, err
	}
	b.Transition = manifest.Transition(transition)
	if b.LabelMatch == nil {
		b.LabelMatch = map[string]string{}
	}
	return b, nil
}

// ApplyReactorBinding creates or updates the binding name. watchKind must be
// a declared kind that owns resources (not a reactor); reactor must be a
// registered reactor kind other than watchKind; transition must be one of
// manifest.AllTransitions; labelMatch must hold valid label keys and values.
// An apply that changes nothing writes nothing (Unchanged). Disabling a
// binding drops its pending deliveries, re-pointing it those it no longer
// selects, in the same transaction (claimed ones finish).
func (s *Store) ApplyReactorBinding(ctx context.Context, in ReactorBindingInput) (ReactorBinding, ApplyOutcome, error) {
	if err := validateName("name", in.Name); err != nil {
		return ReactorBinding{}, "", err
	}
	if !in.Transition.Valid() {
		names := make([]string, len(manifest.AllTransitions))
		for i, t := range manifest.AllTransitions {
			names[i] = string(t)
		}
		return ReactorBinding{}, "", invalid("transition", "transition_unknown",
			"unknown transition %q (one of %s)", in.Transition, strings.Join(names, ", "))
	}
	if err := validateLabels("labelMatch", in.LabelMatch); err != nil {
		return ReactorBinding{}, "", err
	}
	if in.WatchKind == in.Reactor {
		return ReactorBinding{}, "", invalid("reactor", "reactor_watches_itself",
			"a reactor cannot watch its own kind %q", in.Reactor)
	}
	enabled := true
	if in.Enabled != nil {
		enabled = *in.Enabled
	}
	var (
		b       ReactorBinding
		outcome ApplyOutcome
	)
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		watched, err := s.kindVersions(ctx, tx, in.WatchKind)
		if err != nil {
			return err
		}
		if len(watched) == 0 {
			return invalid("watchKind", "unknown_kind", "kind %q is not declared (apply its manifest first)", in.WatchKind)
		}
		if allReactor(watched) {
			return invalid("watchKind", "reactor_kind",
				"kind %s is a reactor: it owns no resources, so it has no transitions to watch", in.WatchKind)
		}
		reactor, err := s.kindVersions(ctx, tx, in.Reactor)
		if err != nil {
			return err
		}
		if len(reactor) == 0 || !allReactor(reactor) {
			return invalid("reactor", "not_a_reactor",
				"%q is not a registered reactor kind (a kind whose manifest declares only reactor reactions)", in.Reactor)
		}
		// A disabled binding fires nothing, and a re-pointed one only what it
		// selects now.
		if err := dropUnselectedDeliveries(ctx, tx, in, enabled); err != nil {
			return err
		}
		var inserted bool
		b, err = scanBinding(tx.QueryRow(ctx, `
			INSERT INTO reactor_bindings AS b (name, watch_kind, transition, reactor, label_match, enabled)
			VALUES ($1, $2, $3, $4, $5::jsonb, $6)
			ON CONFLICT (name) DO UPDATE
			   SET watch_kind = EXCLUDED.watch_kind, transition = EXCLUDED.transition, reactor = EXCLUDED.reactor,
			       label_match = EXCLUDED.label_match, enabled = EXCLUDED.enabled, updated_at = now()
			 WHERE (b.watch_kind, b.transition, b.reactor, b.label_match, b.enabled)
			       IS DISTINCT FROM (EXCLUDED.watch_kind, EXCLUDED.transition, EXCLUDED.reactor,
			                         EXCLUDED.label_match, EXCLUDED.enabled)
			RETURNING `+bindingColumns+`, xmax = 0`,
			in.Name, in.WatchKind, string(in.Transition), in.Reactor, nonNilLabels(in.LabelMatch), enabled), &inserted)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			outcome = Unchanged
			b, err = scanBinding(tx.QueryRow(ctx, `SELECT `+bindingColumns+` FROM reactor_bindings b WHERE b.name = $1`, in.Name))
			return mapErr(err, "reactor binding "+in.Name)
		case err != nil:
			return mapErr(err, "reactor binding "+in.Name)
		case inserted:
			outcome = Created
		default:
			outcome = Configured
		}
		return nil
	})
	if err != nil {
		return ReactorBinding{}, "", err
	}
	return b, outcome, nil
}

func allReactor(versions []kindVersionRow) bool {
	for _, v := range versions {
		if !v.isReactor {
			return false
		}
	}
	return len(versions) > 0
}

// GetReactorBinding returns the binding name.
func (s *Store) GetReactorBinding(ctx context.Context, name string) (ReactorBinding, error) {
	b, err := scanBinding(s.read.QueryRow(ctx, `SELECT `+bindingColumns+` FROM reactor_bindings b WHERE b.name = $1`, name))
	return b, mapErr(err, "reactor binding "+name)
}

// ListReactorBindings returns the bindings, by name, optionally filtered by
// watched kind and reactor ("" = any). Bindings are few (operator-authored):
// the list is not paginated.
func (s *Store) ListReactorBindings(ctx context.Context, watchKind, reactor string) ([]ReactorBinding, error) {
	rows, err := s.read.Query(ctx, `SELECT `+bindingColumns+` FROM reactor_bindings b
		WHERE ($1 = '' OR b.watch_kind = $1) AND ($2 = '' OR b.reactor = $2)
		ORDER BY b.name`, watchKind, reactor)
	if err != nil {
		return nil, mapErr(err, "list reactor bindings")
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ReactorBinding, error) { return scanBinding(row) })
	if err != nil {
		return nil, mapErr(err, "list reactor bindings")
	}
	if out == nil {
		out = []ReactorBinding{}
	}
	return out, nil
}

// DeleteReactorBinding deletes the binding name and its pending deliveries
// (claimed ones finish); ErrNotFound when absent.
func (s *Store) DeleteReactorBinding(ctx context.Context, name string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if err := dropPendingDeliveries(ctx, tx, name); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM reactor_bindings WHERE name = $1`, name)
		if err != nil {
			return mapErr(err, "reactor binding "+name)
		}
		if tag.RowsAffected() == 0 {
			return notFound("reactor binding %s not found", name)
		}
		return nil
	})
}

// dropUnselectedDeliveries deletes, before the binding in.Name is
// written, the unclaimed lifecycle_outbox rows it will no longer select:
// all of them when it is disabled, else those of another reactor, watched
// kind or transition than in's, or whose snapshot's labels in's selector
// does not match. Read through the current reactor's pending index; rows
// of an older reactor, or that a claim lapses into later, are dropped by
// the claim that meets them (lifecycle_claim).
func dropUnselectedDeliveries(ctx context.Context, tx pgx.Tx, in ReactorBindingInput, enabled bool) error {
	_, err := tx.Exec(ctx, `
DELETE FROM lifecycle_outbox l
 USING reactor_bindings b
 WHERE b.name = $1 AND l.reactor = b.reactor AND l.binding_name = b.name AND l.worker_id IS NULL
   AND NOT ($2 AND l.reactor = $3 AND l.watch_kind = $4 AND l.transition = $5
            AND coalesce(l.snapshot->'labels', '{}') @> $6::jsonb)`,
		in.Name, enabled, in.Reactor, in.WatchKind, string(in.Transition), nonNilLabels(in.LabelMatch))
	return mapErr(err, "drop the pending deliveries reactor binding "+in.Name+" no longer selects")
}

// dropPendingDeliveries deletes the unclaimed lifecycle_outbox rows of the
// binding name, read through its reactor's pending index: a disabled or
// deleted binding's backlog goes with it, not one claim batch at a time.
// Rows a transition commits beside the disable, and claims that lapse after
// it, are dropped by the claim that meets them (lifecycle.Store.Claim).
func dropPendingDeliveries(ctx context.Context, tx pgx.Tx, name string) error {
	_, err := tx.Exec(ctx, `
DELETE FROM lifecycle_outbox l
 USING reactor_bindings b
 WHERE b.name = $1 AND l.reactor = b.reactor AND l.binding_name = b.name AND l.worker_id IS NULL`, name)
	return mapErr(err, "drop the pending deliveries of reactor binding "+name)
}
