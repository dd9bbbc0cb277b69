package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/core/store/internal/dbx"
)

// ProviderConfig is a runtime-editable config document of one consumer kind:
// the kind's default (at most one) or a named override a resource attaches
// with providerConfigRef.
type ProviderConfig struct {
	ID        uuid.UUID
	Kind      string
	Name      string
	IsDefault bool
	// Spec is the config document, validated against the kind's config_schema.
	Spec json.RawMessage
	// Data is the opaque bundle (nil = none).
	Data json.RawMessage
	// OwnerID is the composing root for a composer-produced config; nil for
	// a hand-authored one.
	OwnerID   *uuid.UUID
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ProviderConfigInput is a hand-authored config (owner_id stays NULL).
type ProviderConfigInput struct {
	Kind      string
	Name      string
	IsDefault bool
	Spec      json.RawMessage
	Data      json.RawMessage
}

// ProviderConfigListOptions filters and pages ListProviderConfigs.
type ProviderConfigListOptions struct {
	Kind      string
	Name      string
	IsDefault *bool
	Limit     int
	After     string
}

// ProviderConfigPage is one page of provider configs, newest first.
type ProviderConfigPage struct {
	Items      []ProviderConfig
	NextCursor string
}

const providerConfigColumns = `pc.id, pc.kind, pc.name, pc.is_default, pc.spec, pc.data, pc.owner_id, pc.created_at, pc.updated_at`

func scanProviderConfig(row pgx.Row, extra ...any) (ProviderConfig, error) {
	var pc ProviderConfig
	dest := []any{&pc.ID, &pc.Kind, &pc.Name, &pc.IsDefault, &pc.Spec, &pc.Data, &pc.OwnerID, &pc.CreatedAt, &pc.UpdatedAt}
	err := row.Scan(append(dest, extra...)...)
	return pc, err
}

// ApplyProviderConfig creates or updates the config (kind, name). The kind
// must be declared; spec must satisfy the config_schema of every applied
// version of the kind. A kind has at most one default: making a second one
// is ErrConflict naming the existing default. A composer-owned config cannot
// be edited by hand (ErrConflict). An apply that changes nothing writes
// nothing (Unchanged).
func (s *Store) ApplyProviderConfig(ctx context.Context, in ProviderConfigInput) (ProviderConfig, ApplyOutcome, error) {
	if err := validateName("name", in.Name); err != nil {
		return ProviderConfig{}, "", err
	}
	spec, err := jsonObject("spec", in.Spec)
	if err != nil {
		return ProviderConfig{}, "", err
	}
	data, err := jsonValue("data", in.Data)
	if err != nil {
		return ProviderConfig{}, "", err
	}
	what := fmt.Sprintf("providerconfig %s/%s", in.Kind, in.Name)
	var (
		pc      ProviderConfig
		outcome ApplyOutcome
	)
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		if err := s.validateConfigSpec(ctx, tx, in.Kind, spec); err != nil {
			return err
		}
		var owner *uuid.UUID
		err = tx.QueryRow(ctx, `SELECT owner_id FROM providerconfigs WHERE kind = $1 AND name = $2 FOR UPDATE`,
			in.Kind, in.Name).Scan(&owner)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return mapErr(err, what)
		}
		if owner != nil {
			return conflict("%s is owned by composition root %s: its composer manages it", what, owner)
		}
		if in.IsDefault {
			var other string
			err := tx.QueryRow(ctx, `SELECT name FROM providerconfigs WHERE kind = $1 AND is_default AND name <> $2`,
				in.Kind, in.Name).Scan(&other)
			if err == nil {
				return conflict("kind %s already has a default providerconfig %q: unset it first", in.Kind, other)
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return mapErr(err, what)
			}
		}
		var inserted bool
		pc, err = scanProviderConfig(tx.QueryRow(ctx, `
			INSERT INTO providerconfigs AS pc (kind, name, is_default, spec, data)
			VALUES ($1, $2, $3, $4::jsonb, $5::jsonb)
			ON CONFLICT (kind, name) DO UPDATE
			   SET is_default = EXCLUDED.is_default, spec = EXCLUDED.spec, data = EXCLUDED.data, updated_at = now()
			 WHERE (pc.is_default, pc.spec, pc.data) IS DISTINCT FROM (EXCLUDED.is_default, EXCLUDED.spec, EXCLUDED.data)
			RETURNING `+providerConfigColumns+`, xmax = 0`,
			in.Kind, in.Name, in.IsDefault, string(spec), data), &inserted)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			outcome = Unchanged
			pc, err = scanProviderConfig(tx.QueryRow(ctx,
				`SELECT `+providerConfigColumns+` FROM providerconfigs pc WHERE pc.kind = $1 AND pc.name = $2`,
				in.Kind, in.Name))
			return mapErr(err, what)
		case isConstraint(err, "providerconfigs_one_default"):
			return conflict("kind %s already has a default providerconfig: unset it first", in.Kind)
		case err != nil:
			return mapErr(err, what)
		case inserted:
			outcome = Created
		default:
			outcome = Configured
		}
		return nil
	})
	if err != nil {
		return ProviderConfig{}, "", err
	}
	return pc, outcome, nil
}

// validateConfigSpec checks spec against the config_schema of every applied
// version of kind (a providerconfig serves them all).
func (s *Store) validateConfigSpec(ctx context.Context, tx pgx.Tx, kind string, spec json.RawMessage) error {
	versions, err := s.kindVersions(ctx, tx, kind)
	if err != nil {
		return err
	}
	if len(versions) == 0 {
		return invalid("kind", "unknown_kind", "kind %q is not declared (apply its manifest first)", kind)
	}
	for _, v := range versions {
		e, err := s.kinds.get(ctx, tx, kind, v.version, v.gen, nil)
		if err != nil {
			return err
		}
		config, err := e.config()
		if err != nil {
			return err
		}
		if err := config.Validate(spec); err != nil {
			return schemaInvalid("spec", err)
		}
	}
	return nil
}

func isConstraint(err error, name string) bool { return dbx.IsConstraint(err, name) }

// GetProviderConfig returns the config (kind, name).
func (s *Store) GetProviderConfig(ctx context.Context, kind, name string) (ProviderConfig, error) {
	pc, err := scanProviderConfig(s.read.QueryRow(ctx,
		`SELECT `+providerConfigColumns+` FROM providerconfigs pc WHERE pc.kind = $1 AND pc.name = $2`, kind, name))
	return pc, mapErr(err, fmt.Sprintf("providerconfig %s/%s", kind, name))
}

// ListProviderConfigs returns one keyset page of configs ordered by
// (created_at DESC, id DESC), filtered by kind, name and default flag.
func (s *Store) ListProviderConfigs(ctx context.Context, opts ProviderConfigListOptions) (ProviderConfigPage, error) {
	limit, err := pageLimit(opts.Limit)
	if err != nil {
		return ProviderConfigPage{}, err
	}
	args := []any{limit + 1}
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	var where []string
	if opts.Kind != "" {
		where = append(where, "pc.kind = "+arg(opts.Kind))
	}
	if opts.Name != "" {
		where = append(where, "pc.name = "+arg(opts.Name))
	}
	if opts.IsDefault != nil {
		where = append(where, "pc.is_default = "+arg(*opts.IsDefault))
	}
	if opts.After != "" {
		k, err := decodeKeyset(opts.After)
		if err != nil {
			return ProviderConfigPage{}, err
		}
		where = append(where, fmt.Sprintf("(pc.created_at, pc.id) < (%s::timestamptz, %s::uuid)", arg(k.at), arg(k.id)))
	}
	sql := `SELECT ` + providerConfigColumns + ` FROM providerconfigs pc`
	if len(where) > 0 {
		sql += ` WHERE ` + strings.Join(where, " AND ")
	}
	sql += ` ORDER BY pc.created_at DESC, pc.id DESC LIMIT $1`
	rows, err := s.read.Query(ctx, sql, args...)
	if err != nil {
		return ProviderConfigPage{}, mapErr(err, "list providerconfigs")
	}
	items, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ProviderConfig, error) {
		return scanProviderConfig(row)
	})
	if err != nil {
		return ProviderConfigPage{}, mapErr(err, "list providerconfigs")
	}
	page := ProviderConfigPage{Items: items}
	if len(items) > limit {
		page.Items = items[:limit]
		last := page.Items[limit-1]
		page.NextCursor = encodeKeyset(last.CreatedAt, last.ID)
	}
	if page.Items == nil {
		page.Items = []ProviderConfig{}
	}
	return page, nil
}

// DeleteProviderConfig deletes the hand-authored config (kind, name).
// ErrNotFound when there is none; ErrConflict for a composer-owned config
// (its composer prunes it; it goes with its root, or is handed over as a
// hand-authored config while resources name it) and while resources name
// it.
func (s *Store) DeleteProviderConfig(ctx context.Context, kind, name string) error {
	what := fmt.Sprintf("providerconfig %s/%s", kind, name)
	return s.inTx(ctx, func(tx pgx.Tx) error {
		var id uuid.UUID
		var owner *uuid.UUID
		err := tx.QueryRow(ctx, `SELECT id, owner_id FROM providerconfigs WHERE kind = $1 AND name = $2 FOR UPDATE`,
			kind, name).Scan(&id, &owner)
		if err != nil {
			return mapErr(err, what)
		}
		if owner != nil {
			return conflict("%s is owned by composition root %s: it cannot be deleted by hand", what, owner)
		}
		if err := refusedWhileNamed(ctx, tx, kind, name, what); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM providerconfigs WHERE id = $1`, id); err != nil {
			return mapErr(err, what)
		}
		return nil
	})
}

// refusedWhileNamed refuses the delete of providerconfig kind/name while a
// resource names it (provider_config_ref): the resource would reconcile, and
// be torn down, with its kind's default config instead. An apply that names
// the config holds a share lock on its row until it commits, and the delete
// holds the row FOR UPDATE, so the two cannot interleave. One probe of the
// config-ref index (migration 00021); the refusal names up to three of the
// resources and how many there are, counted to a bound.
func refusedWhileNamed(ctx context.Context, tx pgx.Tx, kind, name, what string) error {
	const shown, counted = 3, 1000
	rows, err := tx.Query(ctx, `
SELECT r.name FROM resources r
 WHERE r.kind = $1 AND r.provider_config_ref = $2
 LIMIT $3`, kind, name, counted+1)
	if err != nil {
		return mapErr(err, what)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return mapErr(err, what)
	}
	if len(names) == 0 {
		return nil
	}
	slices.Sort(names) // the first ones read, in order: no sort of every match
	count := strconv.Itoa(len(names))
	if len(names) > counted {
		count = fmt.Sprintf("more than %d", counted)
	}
	list := make([]string, 0, shown)
	for _, n := range names[:min(shown, len(names))] {
		list = append(list, kind+"/"+n)
	}
	more := ""
	if len(names) > shown {
		more = ", …"
	}
	return conflict("%s is named by %s resource(s) (%s%s): they would run and be torn down with the kind's default config; "+
		"change their providerConfigRef or delete them first", what, count, strings.Join(list, ", "), more)
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

// DefaultProviderConfig reads kind's default providerconfig; ok is false when
// the kind has none.
func (s *Store) DefaultProviderConfig(ctx context.Context, kind string) (ProviderConfig, bool, error) {
	pc, err := scanProviderConfig(s.primary.QueryRow(ctx,
		`SELECT `+providerConfigColumns+` FROM providerconfigs pc WHERE pc.kind = $1 AND pc.is_default`, kind))
	if errors.Is(err, pgx.ErrNoRows) {
		return ProviderConfig{}, false, nil
	}
	if err != nil {
		return ProviderConfig{}, false, mapErr(err, "default providerconfig of "+kind)
	}
	return pc, true, nil
}
