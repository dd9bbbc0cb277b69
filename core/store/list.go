package store

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/core/resource"
)

// ListOptions filters and pages ListResources. Every filter is optional.
type ListOptions struct {
	// Kind keeps one kind.
	Kind string
	// Phases keeps the union of these phases (phase = ANY); empty = all.
	Phases []resource.Phase
	// Labels keeps resources whose labels contain these (labels @> Labels).
	Labels map[string]string
	// OwnerID keeps the direct composed children of one resource.
	OwnerID *uuid.UUID
	// Limit is the page size: 0 → 50, capped at 500.
	Limit int
	// After is the previous page's NextCursor ("" = the first page).
	After string
}

// Page is one page of resources, newest first.
type Page struct {
	Items []resource.Resource
	// NextCursor continues after the last item, or after the last candidate
	// a short filtered page examined; "" on the last page only.
	NextCursor string
}

// ListResources returns one keyset page of resources ordered by
// (created_at DESC, id DESC). There is no total count. Each page is read in
// one snapshot and every cursor is a position in the order: a row that
// exists when the listing starts is returned exactly once however many rows
// are inserted meanwhile (the order key never changes).
//
// Without a label filter the plan is one LATERAL branch per requested phase
// (an unfiltered list is the union of all seven), each an index range scan of
// a page index of the phase index table resource_phases
// (idx_resource_phases_kind_page, idx_resource_phases_owner_page or
// idx_resource_phases_page) that starts at
// the cursor and stops after limit+1 rows; the branches are merged and cut,
// then the page's rows are fetched by primary key. Nothing sorts more than
// 7 × (limit+1) index entries, whatever the table's size or the page's depth.
//
// With a label filter the page is bounded too: it reads at most labelBudget
// candidates, whatever the filters. One statement counts, up to
// labelBudget+1 each, the entries after the cursor of every label and, when
// phases, a kind or an owner filter the page, of the phase branches; the
// smaller drives. Phase branches of at most labelBudget entries serve the
// page with the labels as a filter (they hold every match). Otherwise the
// page walks its smallest label's entries in resource_labels (its primary
// key, already in list order) from the cursor and fetches each candidate by
// primary key, checking the other filters, until the page is full or
// labelBudget candidates were read. A walk the other filters starve (a label
// rare within a kind) ends the page early: it holds the matches found, maybe
// none, and its NextCursor is the last candidate examined, so the next page
// resumes the walk there. Every match is still served once, in order; only
// the last page has no cursor, and a filtered page may be short or empty.
func (s *Store) ListResources(ctx context.Context, opts ListOptions) (Page, error) {
	sp, err := parseListOptions(opts)
	if err != nil {
		return Page{}, err
	}
	if len(sp.labels) == 0 {
		return s.runPage(ctx, s.read, phaseQuery(sp), sp.limit)
	}
	pairs := labelPairs(sp.labels)
	if sp.allPhases && sp.kind == "" && sp.owner == nil && len(pairs) == 1 {
		// Every entry of the label is a match: a page of entries is a page.
		return s.runPage(ctx, s.read, labelQuery(sp, pairs[0], sp.limit+1), sp.limit)
	}
	// Filtered: size the drivers and walk one, in one snapshot, so a size
	// read before the walk still holds during it. Sorts are off for the
	// snapshot (see runPage): every statement in it is an ordered walk.
	tx, err := s.read.BeginTx(ctx, pgx.TxOptions{BeginQuery: `BEGIN READ ONLY ISOLATION LEVEL REPEATABLE READ; ` + sortsOffSQL})
	if err != nil {
		return Page{}, mapErr(err, "list resources")
	}
	defer func() { _ = tx.Rollback(ctx) }()
	counts, err := s.driverCounts(ctx, tx, sp, pairs)
	if err != nil {
		return Page{}, err
	}
	best := 0 // the smallest label
	for i, n := range counts[:len(pairs)] {
		if n < counts[best] {
			best = i
		}
	}
	if phaseDriven(sp) && counts[len(pairs)] < counts[best] {
		// at most labelBudget phase entries: the branches hold every match
		items, err := s.queryResources(ctx, tx, phaseQuery(sp))
		if err != nil {
			return Page{}, err
		}
		return newPage(items, sp.limit), nil
	}
	items, err := s.queryResources(ctx, tx, labelQuery(sp, pairs[best], labelBudget))
	if err != nil {
		return Page{}, err
	}
	// The walk's page is exact when it is full, or when the walk saw every
	// remaining entry of its label.
	if len(items) > sp.limit || counts[best] <= labelBudget {
		return newPage(items, sp.limit), nil
	}
	// The other filters starved the walk: the page ends at its last candidate.
	next, err := s.labelBoundary(ctx, tx, sp, pairs[best])
	if err != nil {
		return Page{}, err
	}
	page := newPage(items, sp.limit)
	page.NextCursor = encodeKeyset(next.at, next.id)
	return page, nil
}

// labelBudget bounds a filtered label page: at most this many candidates
// (entries of its driving label, each fetched by primary key, or entries of
// its phase branches) are read for one page. A starved page's cost follows
// it: at 1M rows, 1,000 candidates took 9.9 ms (p99, server side, the
// bench-store case "label rare in kind"), over the 5 ms a page may cost;
// 400 took 4.2 ms, and 4.6 ms with 60% of the rows reconciling.
const labelBudget = 400

// phaseDriven reports whether the phase branches filter a labelled page
// (and so may drive it): phases, a kind or an owner.
func phaseDriven(sp listSpec) bool {
	return !sp.allPhases || sp.kind != "" || sp.owner != nil
}

type listQuery struct {
	sql  string
	args []any
	// walk: the query's pages are ordered walks of an index, which only
	// sorts turned off keep whatever the statistics (see runPage).
	walk bool
}

// listSpec is a validated ListOptions.
type listSpec struct {
	limit     int
	phases    []string
	allPhases bool
	kind      string
	owner     *uuid.UUID
	labels    map[string]string
	after     *keyset
}

func parseListOptions(opts ListOptions) (listSpec, error) {
	limit, err := pageLimit(opts.Limit)
	if err != nil {
		return listSpec{}, err
	}
	phases, err := phaseSet(opts.Phases)
	if err != nil {
		return listSpec{}, err
	}
	if err := validateLabels("labels", opts.Labels); err != nil {
		return listSpec{}, err
	}
	sp := listSpec{limit: limit, phases: phases, allPhases: len(phases) == len(resource.AllPhases),
		kind: opts.Kind, owner: opts.OwnerID, labels: opts.Labels}
	if opts.After != "" {
		k, err := decodeKeyset(opts.After)
		if err != nil {
			return listSpec{}, err
		}
		sp.after = &k
	}
	return sp, nil
}

// argList numbers query arguments.
type argList []any

func (a *argList) add(v any) string {
	*a = append(*a, v)
	return fmt.Sprintf("$%d", len(*a))
}

// filters renders the predicates on r other than the access path's own
// (the label filter on rl, the resources row, in the phase branch; on r in
// the label walk, where r is the resources row).
func (sp listSpec) filters(args *argList, phases, labels bool) string {
	var w strings.Builder
	if phases && !sp.allPhases {
		fmt.Fprintf(&w, " AND r.phase = ANY(%s::text[])", args.add(sp.phases))
	}
	if sp.kind != "" {
		fmt.Fprintf(&w, " AND r.kind = %s", args.add(sp.kind))
	}
	if sp.owner != nil {
		fmt.Fprintf(&w, " AND r.owner_id = %s", args.add(*sp.owner))
	}
	if labels && len(sp.labels) > 0 {
		alias := "r"
		if !phases {
			alias = "rl"
		}
		fmt.Fprintf(&w, " AND %s.labels @> %s::jsonb", alias, args.add(sp.labels))
	}
	return w.String()
}

// afterCond is the cursor's predicate on key, the order key's two columns
// ("r.created_at, r.id"), its values added to args; "" without a cursor.
func (sp listSpec) afterCond(args *argList, key string) string {
	if sp.after == nil {
		return ""
	}
	return fmt.Sprintf(" AND (%s) < (%s::timestamptz, %s::uuid)", key, args.add(sp.after.at), args.add(sp.after.id))
}

// phaseCond is a phase branch's phase match. Only a page without a kind or
// owner filter compares under the "C" collation of idx_resource_phases_page,
// so a kind or owner page can only walk its own index (see the index's
// comment in the baseline migration).
func phaseCond(sp listSpec) string {
	if sp.kind == "" && sp.owner == nil {
		return `r.phase COLLATE "C" = p.phase`
	}
	return `r.phase = p.phase`
}

// phaseQuery is the phase-branch plan (see ListResources).
func phaseQuery(sp listSpec) listQuery {
	args := argList{sp.phases, sp.limit + 1}
	where := sp.filters(&args, false, true) + sp.afterCond(&args, "r.created_at, r.id")
	// The branch walks the phase index (resource_phases, whose columns are
	// named as on resources); a label filter reads each entry's labels from
	// its resources row by primary key.
	from := "resource_phases r"
	if len(sp.labels) > 0 {
		from = "resource_phases r JOIN resources rl ON rl.id = r.id"
	}
	sql := `
SELECT ` + resourceColumns + `
  FROM (
        SELECT b.id, b.created_at
          FROM unnest($1::text[]) AS p(phase)
         CROSS JOIN LATERAL (
                SELECT r.id, r.created_at
                  FROM ` + from + `
                 WHERE ` + phaseCond(sp) + where + `
                 ORDER BY r.created_at DESC, r.id DESC
                 LIMIT $2
               ) b
         ORDER BY b.created_at DESC, b.id DESC
         LIMIT $2
       ) page
 CROSS JOIN LATERAL (SELECT * FROM resources r WHERE r.id = page.id OFFSET 0) r
 ORDER BY r.created_at DESC, r.id DESC`
	return listQuery{sql: sql, args: args, walk: true}
}

// labelQuery is the label walk: at most budget entries of one label, in list
// order from the cursor, each fetched by primary key and checked against the
// other filters, cut at limit+1 matches. The fetch is a fenced LATERAL probe
// (OFFSET 0): as a plain join the planner, trusting a small GIN estimate for
// the labels filter, bitmap-scanned resources for the label and nested-looped
// over it — a plan whose cost grows with the label's size, not the page's.
func labelQuery(sp listSpec, driver [2]string, budget int) listQuery {
	args := argList{driver[0], driver[1], budget, sp.limit + 1}
	cursor := sp.afterCond(&args, "l.created_at, l.resource_id")
	where := sp.filters(&args, true, true)
	sql := `
SELECT ` + resourceColumns + `
  FROM (
        SELECT l.resource_id, l.created_at
          FROM resource_labels l
         WHERE l.key = $1 AND l.value = $2` + cursor + `
         ORDER BY l.created_at DESC, l.resource_id DESC
         LIMIT $3
       ) c
 CROSS JOIN LATERAL (SELECT * FROM resources r WHERE r.id = c.resource_id OFFSET 0) r
 WHERE true` + where + `
 ORDER BY c.created_at DESC, c.resource_id DESC
 LIMIT $4`
	return listQuery{sql: sql, args: args}
}

// driverCounts counts, up to labelBudget+1 each, the entries after the
// cursor of each label of pairs and, last, of the phase branches when they
// filter the page (phaseDriven; labelBudget+1 otherwise), in one statement.
// Each count is an ordered walk of an index cut by the LIMIT (with sorts
// off, see ListResources): unordered, the planner may bitmap-scan every
// entry of a large label to count the first thousand.
func (s *Store) driverCounts(ctx context.Context, q querier, sp listSpec, pairs [][2]string) ([]int64, error) {
	cq := driverCountsQuery(sp, pairs)
	var counts []int64
	if err := q.QueryRow(ctx, cq.sql, cq.args...).Scan(&counts); err != nil {
		return nil, mapErr(err, "list resources (driver sizes)")
	}
	return counts, nil
}

// driverCountsQuery is driverCounts' statement.
func driverCountsQuery(sp listSpec, pairs [][2]string) listQuery {
	args := argList{labelBudget + 1}
	cursor := sp.afterCond(&args, "l.created_at, l.resource_id")
	parts := make([]string, len(pairs), len(pairs)+1)
	for i, p := range pairs {
		parts[i] = fmt.Sprintf(`(SELECT count(*) FROM (SELECT 1 FROM resource_labels l
			WHERE l.key = %s AND l.value = %s%s
			ORDER BY l.created_at DESC, l.resource_id DESC LIMIT $1) s)`, args.add(p[0]), args.add(p[1]), cursor)
	}
	if phaseDriven(sp) {
		where := sp.filters(&args, false, false) + sp.afterCond(&args, "r.created_at, r.id")
		// each branch an ordered walk of its page index, as in phaseQuery
		parts = append(parts, fmt.Sprintf(`(SELECT count(*) FROM (SELECT 1
			FROM unnest(%s::text[]) AS p(phase)
			CROSS JOIN LATERAL (SELECT 1 FROM resource_phases r
			                     WHERE %s%s
			                     ORDER BY r.created_at DESC, r.id DESC LIMIT $1) b
			LIMIT $1) s)`, args.add(sp.phases), phaseCond(sp), where))
	} else {
		parts = append(parts, "$1")
	}
	return listQuery{sql: `SELECT ARRAY[` + strings.Join(parts, ", ") + `]::bigint[]`, args: args}
}

// labelBoundary is the position of the last entry a starved label walk
// examined: the labelBudget-th entry of the label after the cursor.
func (s *Store) labelBoundary(ctx context.Context, q querier, sp listSpec, driver [2]string) (keyset, error) {
	bq := labelBoundaryQuery(sp, driver)
	var k keyset
	if err := q.QueryRow(ctx, bq.sql, bq.args...).Scan(&k.at, &k.id); err != nil {
		return keyset{}, mapErr(err, "list resources (walk boundary)")
	}
	return k, nil
}

// labelBoundaryQuery is labelBoundary's statement.
func labelBoundaryQuery(sp listSpec, driver [2]string) listQuery {
	args := argList{driver[0], driver[1], labelBudget - 1}
	cursor := sp.afterCond(&args, "l.created_at, l.resource_id")
	return listQuery{sql: `SELECT l.created_at, l.resource_id FROM resource_labels l
		 WHERE l.key = $1 AND l.value = $2` + cursor + `
		 ORDER BY l.created_at DESC, l.resource_id DESC
		OFFSET $3 LIMIT 1`, args: args}
}

// labelPairs lists the label filter's pairs in key order.
func labelPairs(labels map[string]string) [][2]string {
	out := make([][2]string, 0, len(labels))
	for k, v := range labels {
		out = append(out, [2]string{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

// queryResources runs a page statement, planned per call (pgpool.ExecMode):
// the best plan depends on the values (a phase holding 0.05% or 90% of the
// rows, an owner of 5 or 50,000 children), and a generic plan would pick
// one for all.
func (s *Store) queryResources(ctx context.Context, db querier, q listQuery) ([]resource.Resource, error) {
	rows, err := db.Query(ctx, q.sql, q.args...)
	if err != nil {
		return nil, mapErr(err, "list resources")
	}
	items, err := collectResources(rows)
	if err != nil {
		return nil, mapErr(err, "list resources")
	}
	return items, nil
}

// sortsOffSQL leaves a page's ordered walk the one plan without a disabled
// node (see runPage).
const sortsOffSQL = `SET LOCAL enable_sort = off`

// runPage runs a page statement and cuts its page. A phase-branch page is an
// ordered walk of its phase index under a LIMIT; a phase table whose
// statistics were taken while it was empty (a fleet torn down and analyzed,
// another applied) looks empty however much it holds, and to the planner a
// bitmap of the whole phase's entries, sorted, then costs no more than the
// walk: 279,000 buffers for a deep kind+Ready page of a 10k fleet
// (TestPlans_RollupAndListKeepTheirPlans, "emptied fleet"). Such a page
// runs with sorts off (SET LOCAL, in the caller's transaction or a
// read-only one of its own, the setting sent with its BEGIN: one round trip
// and a ROLLBACK more than a bare statement), which leaves the walk the one
// plan without a disabled node; its other sorts (the phases' merge, the
// final order) have no alternative and are made as before.
func (s *Store) runPage(ctx context.Context, db querier, q listQuery, limit int) (Page, error) {
	if q.walk {
		tx, inTx := db.(pgx.Tx)
		if inTx {
			if _, err := tx.Exec(ctx, sortsOffSQL); err != nil {
				return Page{}, mapErr(err, "list resources: planner settings")
			}
		} else {
			// the setting travels with the BEGIN (one simple-protocol message)
			var err error
			if tx, err = s.read.BeginTx(ctx, pgx.TxOptions{BeginQuery: `BEGIN READ ONLY; ` + sortsOffSQL}); err != nil {
				return Page{}, mapErr(err, "list resources")
			}
			defer func() { _ = tx.Rollback(ctx) }()
		}
		db = tx
	}
	items, err := s.queryResources(ctx, db, q)
	if err != nil {
		return Page{}, err
	}
	return newPage(items, limit), nil
}

// newPage cuts limit+1 fetched rows to a page and its cursor.
func newPage(items []resource.Resource, limit int) Page {
	page := Page{Items: items}
	if len(items) > limit {
		page.Items = items[:limit]
		last := page.Items[limit-1]
		page.NextCursor = encodeKeyset(last.CreatedAt, last.ID)
	}
	if page.Items == nil {
		page.Items = []resource.Resource{}
	}
	return page
}

// phaseSet validates and de-duplicates a phase filter; empty means all.
func phaseSet(in []resource.Phase) ([]string, error) {
	if len(in) == 0 {
		out := make([]string, len(resource.AllPhases))
		for i, p := range resource.AllPhases {
			out[i] = string(p)
		}
		return out, nil
	}
	seen := map[resource.Phase]bool{}
	var out []string
	for _, p := range in {
		if !p.Valid() {
			return nil, invalid("phases", "phase_invalid", "unknown phase %q (one of %s)", p, phaseNames())
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, string(p))
		}
	}
	return out, nil
}

func phaseNames() string {
	names := make([]string, len(resource.AllPhases))
	for i, p := range resource.AllPhases {
		names[i] = string(p)
	}
	return strings.Join(names, ", ")
}

// buildListQuery renders the statement ListResources runs first for opts:
// the phase-branch plan, or for a label filter the walk of its first label
// (tests and the benchmark EXPLAIN it).
func buildListQuery(opts ListOptions) (listQuery, error) {
	sp, err := parseListOptions(opts)
	if err != nil {
		return listQuery{}, err
	}
	if len(sp.labels) == 0 {
		return phaseQuery(sp), nil
	}
	budget := labelBudget
	if sp.allPhases && sp.kind == "" && sp.owner == nil && len(sp.labels) == 1 {
		budget = sp.limit + 1
	}
	return labelQuery(sp, labelPairs(sp.labels)[0], budget), nil
}

// buildStarvedListQueries renders the statements a filtered label page
// runs when its walk is starved (the benchmark EXPLAINs them): the drivers'
// counts, the walk of the smallest label (here the first) and its boundary.
func buildStarvedListQueries(opts ListOptions) ([]listQuery, error) {
	sp, err := parseListOptions(opts)
	if err != nil {
		return nil, err
	}
	if len(sp.labels) == 0 {
		return nil, fmt.Errorf("a starved page needs a label filter")
	}
	pairs := labelPairs(sp.labels)
	return []listQuery{driverCountsQuery(sp, pairs), labelQuery(sp, pairs[0], labelBudget), labelBoundaryQuery(sp, pairs[0])}, nil
}
