package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// fixtureKinds are the kinds loadFixture spreads rows over, with their share
// per thousand rows. "bom" rows are composition roots; every other row is a
// composed child of the bom root of its block of 50.
var fixtureKinds = []struct {
	kind     string
	perMille int
}{
	{"bom", 20}, {"account", 80}, {"vpc", 200}, {"subnet", 400}, {"route", 200}, {"tgw", 100},
}

// applyFixtureKinds applies a minimal manifest for each fixture kind.
func applyFixtureKinds(ctx context.Context, s *Store) error {
	for _, k := range fixtureKinds {
		raw := fmt.Sprintf(`{"kind":%q,"reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`, k.kind)
		if _, _, err := s.ApplyManifest(ctx, []byte(raw)); err != nil {
			return fmt.Errorf("apply fixture kind %s: %w", k.kind, err)
		}
	}
	return nil
}

// loadFixture bulk-loads rows [from, to) with INSERT … SELECT over
// generate_series, standing in for a long-lived fleet: rows are composed
// children of a root (every 50th row), spread over the fixture kinds, with
// labels {team: t0..t999, env: prod|dev}, created four to a millisecond (so
// the id tie-break of the keyset order is exercised), in this phase mix:
//
//	Ready 87%, Reconciling 6%, Degraded 3%, Failed 2%, Orphaned 1%,
//	Deleting 0.95%, Quarantined 0.05%
//
// The status scalars are written directly: this is a fixture, not the
// runtime. from must be a multiple of 50 so each block's root is in its
// statement.
func loadFixture(ctx context.Context, pool *pgxpool.Pool, from, to int) error {
	// Children spread over the non-root kinds in proportion to their share.
	kindCase := "CASE"
	total := 0
	for _, k := range fixtureKinds[1:] {
		total += k.perMille
	}
	acc := 0
	for _, k := range fixtureKinds[1:] {
		acc += k.perMille
		kindCase += fmt.Sprintf(" WHEN g %% %d < %d THEN '%s'", total, acc, k.kind)
	}
	kindCase += " END"
	_, err := pool.Exec(ctx, `
		WITH s AS (
			SELECT g,
			       md5('r' || g)::uuid AS id,
			       CASE WHEN g % 50 = 0 THEN 'bom' ELSE `+kindCase+` END AS kind,
			       (g::bigint * 7919 % 10000)::int AS h
			  FROM generate_series($1::int, $2::int - 1) g
		)
		INSERT INTO resources (id, kind, version, name, labels, spec, generation, synced_gen, health_ok,
		                       failure_gen, frozen_until, deletion_requested_at, owner_id, root_id, shard_id, created_at)
		SELECT id, kind, 'v1', kind || '-' || g,
		       jsonb_build_object('team', 't' || (g % 1000), 'env', CASE WHEN g % 3 = 0 THEN 'prod' ELSE 'dev' END),
		       jsonb_build_object('cidr', '10.' || (g / 65536 % 256) || '.' || (g / 256 % 256) || '.0/24', 'size', g % 10),
		       CASE WHEN h >= 8700 AND h < 9300 OR h >= 9600 AND h < 9800 THEN 2 ELSE 1 END,
		       1,
		       NOT (h >= 9300 AND h < 9600),
		       CASE WHEN h >= 9600 AND h < 9800 THEN 2 ELSE 0 END,
		       CASE WHEN h >= 9800 AND h < 9900 THEN timestamptz '2030-01-01'
		            WHEN h >= 9995 THEN 'infinity'::timestamptz END,
		       CASE WHEN h >= 9900 AND h < 9995 THEN timestamptz '2024-01-01' END,
		       CASE WHEN g % 50 <> 0 THEN md5('r' || (g / 50 * 50))::uuid END,
		       CASE WHEN g % 50 <> 0 THEN md5('r' || (g / 50 * 50))::uuid END,
		       shard_of(id),
		       timestamptz '2024-01-01' + (g / 4) * interval '1 millisecond'
		  FROM s`, from, to)
	if err != nil {
		return fmt.Errorf("load fixture rows %d-%d: %w", from, to, err)
	}
	return nil
}
