package pipeline

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store/internal/schemacache"
)

// DrainOutboxBatch applies up to limit outbox results in shards [lo, hi]
// (drain_outbox_batch) in one transaction and returns how many it popped; a
// full batch means there may be more. The pops go partition by partition
// (each statement prunes to one), starting at a random partition of the
// range so none starves; the results are then applied as one batch behind
// one sorted lock pass, so concurrent drainers cannot deadlock.
//
// Value flows write upstream statuses into dependents' specs, and a spec
// must satisfy its kind's spec_schema, which only Go can check: the batch's
// transaction stays open while the specs the drain substituted for kinds
// with a schema are validated (drain_value_flows names them). A spec the
// schema refuses rolls the batch back, and it is drained again with the
// refusals, which the drain records as the dependents' terminal failures
// instead of writing the values. A batch with no such substitution costs
// the transaction's BEGIN and COMMIT beside its one statement; one with
// some, their specs in the drain's answer, each checked against its cached
// schema (no row is read again).
func (s *Store) DrainOutboxBatch(ctx context.Context, limit, lo, hi int) (int, error) {
	var refused []flowRefusal
	for pass := 1; ; pass++ {
		n, more, err := s.drainPass(ctx, limit, lo, hi, refused)
		if err != nil || len(more) == 0 {
			return n, err
		}
		if pass == maxFlowPasses {
			return 0, fmt.Errorf("drain outbox batch (shards %d-%d): value flows refused by their schemas on each of %d passes (%d refusals)",
				lo, hi, pass, len(refused)+len(more))
		}
		refused = append(refused, more...)
	}
}

// maxFlowPasses bounds the passes of one drain batch whose value flows
// keep being refused: each pass adds a refusal, and a batch is bounded, so
// only a batch that changes under it (other results arriving) needs more
// than two.
const maxFlowPasses = 8

// flowRefusal is a dependent's substituted spec its schema refused, as
// drain_value_flows reads it from converge.value_flow_refused.
type flowRefusal struct {
	ID      uuid.UUID `json:"id"`
	SpecMD5 string    `json:"spec_md5"`
	Message string    `json:"message"`
}

// drainPass drains one batch with the refusals so far, and returns the new
// refusals its value flows met: non-empty, the pass was rolled back.
func (s *Store) drainPass(ctx context.Context, limit, lo, hi int, refused []flowRefusal) (int, []flowRefusal, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, nil, wrap(err, "drain outbox batch (shards %d-%d): begin", lo, hi)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if len(refused) > 0 {
		doc, _ := json.Marshal(refused) // uuids and strings: always marshals
		if _, err := tx.Exec(ctx, `SELECT set_config('converge.value_flow_refused', $1, true)`, string(doc)); err != nil {
			return 0, nil, wrap(err, "drain outbox batch (shards %d-%d): refusals", lo, hi)
		}
	}
	var n int
	var checks *string
	// The subquery runs the drain before the outer list reads the setting
	// it leaves (a volatile call in a subquery with OFFSET 0 is not pulled up).
	err = tx.QueryRow(ctx, `
SELECT d.n, current_setting('converge.value_flow_checks', true)
  FROM (SELECT drain_outbox_batch($1, $2, $3, coalesce($4::timestamptz, now())) AS n OFFSET 0) d`,
		limit, lo, hi, s.now()).Scan(&n, &checks)
	if err != nil {
		return 0, nil, wrap(err, "drain outbox batch (shards %d-%d)", lo, hi)
	}
	if checks != nil && *checks != "" {
		more, err := s.checkFlowedSpecs(ctx, tx, *checks)
		if err != nil || len(more) > 0 {
			return 0, more, wrap(err, "drain outbox batch (shards %d-%d): check flowed specs", lo, hi)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, nil, wrap(err, "drain outbox batch (shards %d-%d): commit", lo, hi)
	}
	return n, nil, nil
}

// checkFlowedSpecs validates the specs a drain just substituted against
// their kinds' spec schemas, and returns a refusal for each that fails.
// checks is drain_value_flows' converge.value_flow_checks: a JSON array of
// [id, kind, version, manifest_gen, spec], the new specs as Postgres printed
// them (so their md5 is the one drain_value_flows compares when it meets the
// same substitution again).
func (s *Store) checkFlowedSpecs(ctx context.Context, tx pgx.Tx, checks string) ([]flowRefusal, error) {
	items, err := parseFlowChecks(checks)
	if err != nil {
		return nil, fmt.Errorf("read converge.value_flow_checks: %w", err)
	}
	var out []flowRefusal
	for _, it := range items {
		sc, err := s.specSchema(ctx, tx, it.kind, it.version, it.gen)
		if err != nil {
			return nil, err
		}
		verr := sc.Validate(it.spec)
		if verr == nil {
			continue
		}
		msg, err := refusedFlowMessage(ctx, tx, it.id, verr)
		if err != nil {
			return nil, err
		}
		sum := md5.Sum(it.spec)
		out = append(out, flowRefusal{ID: it.id, SpecMD5: hex.EncodeToString(sum[:]), Message: msg})
	}
	return out, nil
}

// specSchema is the compiled spec_schema of kind/version at manifest
// generation gen: the cached one, or read and compiled on a miss.
func (s *Store) specSchema(ctx context.Context, tx pgx.Tx, kind, version string, gen int64) (*manifest.Schema, error) {
	if sc, ok := s.schemas.Lookup(kind, version, schemacache.Spec, gen); ok {
		return sc, nil
	}
	var raw json.RawMessage
	if err := tx.QueryRow(ctx, `SELECT manifest->'spec_schema' FROM kind_manifest WHERE kind = $1 AND version = $2`,
		kind, version).Scan(&raw); err != nil {
		return nil, fmt.Errorf("kind %s/%s: read spec_schema: %w", kind, version, err)
	}
	sc, err := s.schemas.Schema(kind, version, schemacache.Spec, gen, raw)
	if err != nil {
		return nil, fmt.Errorf("kind %s/%s: spec_schema: %w", kind, version, err)
	}
	return sc, nil
}

// refusedFlowMessage words a refused substitution: the value flow whose
// dep_field the violation lies in (or under), the upstream it comes from,
// and the violation; every flow into the dependent when none matches.
func refusedFlowMessage(ctx context.Context, tx pgx.Tx, dependent uuid.UUID, verr error) (string, error) {
	pointer := ""
	var se *manifest.SchemaError
	if errors.As(verr, &se) && len(se.Violations) > 0 {
		pointer = se.Violations[0].Pointer
	}
	rows, err := tx.Query(ctx, `
SELECT u.kind, u.name, f.src_field, f.dep_field
  FROM resource_deps d
  JOIN resources u ON u.id = d.dependency_id
 CROSS JOIN LATERAL jsonb_to_recordset(d.value_flows) AS f(src_field text, dep_field text)
 WHERE d.dependent_id = $1
 ORDER BY u.kind, u.name, f.dep_field`, dependent)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var all []string
	for rows.Next() {
		var kind, name, src, dep string
		if err := rows.Scan(&kind, &name, &src, &dep); err != nil {
			return "", err
		}
		flow := fmt.Sprintf("%s/%s %s → %s", kind, name, src, dep)
		if pointer != "" && (pointer == dep || strings.HasPrefix(pointer, dep+"/") || strings.HasPrefix(dep, pointer+"/")) {
			return fmt.Sprintf("value flow %s: %v", flow, verr), nil
		}
		all = append(all, flow)
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	return fmt.Sprintf("value flows %s: %v", strings.Join(all, ", "), verr), nil
}

// DrainRollupRechecks re-runs the rollup gate for up to limit armed roots in
// shards [lo, hi] (drain_rollup_rechecks) and returns how many pended.
func (s *Store) DrainRollupRechecks(ctx context.Context, limit, lo, hi int) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT drain_rollup_rechecks($1, $2, $3, coalesce($4::timestamptz, now()))`,
		limit, lo, hi, s.now()).Scan(&n)
	return n, wrap(err, "drain rollup rechecks (shards %d-%d)", lo, hi)
}

// NotifyWorkReady sends work_ready in a statement of its own, outside any
// drain transaction and outside notify_gated's window. The drainer calls it
// after a drain commits: the gated NOTIFY inside the drain is decided when
// the drain runs, so a drain whose transaction commits after the window's
// winner could otherwise leave its pends unannounced until a dispatcher's
// idle poll. The caller coalesces (core/control's drainer sends at most one
// per ~20 ms per process, always with a trailing edge).
func (s *Store) NotifyWorkReady(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, `SELECT pg_notify('work_ready', '')`)
	return wrap(err, "notify work_ready")
}

// OutboxLag is how long the oldest result in shards [lo, hi] has waited in
// work_outbox for the drain (outbox_lag): 0 when none waits. The brokers'
// claims pace themselves on it (the dispatcher's drain-lag bound). One
// index probe a partition of the range, however long the backlog.
func (s *Store) OutboxLag(ctx context.Context, lo, hi int) (time.Duration, error) {
	var us int64
	err := s.pool.QueryRow(ctx, `SELECT outbox_lag($1, $2, coalesce($3::timestamptz, now()))`, lo, hi, s.now()).Scan(&us)
	if err != nil {
		return 0, wrap(err, "read the outbox's lag (shards %d-%d)", lo, hi)
	}
	return time.Duration(us) * time.Microsecond, nil
}
