package store

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
)

// BenchmarkExplainAndHistory measures what spec history adds to an apply (a
// spec change of one resource, history_limit 20 — every apply past the 20th
// also prunes one row — against history_limit 0), a dry run (the same
// apply, rolled back), and Explain of a composite root whose 10 000 children
// are all unsettled (the worst DESCENDANTS case: count and name the first 20).
// It prints one line:
//
//	bench-explain: apply_ms=<f> apply_nohistory_ms=<f> dryrun_ms=<f> explain_10k_ms=<f>
//
// Run: go test ./core/store -run '^$' -bench '^BenchmarkExplainAndHistory$' -benchtime 1x
func BenchmarkExplainAndHistory(b *testing.B) {
	ctx := context.Background()
	pool := benchPool(b)
	s := New(pool, nil)
	for _, m := range []string{vpcManifest, noopManifest} {
		if _, _, err := s.ApplyManifest(ctx, []byte(m)); err != nil {
			b.Fatal(err)
		}
	}
	const n = 300
	per := func(name string, dry bool) float64 {
		start := time.Now()
		for i := range n {
			spec := json.RawMessage(fmt.Sprintf(`{"cidr":"10.%d.%d.0/24"}`, i/256, i%256))
			if _, _, err := s.ApplyResource(ctx, ApplyResourceInput{Kind: "vpc", Name: name, Spec: spec, DryRun: dry}); err != nil {
				b.Fatal(err)
			}
		}
		return float64(time.Since(start).Microseconds()) / 1000 / n
	}
	if err := s.SetHistoryLimit(ctx, "vpc", "v1", 0); err != nil {
		b.Fatal(err)
	}
	without := per("nohistory", false)
	if err := s.SetHistoryLimit(ctx, "vpc", "v1", 20); err != nil {
		b.Fatal(err)
	}
	with := per("history", false)
	dry := per("history", true)

	root, err := uuid.NewV7()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO kind_config (kind, version, has_rollup) VALUES ('comp', 'v1', true)
		ON CONFLICT (kind, version) DO UPDATE SET has_rollup = true`); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO resources (id, kind, version, name, shard_id) VALUES ($1, 'comp', 'v1', 'root', shard_of($1))`,
		root); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO resources (id, kind, version, name, owner_id, root_id, shard_id)
		SELECT x.id, 'noop', 'v1', 'leaf-' || x.g, $1, $1, shard_of(x.id)
		  FROM (SELECT gen_random_uuid() AS id, g FROM generate_series(1, 10000) g) x`, root); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	const m = 20
	for range m {
		ws, err := s.Explain(ctx, root, 0)
		if err != nil || len(ws) == 0 || ws[0].Gate != GateDescendants || ws[0].BlockerCount != 10000 {
			b.Fatalf("explain: %v %+v", err, ws)
		}
	}
	explain := float64(time.Since(start).Microseconds()) / 1000 / m
	fmt.Fprintf(os.Stderr, "bench-explain: apply_ms=%.2f apply_nohistory_ms=%.2f dryrun_ms=%.2f explain_10k_ms=%.2f\n",
		with, without, dry, explain)
}
