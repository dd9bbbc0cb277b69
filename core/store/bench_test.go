package store

import (
	"cmp"
	"context"
	"crypto/md5"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/db/pgtest"
)

// benchSettings are the server settings of the benchmark's private cluster:
// a production-like configuration for a small machine, durability on.
var benchSettings = map[string]string{
	"shared_buffers":       "2GB",
	"effective_cache_size": "8GB",
	"work_mem":             "16MB",
	"maintenance_work_mem": "512MB",
	"max_wal_size":         "8GB",
	"checkpoint_timeout":   "30min",
	"random_page_cost":     "1.1",
	"jit":                  "off",
}

// BenchmarkStore loads BENCH_ROWS resources (default 1,000,000) into a
// private Postgres and measures the latency of the API's hot reads through
// the store: the first page, deep pages by cursor (also of one kind+phase and
// of one owner), phase-filtered pages (a rare phase, a union), label-filtered
// pages (a 0.1% label and a 33% label), a label rare within a kind (zone=a:
// every vpc and one subnet in 997, listed within the subnets from deep
// cursors: every page starved, its three statements summed) and phase
// counts; each figure is the worst p99 of its group. Latency is server-side: Postgres's planning +
// execution time of the statement the store runs. It prints one line:
//
//	bench-store: rows=<n> reconciling=<f> first_p99_ms=<f> deep_p99_ms=<f> kind_ready_deep_p99_ms=<f> phase_p99_ms=<f> label_p99_ms=<f> label_in_kind_p99_ms=<f> counts_p99_ms=<f>
//
// BENCH_RECONCILING=0.6 puts the newest 60% of the rows back to Reconciling
// before measuring (the fixture alone has ~5%).
//
// Run: go test ./core/store -run '^$' -bench '^BenchmarkStore$' -benchtime 1x -timeout 60m
func BenchmarkStore(b *testing.B) {
	n := 1000000
	if v := os.Getenv("BENCH_ROWS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1000 {
			b.Fatalf("BENCH_ROWS=%q: want an integer ≥ 1000", v)
		}
	}
	n = n / 50 * 50
	ctx := context.Background()
	b.StopTimer()

	pool := benchPool(b)
	s := New(pool, nil)
	if err := applyFixtureKinds(ctx, s); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	const chunk = 100000
	for from := 0; from < n; from += chunk {
		if err := loadFixture(ctx, pool, from, min(from+chunk, n)); err != nil {
			b.Fatal(err)
		}
	}
	if v := os.Getenv("BENCH_RECONCILING"); v != "" {
		// The newest fraction of the rows reconciling (a mass re-apply in
		// flight): every Ready page of the newest rows must skip them.
		frac, err := strconv.ParseFloat(v, 64)
		if err != nil || frac <= 0 || frac >= 1 {
			b.Fatalf("BENCH_RECONCILING=%q: want a fraction between 0 and 1, e.g. 0.6", v)
		}
		if _, err := pool.Exec(ctx, `UPDATE resources SET generation = generation + 1, failure_gen = 0, frozen_until = NULL,
			deletion_requested_at = NULL WHERE name ~ '-[0-9]+$' AND substring(name from '[0-9]+$')::int >= $1`, int(float64(n)*(1-frac))); err != nil {
			b.Fatal(err)
		}
	}
	// A label common in the fleet and rare within the subnets.
	if _, err := pool.Exec(ctx, `UPDATE resources SET labels = labels || '{"zone": "a"}'
		WHERE kind = 'vpc' OR kind = 'subnet' AND substring(name from '[0-9]+$')::int % 997 = 0`); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "VACUUM (ANALYZE) resources, resource_phases, resource_labels"); err != nil {
		b.Fatal(err)
	}
	if _, err := s.FoldPhaseCounts(ctx); err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "  loaded %d rows in %s\n", n, time.Since(start).Round(time.Second))

	// Deep cursors: 100 positions spread over the whole order.
	var cursors []string
	rows, err := pool.Query(ctx, `SELECT created_at, id FROM (
		SELECT created_at, id, row_number() OVER (ORDER BY created_at DESC, id DESC) AS rn FROM resources) t
		WHERE rn % $1 = 0`, n/100)
	if err != nil {
		b.Fatal(err)
	}
	for rows.Next() {
		var at time.Time
		var id uuid.UUID
		if err := rows.Scan(&at, &id); err != nil {
			b.Fatal(err)
		}
		cursors = append(cursors, encodeKeyset(at, id))
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}

	// Each case is measured server-side: the statement the store runs,
	// under EXPLAIN (ANALYZE, TIMING OFF), timed as planning + execution by
	// Postgres itself. The store call's wall time (adding the loopback round
	// trip and the decode, and the noise of a shared 2-core machine) is
	// logged beside it.
	const iters, warmup = 1000, 100
	rng := rand.New(rand.NewPCG(1, 2))
	type stmt struct {
		sql  string
		args []any
		call func() error
		// more statements the call runs, timed with the first
		more []listQuery
	}
	list := func(opts ListOptions) stmt {
		q, err := buildListQuery(opts)
		if err != nil {
			b.Fatal(err)
		}
		return stmt{sql: q.sql, args: q.args, call: func() error { _, err := s.ListResources(ctx, opts); return err }}
	}
	starved := func(opts ListOptions) stmt {
		qs, err := buildStarvedListQueries(opts)
		if err != nil {
			b.Fatal(err)
		}
		return stmt{sql: qs[0].sql, args: qs[0].args, more: qs[1:], call: func() error { _, err := s.ListResources(ctx, opts); return err }}
	}
	// One dedicated connection runs the EXPLAINs, so its backend's on-CPU
	// time (/proc/<pid>/schedstat) can be read around each statement: the
	// statement's cost without the time the backend waited for a CPU.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	var backend int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		b.Fatal(err)
	}
	// A backend's first touch of a shared buffer costs a page fault (tens of
	// µs in this VM, without huge pages); a long-lived pool connection has
	// paid them all. Stand in for one: read the list path's relations into
	// shared buffers through this backend.
	if _, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_prewarm`); err != nil {
		fmt.Fprintf(os.Stderr, "  no pg_prewarm (%v): measuring a cold backend\n", err)
	} else if _, err := conn.Exec(ctx, `SELECT pg_prewarm(c.oid, 'buffer') FROM pg_class c
		WHERE c.relname IN ('resources', 'resources_pkey', 'resource_phases', 'resource_phases_pkey', 'idx_resource_phases_page',
		                    'idx_resource_phases_kind_page', 'idx_resource_phases_owner_page', 'resource_labels_pkey', 'resource_phase_counts',
		                    'resource_phase_deltas')`); err != nil {
		b.Fatal(err)
	}
	measure := func(name string, next func(i int) stmt) float64 {
		server := make([]time.Duration, iters)
		cpu := make([]time.Duration, iters)
		wall := make([]time.Duration, iters)
		for i := -warmup; i < iters; i++ {
			st := next(i + warmup)
			c0 := onCPU(backend)
			d, err := explainTime(ctx, conn.Conn(), st.sql, st.args)
			if err != nil {
				b.Fatalf("%s: %v", name, err)
			}
			for _, q := range st.more {
				dq, err := explainTime(ctx, conn.Conn(), q.sql, q.args)
				if err != nil {
					b.Fatalf("%s: %v", name, err)
				}
				d += dq
			}
			c1 := onCPU(backend)
			t0 := time.Now()
			if err := st.call(); err != nil {
				b.Fatalf("%s: %v", name, err)
			}
			if i >= 0 {
				server[i], cpu[i], wall[i] = d, c1-c0, time.Since(t0)
			}
		}
		fmt.Fprintf(os.Stderr, "  %-18s server p50=%.3fms p99=%.3fms max=%.3fms | on-CPU p50=%.3fms p99=%.3fms | store call p50=%.3fms p99=%.3fms\n",
			name, ms(pct(server, 50)), p99(server), ms(slices.Max(server)), ms(pct(cpu, 50)), p99(cpu), ms(pct(wall, 50)), p99(wall))
		return p99(server)
	}

	b.StartTimer()
	first := measure("first page", func(int) stmt { return list(ListOptions{Limit: 50}) })
	deep := measure("deep page", func(int) stmt {
		return list(ListOptions{Limit: 50, After: cursors[rng.IntN(len(cursors))]})
	})
	kindPhase := measure("kind+phase deep", func(int) stmt {
		return list(ListOptions{Limit: 50, Kind: "subnet", Phases: []resource.Phase{resource.PhaseReady}, After: cursors[rng.IntN(len(cursors))]})
	})
	owner := measure("owner page", func(int) stmt {
		id := uuid.UUID(md5Root(rng.IntN(n/50) * 50))
		return list(ListOptions{Limit: 50, OwnerID: &id})
	})
	rare := measure("rare phase", func(int) stmt {
		return list(ListOptions{Limit: 50, Phases: []resource.Phase{resource.PhaseQuarantined}})
	})
	union := measure("phase union", func(int) stmt {
		return list(ListOptions{Limit: 50, Phases: []resource.Phase{resource.PhaseFailed, resource.PhaseDegraded, resource.PhaseReconciling}})
	})
	team := measure("label team (0.1%)", func(int) stmt {
		return list(ListOptions{Limit: 50, Labels: map[string]string{"team": "t" + strconv.Itoa(rng.IntN(1000))}})
	})
	env := measure("label env (33%)", func(int) stmt {
		return list(ListOptions{Limit: 50, Labels: map[string]string{"env": "prod"}})
	})
	inKind := measure("label rare in kind", func(int) stmt {
		return starved(ListOptions{Limit: 50, Kind: "subnet", Labels: map[string]string{"zone": "a"}, After: cursors[rng.IntN(len(cursors))]})
	})

	// Counts with a realistic backlog of unfolded deltas: 200 small
	// statements' worth, as between two folds of a busy control plane.
	for i := range 200 {
		if _, err := pool.Exec(ctx, `UPDATE resources SET health_ok = NOT health_ok
			WHERE id = ANY (SELECT md5('r' || g)::uuid FROM generate_series($1::int, $1::int + 4) g)`, i*(n/200)); err != nil {
			b.Fatal(err)
		}
	}
	counts := measure("phase counts", func(i int) stmt {
		kind := ""
		if i%2 == 1 {
			kind = "vpc"
		}
		return stmt{sql: phaseCountsSQL, args: []any{kind}, call: func() error { _, err := s.PhaseCounts(ctx, kind); return err }}
	})
	b.StopTimer()

	fmt.Printf("bench-store: rows=%d reconciling=%s first_p99_ms=%.2f deep_p99_ms=%.2f kind_ready_deep_p99_ms=%.2f phase_p99_ms=%.2f label_p99_ms=%.2f label_in_kind_p99_ms=%.2f counts_p99_ms=%.2f\n",
		n, cmp.Or(os.Getenv("BENCH_RECONCILING"), "0.05"), first, max(deep, kindPhase, owner), kindPhase, max(rare, union), max(team, env), inKind, counts)
}

// benchPool starts a private cluster with benchSettings, migrates a database
// and returns a pool on it; all removed when the benchmark ends.
func benchPool(b *testing.B) *pgxpool.Pool {
	b.Helper()
	ctx := context.Background()
	url := pgtest.BenchURL(b, benchSettings)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	var settings []string
	for k := range benchSettings {
		var v string
		if err := pool.QueryRow(ctx, "SELECT current_setting($1)", k).Scan(&v); err != nil {
			b.Fatal(err)
		}
		settings = append(settings, k+"="+v)
	}
	sort.Strings(settings)
	var version string
	_ = pool.QueryRow(ctx, "SHOW server_version").Scan(&version)
	fmt.Fprintf(os.Stderr, "  postgres %s, %s\n", version, strings.Join(settings, " "))
	return pool
}

// explainTime is Postgres's own planning + execution time of one run of sql.
func explainTime(ctx context.Context, conn *pgx.Conn, sql string, args []any) (time.Duration, error) {
	var raw []byte
	err := conn.QueryRow(ctx, "EXPLAIN (ANALYZE, TIMING OFF, SUMMARY ON, FORMAT JSON) "+sql,
		append([]any{pgx.QueryExecModeCacheDescribe}, args...)...).Scan(&raw)
	if err != nil {
		return 0, err
	}
	var out []struct {
		Planning  float64 `json:"Planning Time"`
		Execution float64 `json:"Execution Time"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out) != 1 {
		return 0, fmt.Errorf("explain output %s: %w", raw, err)
	}
	return time.Duration((out[0].Planning + out[0].Execution) * float64(time.Millisecond)), nil
}

// onCPU is the time the process pid has spent on a CPU (the first field of
// /proc/<pid>/schedstat, in ns); 0 where that is unreadable.
func onCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	ns, _ := strconv.ParseInt(f[0], 10, 64)
	return time.Duration(ns)
}

// md5Root is md5('r' || g)::uuid, the fixture id of row g, computed here so
// the benchmark can name owners without a query.
func md5Root(g int) [16]byte { return md5.Sum([]byte("r" + strconv.Itoa(g))) }

func pct(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p+99)/100 - 1
	return s[max(i, 0)]
}

func p99(d []time.Duration) float64 { return ms(pct(d, 99)) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
