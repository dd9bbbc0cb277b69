package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/core/manifest"
)

// ApplyOutcome says what an apply did.
type ApplyOutcome string

// The apply outcomes (kubectl's words).
const (
	Created    ApplyOutcome = "created"
	Configured ApplyOutcome = "configured"
	Unchanged  ApplyOutcome = "unchanged"
	// Migrated: an existing resource applied at another version of its kind.
	Migrated ApplyOutcome = "migrated"
)

// Kind is an applied kind manifest with its live operational config.
type Kind struct {
	Name    string
	Version string
	// Manifest is the decoded document (Version defaulted).
	Manifest manifest.KindManifest
	// Raw is the document as applied (stored as jsonb: key order and
	// whitespace are normalised, nothing is added or defaulted).
	Raw       json.RawMessage
	IsReactor bool
	// Config is the live kind_config row, not the manifest's seed.
	Config KindConfig
	// ManifestGen bumps on every change of the document.
	ManifestGen int64
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// KindConfig is a kind's runtime-editable operational policy (kind_config).
type KindConfig struct {
	MaxInflight        int
	TaskDeadlineSecs   int
	ResyncIntervalSecs int
	ResyncRecomposes   bool
	OrphanGraceSecs    int
	// MaxTransientAttempts: a reconcile failing transiently this many times
	// in a row is dead-lettered (terminal); 0 = never.
	MaxTransientAttempts int
	UpdatedAt            time.Time
}

// KindConfigPatch is a partial update of a KindConfig: nil fields are kept.
type KindConfigPatch struct {
	MaxInflight        *int
	TaskDeadlineSecs   *int
	ResyncIntervalSecs *int
	ResyncRecomposes   *bool
	OrphanGraceSecs    *int
	// MaxTransientAttempts: the dead-letter bound (0 = never).
	MaxTransientAttempts *int
}

const kindColumns = `m.kind, m.version, m.manifest, m.manifest_gen, m.is_reactor, m.created_at, m.updated_at,
	coalesce(c.max_inflight, 0), coalesce(c.task_deadline_secs, 0), coalesce(c.resync_interval_secs, 0),
	coalesce(c.resync_recomposes, false), coalesce(c.orphan_grace_secs, 0), coalesce(c.updated_at, m.updated_at),
	coalesce(c.max_transient_attempts, 0)`

const kindFrom = `kind_manifest m LEFT JOIN kind_config c ON c.kind = m.kind AND c.version = m.version`

func (s *Store) scanKind(ctx context.Context, q querier, row pgx.Row) (Kind, error) {
	var k Kind
	var raw []byte
	err := row.Scan(&k.Name, &k.Version, &raw, &k.ManifestGen, &k.IsReactor, &k.CreatedAt, &k.UpdatedAt,
		&k.Config.MaxInflight, &k.Config.TaskDeadlineSecs, &k.Config.ResyncIntervalSecs,
		&k.Config.ResyncRecomposes, &k.Config.OrphanGraceSecs, &k.Config.UpdatedAt, &k.Config.MaxTransientAttempts)
	if err != nil {
		return Kind{}, err
	}
	e, err := s.kinds.get(ctx, q, k.Name, k.Version, k.ManifestGen, raw)
	if err != nil {
		return Kind{}, err
	}
	k.Raw = json.RawMessage(raw)
	k.Manifest = e.manifest
	return k, nil
}

// ApplyManifest validates raw (the legality lattice and its schemas) and
// upserts it by (kind, version). manifest_gen bumps only when the document
// changed (jsonb equality: a re-apply differing only in whitespace or key
// order is Unchanged and writes nothing). The kind_config seed and the
// kind_manifest_changed NOTIFY come from the table's trigger.
//
// The schema-stability gate: re-applying an existing (kind, version) whose
// spec_schema changed validates every stored resource of it against the new
// schema (checkSchemaStable) and refuses the apply with a
// *BreakingChangeError naming them when any would be rejected or carries a
// required field the new schema drops — unless opts.AcceptBreaking. A new
// version has no resources yet, so its spec_schema is never gated; its
// config_schema is, as a changed one is: every stored providerconfig of the
// kind must satisfy it (gateConfigSchema), since a providerconfig serves
// every version.
func (s *Store) ApplyManifest(ctx context.Context, raw []byte) (Kind, ApplyOutcome, error) {
	return s.ApplyManifestWith(ctx, raw, ManifestApplyOptions{})
}

// ManifestApplyOptions are the owner's explicit choices for one apply.
type ManifestApplyOptions struct {
	// AcceptBreaking applies a spec_schema change the stored resources
	// would fail (they keep their specs; their next edit must satisfy it).
	AcceptBreaking bool
}

// ApplyManifestWith is ApplyManifest with the owner's options.
func (s *Store) ApplyManifestWith(ctx context.Context, raw []byte, opts ManifestApplyOptions) (Kind, ApplyOutcome, error) {
	m, err := manifest.Parse(raw)
	if err != nil {
		var ve *manifest.ValidationError
		if errors.As(err, &ve) {
			return Kind{}, "", &InvalidError{Field: "manifest" + ve.Pointer, Rule: ve.Rule, Message: ve.Message}
		}
		return Kind{}, "", invalid("manifest", manifest.RuleMalformed, "%v", err)
	}
	kv := m.KindVersion()
	var (
		k       Kind
		outcome = Unchanged
	)
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		if err := gateReactorSwitch(ctx, tx, kv, m.IsReactor()); err != nil {
			return err
		}
		if !opts.AcceptBreaking {
			if err := gateManifest(ctx, tx, kv, m.SpecSchema); err != nil {
				return err
			}
			if err := gateConfigSchema(ctx, tx, kv, m.ConfigSchema); err != nil {
				return err
			}
		}
		var inserted bool
		err := tx.QueryRow(ctx, `
			INSERT INTO kind_manifest AS m (kind, version, manifest, manifest_gen)
			VALUES ($1, $2, $3::jsonb,
			        coalesce((SELECT g.last_gen FROM kind_manifest_generations g WHERE g.kind = $1 AND g.version = $2), 0) + 1)
			ON CONFLICT (kind, version) DO UPDATE
			   SET manifest = EXCLUDED.manifest, manifest_gen = m.manifest_gen + 1, updated_at = now()
			 WHERE m.manifest IS DISTINCT FROM EXCLUDED.manifest
			RETURNING xmax = 0`, kv.Kind, kv.Version, string(raw)).Scan(&inserted)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			outcome = Unchanged
		case err != nil:
			return mapErr(err, "kind "+kv.String())
		case inserted:
			outcome = Created
		default:
			outcome = Configured
		}
		k, err = s.scanKind(ctx, tx, tx.QueryRow(ctx,
			`SELECT `+kindColumns+` FROM `+kindFrom+` WHERE m.kind = $1 AND m.version = $2`, kv.Kind, kv.Version))
		return mapErr(err, "kind "+kv.String())
	})
	if err != nil {
		return Kind{}, "", err
	}
	return k, outcome, nil
}

// GetKind returns one kind. An empty version means the kind's only version:
// ErrInvalid (field "version") when it has several.
func (s *Store) GetKind(ctx context.Context, kind, version string) (Kind, error) {
	return s.getKind(ctx, s.read, kind, version)
}

func (s *Store) getKind(ctx context.Context, q querier, kind, version string) (Kind, error) {
	if version != "" {
		k, err := s.scanKind(ctx, q, q.QueryRow(ctx,
			`SELECT `+kindColumns+` FROM `+kindFrom+` WHERE m.kind = $1 AND m.version = $2`, kind, version))
		return k, mapErr(err, fmt.Sprintf("kind %s/%s", kind, version))
	}
	kinds, err := s.listKinds(ctx, q, kind)
	if err != nil {
		return Kind{}, err
	}
	switch len(kinds) {
	case 0:
		return Kind{}, notFound("kind %s not found", kind)
	case 1:
		return kinds[0], nil
	}
	versions := make([]string, len(kinds))
	for i, k := range kinds {
		versions[i] = k.Version
	}
	return Kind{}, invalid("version", "version_required",
		"kind %s has versions %s: name one", kind, strings.Join(versions, ", "))
}

// ListKinds returns every applied kind, by kind then version.
func (s *Store) ListKinds(ctx context.Context) ([]Kind, error) {
	return s.listKinds(ctx, s.read, "")
}

func (s *Store) listKinds(ctx context.Context, q querier, kind string) ([]Kind, error) {
	rows, err := q.Query(ctx, `SELECT `+kindColumns+` FROM `+kindFrom+`
		WHERE $1 = '' OR m.kind = $1 ORDER BY m.kind, m.version`, kind)
	if err != nil {
		return nil, mapErr(err, "list kinds")
	}
	defer rows.Close()
	var out []Kind
	for rows.Next() {
		k, err := s.scanKind(ctx, q, rows)
		if err != nil {
			return nil, mapErr(err, "list kinds")
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(err, "list kinds")
	}
	return out, nil
}

// UpdateKindConfig edits a kind's live operational policy; nil patch fields
// are kept. Every value must be ≥ 0. An empty version means the kind's only
// version. ErrNotFound for an unknown kind. A later re-apply of the manifest
// never overwrites these values (the seed is insert-if-absent).
func (s *Store) UpdateKindConfig(ctx context.Context, kind, version string, p KindConfigPatch) (KindConfig, error) {
	for _, f := range []struct {
		name string
		v    *int
	}{
		{"maxInflight", p.MaxInflight},
		{"taskDeadlineSecs", p.TaskDeadlineSecs},
		{"resyncIntervalSecs", p.ResyncIntervalSecs},
		{"orphanGraceSecs", p.OrphanGraceSecs},
		{"maxTransientAttempts", p.MaxTransientAttempts},
	} {
		if f.v != nil && (*f.v < 0 || *f.v > math.MaxInt32) {
			return KindConfig{}, invalid(f.name, "policy_invalid", "must be a non-negative integer ≤ %d, got %d", math.MaxInt32, *f.v)
		}
	}
	if version == "" {
		k, err := s.getKind(ctx, s.primary, kind, "")
		if err != nil {
			return KindConfig{}, err
		}
		version = k.Version
	}
	var c KindConfig
	err := s.primary.QueryRow(ctx, `
		UPDATE kind_config SET
			max_inflight         = coalesce($3, max_inflight),
			task_deadline_secs   = coalesce($4, task_deadline_secs),
			resync_interval_secs = coalesce($5, resync_interval_secs),
			resync_recomposes    = coalesce($6, resync_recomposes),
			orphan_grace_secs    = coalesce($7, orphan_grace_secs),
			max_transient_attempts = coalesce($8, max_transient_attempts),
			updated_at           = now()
		WHERE kind = $1 AND version = $2
		  AND EXISTS (SELECT 1 FROM kind_manifest m WHERE m.kind = $1 AND m.version = $2)
		RETURNING max_inflight, task_deadline_secs, resync_interval_secs, resync_recomposes, orphan_grace_secs,
		          updated_at, max_transient_attempts`,
		kind, version, p.MaxInflight, p.TaskDeadlineSecs, p.ResyncIntervalSecs, p.ResyncRecomposes, p.OrphanGraceSecs,
		p.MaxTransientAttempts,
	).Scan(&c.MaxInflight, &c.TaskDeadlineSecs, &c.ResyncIntervalSecs, &c.ResyncRecomposes, &c.OrphanGraceSecs,
		&c.UpdatedAt, &c.MaxTransientAttempts)
	if err != nil {
		return KindConfig{}, mapErr(err, fmt.Sprintf("kind %s/%s", kind, version))
	}
	return c, nil
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
