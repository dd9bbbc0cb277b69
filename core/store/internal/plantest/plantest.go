// Package plantest records the plans of the statements a store runs, for
// tests that pin the hot statements' plans. A recording pool loads
// auto_explain on every connection (the test cluster's user is a superuser)
// with log_nested_statements, so the statements inside plpgsql functions are
// recorded too, and its log level set to NOTICE, so each plan arrives on the
// connection that ran it instead of in the server log. Plans are analyzed
// with buffer counts (timing off): the evidence is the plan shape and the
// buffers, never milliseconds.
//
// Statistics helpers make a small fixture look large to the planner
// (Inflate) so a test can prove a plan holds at 1M-row statistics without
// loading a million rows, or make tables that hold rows look empty
// (AnalyzeEmptied), as a queue analyzed while it was drained does.
package plantest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Node is one node of an EXPLAIN (FORMAT JSON) plan.
type Node struct {
	Type        string  `json:"Node Type"`
	Relation    string  `json:"Relation Name"`
	Index       string  `json:"Index Name"`
	IndexCond   string  `json:"Index Cond"`
	Subplan     string  `json:"Subplan Name"`
	Parent      string  `json:"Parent Relationship"`
	Loops       *int64  `json:"Actual Loops"`
	SharedHit   int64   `json:"Shared Hit Blocks"`
	SharedRead  int64   `json:"Shared Read Blocks"`
	PlanRows    float64 `json:"Plan Rows"`
	Plans       []Node  `json:"Plans"`
	RemovedSubs int     `json:"Subplans Removed"`
}

// Plan is one recorded statement and its plan.
type Plan struct {
	Query string `json:"Query Text"`
	Plan  Node   `json:"Plan"`
}

// ran reports whether the node executed (an analyzed node with zero loops,
// e.g. a partition pruned at run time, did not).
func (n Node) ran() bool { return n.Loops == nil || *n.Loops > 0 }

// Walk calls fn for n and every node below it.
func (n Node) Walk(fn func(Node)) {
	fn(n)
	for _, c := range n.Plans {
		c.Walk(fn)
	}
}

// Buffers is the plan's shared buffer count (hit + read) at its top node,
// which includes its children's.
func (p Plan) Buffers() int64 { return p.Plan.SharedHit + p.Plan.SharedRead }

// Scan is one relation access of a plan.
type Scan struct{ Type, Relation, Index string }

func (s Scan) String() string {
	if s.Index != "" {
		return s.Type + " " + s.Relation + " using " + s.Index
	}
	return s.Type + " " + s.Relation
}

// Scans lists the plan's relation accesses that ran (an analyzed node never
// executed, e.g. a partition pruned at run time, is left out).
func (p Plan) Scans() []Scan {
	var out []Scan
	p.Plan.Walk(func(n Node) {
		if n.Relation == "" && n.Index == "" {
			return
		}
		if !n.ran() {
			return
		}
		out = append(out, Scan{n.Type, n.Relation, n.Index})
	})
	return out
}

// wholeIndexes lists the plan's index scans that ran without an index
// condition and not below a Limit: every entry of the index read, the
// Seq Scan by another name. It is what a planner that sees a table as
// empty picks for the outer side of a join (an empty table's index costs
// nothing to walk), and keeps while the table holds a fleet. A bitmap
// index scan counts too (a partial index whose predicate the query implies
// can be read whole into a bitmap), named with its Bitmap Heap Scan's
// relation.
func (p Plan) wholeIndexes() []Scan {
	var out []Scan
	var walk func(n Node, limited bool, heap string)
	walk = func(n Node, limited bool, heap string) {
		switch n.Type {
		case "Limit":
			limited = true
		case "Bitmap Heap Scan":
			heap = n.Relation // its bitmap index scans name no relation
		}
		if n.ran() && !limited && n.IndexCond == "" && n.Index != "" {
			switch n.Type {
			case "Index Scan", "Index Only Scan":
				out = append(out, Scan{n.Type, n.Relation, n.Index})
			case "Bitmap Index Scan": // a partial index's every entry
				out = append(out, Scan{n.Type, heap, n.Index})
			}
		}
		for _, c := range n.Plans {
			walk(c, limited, heap)
		}
	}
	walk(p.Plan, false, "")
	return out
}

// Partitions counts the distinct partitions of parent (work_queue →
// work_queue_p0…) the plan touched.
func (p Plan) Partitions(parent string) int {
	seen := map[string]bool{}
	for _, s := range p.Scans() {
		for _, name := range []string{s.Relation, s.Index} {
			if part := partitionOf(name, parent); part != "" {
				seen[part] = true
			}
		}
	}
	return len(seen)
}

// String renders the plan's scans, one a line, for failure messages.
func (p Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", oneLine(p.Query))
	for _, s := range p.Scans() {
		fmt.Fprintf(&b, "    %s\n", s)
	}
	return b.String()
}

// Tree renders the plan's nodes, indented, with the rows the planner
// expected, the loops each ran and the buffers each read: the shape a
// failure is read from when a plan reads far more than it should.
func (p Plan) Tree() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", oneLine(p.Query))
	var walk func(n Node, depth int)
	walk = func(n Node, depth int) {
		fmt.Fprintf(&b, "%s%s", strings.Repeat("  ", depth+1), n.Type)
		if n.Relation != "" {
			fmt.Fprintf(&b, " %s", n.Relation)
		}
		if n.Index != "" {
			fmt.Fprintf(&b, " using %s", n.Index)
		}
		if n.IndexCond != "" {
			fmt.Fprintf(&b, " (%s)", n.IndexCond)
		}
		loops := int64(-1)
		if n.Loops != nil {
			loops = *n.Loops
		}
		fmt.Fprintf(&b, "  [rows=%g loops=%d buffers=%d]\n", n.PlanRows, loops, n.SharedHit+n.SharedRead)
		for _, c := range n.Plans {
			walk(c, depth+1)
		}
	}
	walk(p.Plan, 0)
	return b.String()
}

func oneLine(q string) string {
	q = strings.Join(strings.Fields(q), " ")
	if len(q) > 160 {
		q = q[:160] + "…"
	}
	return q
}

// Recorder collects the plans a recording pool's connections report.
type Recorder struct {
	mu    sync.Mutex
	plans []Plan
	errs  []error
}

// Take returns the plans recorded since the last Take.
func (r *Recorder) Take(t testing.TB) []Plan {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, err := range r.errs {
		t.Errorf("plantest: %v", err)
	}
	out := r.plans
	r.plans, r.errs = nil, nil
	return out
}

func (r *Recorder) notice(_ *pgconn.PgConn, n *pgconn.Notice) {
	i := strings.Index(n.Message, "plan:")
	if i < 0 {
		return
	}
	var p Plan
	err := json.Unmarshal([]byte(n.Message[i+len("plan:"):]), &p)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("parse auto_explain plan: %w", err))
		return
	}
	r.plans = append(r.plans, p)
}

// Pool opens a pool on the same database as cfg whose every statement's
// plan (nested ones included) is recorded in r.
func Pool(t testing.TB, cfg *pgxpool.Config, r *Recorder) *pgxpool.Pool {
	t.Helper()
	return recordedPool(t, cfg, r, 4)
}

// KeptPlanCalls is how many calls of a statement a test makes in one
// session before the plan it is checking can be a kept one: Postgres plans
// the first five for their arguments, and from the sixth reuses the
// statement's generic plan — made from the statistics of that moment — as
// long as it costs no more than they did on average.
const KeptPlanCalls = 6

// Session is Pool with one connection: every call runs in one session, so
// a plan it cached on an earlier call (a generic plan, made from the
// statistics of that moment) is the plan a later call runs.
func Session(t testing.TB, cfg *pgxpool.Config, r *Recorder) *pgxpool.Pool {
	t.Helper()
	return recordedPool(t, cfg, r, 1)
}

func recordedPool(t testing.TB, cfg *pgxpool.Config, r *Recorder, conns int32) *pgxpool.Pool {
	t.Helper()
	c := cfg.Copy()
	c.MaxConns = conns
	c.ConnConfig.OnNotice = r.notice
	prev := c.AfterConnect
	c.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if prev != nil {
			if err := prev(ctx, conn); err != nil {
				return err
			}
		}
		_, err := conn.Exec(ctx, `LOAD 'auto_explain';
SET auto_explain.log_min_duration = 0;
SET auto_explain.log_nested_statements = on;
SET auto_explain.log_analyze = on;
SET auto_explain.log_buffers = on;
SET auto_explain.log_timing = off;
SET auto_explain.log_format = json;
SET auto_explain.log_level = notice`)
		return err
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), c)
	if err != nil {
		t.Fatalf("plantest: open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Inflate makes the planner see factor times the rows of each table, its
// partitions and all their indexes, as at 1M rows with the 10k fixture's
// distributions: reltuples grows while relpages stays, and the planner
// scales the density reltuples/relpages by the relation's real size, so it
// estimates factor× the rows. Column statistics stay as ANALYZE left them: a
// positive n_distinct (few owners, few kinds) keeps its absolute value, so
// every owner looks factor× bigger, which is the stale statistic a plan must
// survive.
func Inflate(t testing.TB, pool *pgxpool.Pool, factor float64, tables ...string) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `
WITH RECURSIVE rel AS (
    SELECT c.oid FROM pg_class c WHERE c.relname = ANY ($1::text[]) AND c.relnamespace = 'public'::regnamespace
    UNION
    SELECT i.inhrelid FROM pg_inherits i JOIN rel ON i.inhparent = rel.oid
), all_rel AS (
    SELECT oid FROM rel
    UNION
    SELECT x.indexrelid FROM pg_index x JOIN rel ON x.indrelid = rel.oid
)
UPDATE pg_class c SET reltuples = greatest(c.reltuples, 1) * $2, relpages = greatest(c.relpages, 1)
  FROM all_rel a WHERE c.oid = a.oid`, tables, factor)
	if err != nil {
		t.Fatalf("plantest: inflate statistics: %v", err)
	}
}

// AnalyzeEmptied makes the planner see tables as empty while they keep
// their rows: every row is set aside and deleted, the tables are analyzed
// holding only dead rows on their pages (no VACUUM has truncated them), and
// the rows are put back. ANALYZE records zero live rows over those pages,
// and Postgres sizes a relation by that density times its current pages:
// zero rows, however many it holds, until its next ANALYZE. These are the
// statistics of a queue drained empty after a fleet's creation, analyzed
// then, and filled again by a rollout or a teardown, or of a fleet's
// tables after the fleet was torn down and another applied. Partitioned
// parents cover their partitions; generated columns are computed again.
func AnalyzeEmptied(t testing.TB, pool *pgxpool.Pool, tables ...string) {
	t.Helper()
	ctx := context.Background()
	// One session with triggers and foreign keys off (replication role
	// replica), so the rows put back are the rows taken: no cascade, no
	// phase or label row written by a trigger, no event announced.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatalf("plantest: analyze emptied: %v", err)
	}
	defer conn.Release()
	exec := func(sql string) {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("plantest: analyze emptied: %s: %v", sql, err)
		}
	}
	exec(`SET session_replication_role = replica`)
	defer exec(`RESET session_replication_role`)
	kept := func(table string) string { return pgx.Identifier{"plantest_kept_" + table}.Sanitize() }
	for _, table := range tables {
		exec(`CREATE TABLE ` + kept(table) + ` AS SELECT * FROM ` + pgx.Identifier{table}.Sanitize())
	}
	for i := len(tables) - 1; i >= 0; i-- {
		exec(`DELETE FROM ` + pgx.Identifier{tables[i]}.Sanitize())
	}
	// The deletes' counts reach the statistics before the ANALYZE below
	// sets the live rows to zero. A session flushes its counts at most once
	// a second; left pending, the deletes' and the inserts' after the
	// ANALYZE would cancel out in one flush, and a table's live count stay
	// at the ANALYZE's zero instead of the rows put back (whether they did
	// hung on when the session's last flush had been).
	exec(`SELECT pg_stat_force_next_flush()`)
	for _, table := range tables {
		exec(`ANALYZE ` + pgx.Identifier{table}.Sanitize())
	}
	for _, table := range tables {
		// every column but the generated ones, which are computed again
		var cols string
		if err := conn.QueryRow(ctx, `
SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum)
  FROM pg_attribute a
 WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''`, table).Scan(&cols); err != nil {
			t.Fatalf("plantest: analyze emptied: columns of %s: %v", table, err)
		}
		exec(`INSERT INTO ` + pgx.Identifier{table}.Sanitize() + ` (` + cols + `) OVERRIDING SYSTEM VALUE SELECT ` + cols + ` FROM ` + kept(table))
		exec(`DROP TABLE ` + kept(table))
	}
	exec(`SELECT pg_stat_force_next_flush()`) // the rows put back, counted now
}

// Rule pins one statement's plan: the first recorded plan whose query text
// contains Match must use every index in Uses.
type Rule struct {
	Match string
	Uses  []string
}

// Spec is what Check asserts of a set of plans.
type Spec struct {
	// Hot relations (partitioned parents cover their partitions) never read
	// by a Seq Scan, unless Small holds the relation.
	Hot []string
	// Parts are partitioned parents of which a statement touches at most two
	// partitions.
	Parts []string
	// Small lists relations whose physical size makes a Seq Scan the cheap
	// plan (see SmallRelations); the planner reads that size from the
	// relation itself at plan time, so no stale statistic can keep the scan
	// once the relation grows.
	Small map[string]bool
	// Rules pin the key statements' indexes.
	Rules []Rule
	// Allow exempts the statement matching Match from the Seq Scan rule on
	// Relation: a known, explained exception.
	Allow []Allow
	// Bounded lists partial indexes (partitions' copies named as their
	// parent's, work_queue_pkey for work_queue_p3_pkey) whose predicate
	// bounds them by what is in flight, not by the table: read whole, they
	// read the leased rows.
	Bounded []string
}

// Allow is one exception to the Seq Scan rule.
type Allow struct{ Match, Relation string }

// SmallRelations returns the relations of tables (with their partitions)
// of at most maxPages pages.
func SmallRelations(t testing.TB, pool *pgxpool.Pool, maxPages int, tables ...string) map[string]bool {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
WITH RECURSIVE rel AS (
    SELECT c.oid FROM pg_class c WHERE c.relname = ANY ($1::text[]) AND c.relnamespace = 'public'::regnamespace
    UNION
    SELECT i.inhrelid FROM pg_inherits i JOIN rel ON i.inhparent = rel.oid
)
SELECT c.relname FROM rel JOIN pg_class c ON c.oid = rel.oid
 WHERE c.relkind = 'r' AND pg_relation_size(c.oid) <= $2::bigint * current_setting('block_size')::bigint`, tables, maxPages)
	if err != nil {
		t.Fatalf("plantest: relation sizes: %v", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("plantest: relation sizes: %v", err)
	}
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out
}

// Check asserts spec of the plans.
func Check(t testing.TB, plans []Plan, spec Spec) {
	t.Helper()
	isHot := func(rel string) bool {
		for _, h := range spec.Hot {
			if rel == h || partitionOf(rel, h) != "" {
				return true
			}
		}
		return false
	}
	for _, p := range plans {
		for _, s := range p.Scans() {
			if s.Type == "Seq Scan" && isHot(s.Relation) && !spec.Small[s.Relation] && !allowed(spec.Allow, p, s) {
				t.Errorf("Seq Scan on %s in\n%s", s.Relation, p)
			}
		}
		for _, s := range p.wholeIndexes() {
			if isHot(s.Relation) && !spec.Small[s.Relation] && !allowed(spec.Allow, p, s) &&
				!slices.Contains(spec.Bounded, trimPartition(s.Index)) {
				t.Errorf("%s read whole (no index condition, no limit) in\n%s", s, p.Tree())
			}
		}
		for _, parent := range spec.Parts {
			if n := p.Partitions(parent); n > 2 {
				t.Errorf("%d partitions of %s (want ≤ 2) in\n%s", n, parent, p)
			}
		}
	}
	for _, r := range spec.Rules {
		var found *Plan
		for i := range plans {
			if strings.Contains(plans[i].Query, r.Match) {
				found = &plans[i]
				break
			}
		}
		if found == nil {
			t.Errorf("no statement matching %q recorded", r.Match)
			continue
		}
		used := map[string]bool{}
		for _, s := range found.Scans() {
			used[s.Index] = true
			used[trimPartition(s.Index)] = true // work_queue_p3_pkey → work_queue_pkey
		}
		for _, idx := range r.Uses {
			if !used[idx] {
				t.Errorf("statement %q: want index %s, plan:\n%s", r.Match, idx, found)
			}
		}
	}
}

func allowed(allow []Allow, p Plan, s Scan) bool {
	for _, a := range allow {
		if a.Relation == s.Relation && strings.Contains(p.Query, a.Match) {
			return true
		}
	}
	return false
}

// partitionOf returns the partition of parent (work_queue_p3) that a
// relation or index name belongs to, or "".
func partitionOf(name, parent string) string {
	rest, ok := strings.CutPrefix(name, parent+"_p")
	if !ok {
		return ""
	}
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	if j == 0 {
		return ""
	}
	return parent + "_p" + rest[:j]
}

// trimPartition maps work_queue_p3_pkey to work_queue_pkey.
func trimPartition(idx string) string {
	for _, parent := range []string{"work_queue", "work_outbox", "lifecycle_outbox"} {
		if strings.HasPrefix(idx, parent+"_p") {
			rest := strings.TrimPrefix(idx, parent+"_p")
			if j := strings.IndexByte(rest, '_'); j > 0 {
				return parent + "_" + rest[j+1:]
			}
		}
	}
	return idx
}

// Summary renders each plan's scans and buffers, sorted, for t.Log.
func Summary(plans []Plan) string {
	var lines []string
	for _, p := range plans {
		var scans []string
		for _, s := range p.Scans() {
			scans = append(scans, s.String())
		}
		lines = append(lines, fmt.Sprintf("%6d buffers  %s\n        %s", p.Buffers(), oneLine(p.Query), strings.Join(scans, "; ")))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
