package store

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/resource"
)

// listAll pages through opts with the given page size and returns the names
// in the order served.
func (e env) listAll(t *testing.T, opts ListOptions) []string {
	t.Helper()
	var names []string
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10000, "paging does not end")
		page, err := e.store.ListResources(context.Background(), opts)
		require.NoError(t, err)
		limit, err := pageLimit(opts.Limit)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page.Items), limit)
		for _, r := range page.Items {
			names = append(names, r.Name)
		}
		if page.NextCursor == "" {
			return names
		}
		opts.After = page.NextCursor
	}
}

// dbOrder is the expected order of a list, asked of the database with a
// plain ORDER BY over the same predicate.
func (e env) dbOrder(t *testing.T, where string, args ...any) []string {
	t.Helper()
	rows, err := e.pool.Query(context.Background(),
		`SELECT name FROM resources r WHERE `+where+` ORDER BY created_at DESC, id DESC`, args...)
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		out = append(out, n)
	}
	require.NoError(t, rows.Err())
	return out
}

func TestListResources_PagesMatchTheKeysetOrderIncludingTies(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	require.NoError(t, applyFixtureKinds(ctx, e.store))
	require.NoError(t, loadFixture(ctx, e.pool, 0, 1000))

	cases := map[string]struct {
		reason string
		opts   ListOptions
		where  string
		args   []any
	}{
		"All": {"every row, four share each created_at",
			ListOptions{Limit: 7}, "true", nil},
		"OneKind": {"one kind", ListOptions{Kind: "vpc", Limit: 13}, "kind = 'vpc'", nil},
		"Union": {"a union of phases",
			ListOptions{Phases: []resource.Phase{resource.PhaseFailed, resource.PhaseDegraded}, Limit: 5},
			"phase IN ('Failed', 'Degraded')", nil},
		"KindPhaseLabels": {"kind, phase and labels together",
			ListOptions{Kind: "subnet", Phases: []resource.Phase{resource.PhaseReady}, Labels: map[string]string{"env": "prod"}, Limit: 9},
			`kind = 'subnet' AND phase = 'Ready' AND labels @> '{"env":"prod"}'`, nil},
		"BigPage": {"a page larger than the result", ListOptions{Kind: "bom", Limit: 500}, "kind = 'bom'", nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			want := e.dbOrder(t, tc.where, tc.args...)
			require.NotEmpty(t, want)
			if diff := cmp.Diff(want, e.listAll(t, tc.opts)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestListResources_GapFreeWhileAnotherGoroutineInserts(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason string
		opts   ListOptions
	}{
		"PhaseBranches": {"the phase-branch plan", ListOptions{Limit: 6}},
		"LabelWalk":     {"the label walk", ListOptions{Limit: 6, Labels: map[string]string{"team": "a"}}},
		"KindPhase":     {"one kind in two phases", ListOptions{Limit: 5, Kind: "noop", Phases: []resource.Phase{resource.PhaseReconciling, resource.PhaseReady}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			gapFreeUnderInserts(t, tc.opts)
		})
	}
}

// gapFreeUnderInserts pages through opts while another goroutine inserts
// matching rows, and checks every row that existed before the listing began
// is served exactly once, in strict keyset order, and nothing twice.
func gapFreeUnderInserts(t *testing.T, opts ListOptions) {
	e := newEnvWithKinds(t)
	labels := map[string]string{"team": "a"}
	const preload = 120
	for i := range preload {
		e.noop(t, fmt.Sprintf("pre-%03d", i), labels)
	}
	existing := e.dbOrder(t, "true")
	require.Len(t, existing, preload)
	served, _ := e.pageWhileInserting(t, opts, func(i int) ApplyResourceInput {
		return ApplyResourceInput{Kind: "noop", Name: fmt.Sprintf("new-%04d", i), Labels: labels, Spec: json.RawMessage(`{}`)}
	})
	requireServedOnceInOrder(t, served, existing)
}

// pageWhileInserting pages through opts to the end while another goroutine
// applies insert(0), insert(1), …, and returns the rows served and the
// pages that ended short with a cursor. The inserter runs freely; after
// each page the pager also waits until at least one insert committed after
// that page was read, so every page boundary sees the table grow.
func (e env) pageWhileInserting(t *testing.T, opts ListOptions, insert func(i int) ApplyResourceInput) (served []resource.Resource, short int) {
	t.Helper()
	ctx := context.Background()
	stop := make(chan struct{})
	inserted := make(chan struct{}, 1)
	var count atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 5000 {
			select {
			case <-stop:
				return
			default:
			}
			if _, _, err := e.store.ApplyResource(ctx, insert(i)); err != nil {
				t.Errorf("concurrent insert: %v", err)
				return
			}
			count.Add(1)
			select {
			case inserted <- struct{}{}:
			default:
			}
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
		require.Positive(t, count.Load())
	}()
	for pages := 0; ; pages++ {
		require.Less(t, pages, 1000)
		page, err := e.store.ListResources(ctx, opts)
		require.NoError(t, err)
		served = append(served, page.Items...)
		if page.NextCursor == "" {
			return served, short
		}
		if len(page.Items) < opts.Limit {
			short++
		}
		opts.After = page.NextCursor
		select { // drop a wake from before this page
		case <-inserted:
		default:
		}
		<-inserted
	}
}

// requireServedOnceInOrder: served is in strict keyset order, nothing is in
// it twice, and every name in existing is in it.
func requireServedOnceInOrder(t *testing.T, served []resource.Resource, existing []string) {
	t.Helper()
	seen := map[string]int{}
	for i, r := range served {
		seen[r.Name]++
		if i == 0 {
			continue
		}
		a := served[i-1]
		require.True(t, a.CreatedAt.After(r.CreatedAt) || a.CreatedAt.Equal(r.CreatedAt) && bytes.Compare(a.ID[:], r.ID[:]) > 0,
			"order broken at %d: %s then %s", i, a.Name, r.Name)
	}
	for n, c := range seen {
		require.Equal(t, 1, c, "%s served %d times", n, c)
	}
	for _, n := range existing {
		require.Equal(t, 1, seen[n], "%s existed before the listing started but was not served", n)
	}
}

func TestListResources_Filters(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	mk := func(kind, name string, labels map[string]string, s *scalars) resource.Resource {
		spec := json.RawMessage(`{}`)
		if kind == "vpc" {
			spec = json.RawMessage(`{"cidr": "10.0.0.0/8"}`)
		}
		r := e.apply(t, ApplyResourceInput{Kind: kind, Name: name, Labels: labels, Spec: spec})
		if s != nil {
			e.setScalars(t, r.ID, *s)
		}
		return r
	}
	ready := &scalars{generation: 1, syncedGen: 1, healthOK: true}
	failed := &scalars{generation: 2, syncedGen: 1, failureGen: 2, healthOK: true}
	degraded := &scalars{generation: 1, syncedGen: 1, healthOK: false}
	quarantined := &scalars{generation: 2, syncedGen: 1, failureGen: 2, healthOK: true, frozen: "infinity"}

	root := mk("noop", "root", map[string]string{"team": "a"}, ready)
	other := mk("noop", "other-root", nil, ready)
	c1 := mk("vpc", "c1", map[string]string{"team": "a", "env": "prod"}, failed)
	c2 := mk("vpc", "c2", map[string]string{"team": "a"}, degraded)
	c3 := mk("noop", "c3", map[string]string{"team": "b", "env": "prod"}, nil)
	c4 := mk("noop", "c4", map[string]string{"team": "b"}, quarantined)
	o1 := mk("noop", "o1", map[string]string{"example.com/owner": "x"}, ready)
	for _, c := range []resource.Resource{c1, c2, c3, c4} {
		e.setOwner(t, c.ID, root.ID)
	}
	e.setOwner(t, o1.ID, other.ID)

	cases := map[string]struct {
		reason string
		opts   ListOptions
		want   []string
	}{
		"Everything":   {"no filter lists all, newest first", ListOptions{}, []string{"o1", "c4", "c3", "c2", "c1", "other-root", "root"}},
		"OnePhase":     {"one phase", ListOptions{Phases: []resource.Phase{resource.PhaseFailed}}, []string{"c1"}},
		"PhaseUnion":   {"phases union", ListOptions{Phases: []resource.Phase{resource.PhaseFailed, resource.PhaseQuarantined, resource.PhaseReconciling}}, []string{"c4", "c3", "c1"}},
		"DupPhases":    {"a repeated phase counts once", ListOptions{Phases: []resource.Phase{resource.PhaseReady, resource.PhaseReady}}, []string{"o1", "other-root", "root"}},
		"EmptyPhase":   {"a phase nobody is in", ListOptions{Phases: []resource.Phase{resource.PhaseOrphaned}}, nil},
		"Kind":         {"one kind", ListOptions{Kind: "vpc"}, []string{"c2", "c1"}},
		"UnknownKind":  {"a kind with no rows", ListOptions{Kind: "nope"}, nil},
		"LabelOne":     {"one label", ListOptions{Labels: map[string]string{"team": "a"}}, []string{"c2", "c1", "root"}},
		"LabelTwo":     {"labels contain all pairs", ListOptions{Labels: map[string]string{"team": "a", "env": "prod"}}, []string{"c1"}},
		"LabelEnv":     {"another key", ListOptions{Labels: map[string]string{"env": "prod"}}, []string{"c3", "c1"}},
		"LabelPrefix":  {"a prefixed key", ListOptions{Labels: map[string]string{"example.com/owner": "x"}}, []string{"o1"}},
		"LabelNone":    {"a value nobody has", ListOptions{Labels: map[string]string{"team": "z"}}, nil},
		"EmptyLabels":  {"an empty label filter is no filter", ListOptions{Labels: map[string]string{}, Kind: "vpc"}, []string{"c2", "c1"}},
		"Owner":        {"direct children of one root", ListOptions{OwnerID: &root.ID}, []string{"c4", "c3", "c2", "c1"}},
		"OtherOwner":   {"another root's children", ListOptions{OwnerID: &other.ID}, []string{"o1"}},
		"OwnerPhase":   {"children in some phases", ListOptions{OwnerID: &root.ID, Phases: []resource.Phase{resource.PhaseDegraded, resource.PhaseReconciling}}, []string{"c3", "c2"}},
		"OwnerKind":    {"children of one kind", ListOptions{OwnerID: &root.ID, Kind: "noop"}, []string{"c4", "c3"}},
		"OwnerLabels":  {"children with a label", ListOptions{OwnerID: &root.ID, Labels: map[string]string{"env": "prod"}}, []string{"c3", "c1"}},
		"NoChildren":   {"a leaf owns nothing", ListOptions{OwnerID: &c1.ID}, nil},
		"AllTogether":  {"kind, phases, labels and owner", ListOptions{OwnerID: &root.ID, Kind: "vpc", Phases: []resource.Phase{resource.PhaseFailed, resource.PhaseDegraded}, Labels: map[string]string{"team": "a"}}, []string{"c2", "c1"}},
		"SmallPages":   {"pages of one", ListOptions{Limit: 1, Labels: map[string]string{"team": "a"}}, []string{"c2", "c1", "root"}},
		"UnknownOwner": {"an id that owns nothing", ListOptions{OwnerID: ptr(uuid.New())}, nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := e.listAll(t, tc.opts)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestListResources_RejectsBadOptions(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	for i := range 3 {
		e.noop(t, fmt.Sprintf("r%d", i), nil)
	}
	page, err := e.store.ListResources(ctx, ListOptions{Limit: 1})
	require.NoError(t, err)
	require.NotEmpty(t, page.NextCursor)
	events, err := e.store.ListEvents(ctx, page.Items[0].ID, 1, "")
	require.NoError(t, err)

	cases := map[string]struct {
		reason string
		opts   ListOptions
		field  string
		rule   string
	}{
		"GarbageCursor":   {"not base64url", ListOptions{After: "%%%"}, "after", "cursor_invalid"},
		"TruncatedCursor": {"a cut cursor", ListOptions{After: page.NextCursor[:10]}, "after", "cursor_invalid"},
		"PaddedCursor":    {"a cursor with extra bytes", ListOptions{After: page.NextCursor + "AA"}, "after", "cursor_invalid"},
		"OtherListCursor": {"a cursor of another list", ListOptions{After: encodeIDCursor(42)}, "after", "cursor_invalid"},
		// well formed, but an instant no row was stamped with: Postgres
		// refuses the first (timestamptz starts in 4713 BC) as its own error
		"CursorBeforeTimestamps": {"a forged cursor ~7500 BC", ListOptions{After: forgedKeyset(-300000000000000000)}, "after", "cursor_invalid"},
		"CursorBeforeEpoch":      {"a forged cursor in 1969", ListOptions{After: forgedKeyset(-1)}, "after", "cursor_invalid"},
		"CursorPastYear9999":     {"a forged cursor in year 10000", ListOptions{After: forgedKeyset(maxCursorMicros + 1)}, "after", "cursor_invalid"},
		"BadPhase":               {"a phase that does not exist", ListOptions{Phases: []resource.Phase{"Happy"}}, "phases", "phase_invalid"},
		"LowercasePhase":         {"phases are case-sensitive", ListOptions{Phases: []resource.Phase{"ready"}}, "phases", "phase_invalid"},
		"BadLabels":              {"a label filter follows the label syntax", ListOptions{Labels: map[string]string{"a b": "c"}}, "labels", "label_key_invalid"},
		"NegativeLimit":          {"a negative page size", ListOptions{Limit: -1}, "first", "limit_invalid"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := e.store.ListResources(ctx, tc.opts)
			requireInvalid(t, err, tc.field, tc.rule)
		})
	}
	_, err = e.store.ListEvents(ctx, page.Items[0].ID, 10, page.NextCursor)
	requireInvalid(t, err, "after", "cursor_invalid")
	require.Empty(t, events.NextCursor)
}

func TestListResources_PageSizeDefaultsAndCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	require.NoError(t, applyFixtureKinds(ctx, e.store))
	require.NoError(t, loadFixture(ctx, e.pool, 0, 600))
	for _, tc := range []struct {
		reason string
		limit  int
		want   int
	}{
		{"zero means the default of 50", 0, 50},
		{"a page is at most 500", 10000, 500},
		{"an exact size is honoured", 123, 123},
	} {
		page, err := e.store.ListResources(ctx, ListOptions{Limit: tc.limit})
		require.NoError(t, err)
		require.Len(t, page.Items, tc.want, tc.reason)
		require.NotEmpty(t, page.NextCursor, tc.reason)
	}
	page, err := e.store.ListResources(ctx, ListOptions{Kind: "bom", Limit: 12})
	require.NoError(t, err)
	require.Len(t, page.Items, 12, "exactly a page left")
	require.Empty(t, page.NextCursor, "the last page has no cursor even when full")
}

// TestListResources_PlanUsesPageIndexesWithoutSortingTheTable proves the hot
// list statements read the phase-keyed page indexes and never sort the
// table: the only Sort merges the per-phase branches, each cut by a Limit.
func TestListResources_PlanUsesPageIndexesWithoutSortingTheTable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	require.NoError(t, applyFixtureKinds(ctx, e.store))
	require.NoError(t, loadFixture(ctx, e.pool, 0, 20000))
	_, err := e.pool.Exec(ctx, "VACUUM ANALYZE resources, resource_phases")
	require.NoError(t, err)
	var owner, bigOwner uuid.UUID
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT id FROM resources WHERE name = 'bom-500'`).Scan(&owner))
	// One large composite: a root owning 6,000 children.
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT id FROM resources WHERE name = 'bom-1000'`).Scan(&bigOwner))
	_, err = e.pool.Exec(ctx, `UPDATE resources SET owner_id = $1, root_id = $1
		WHERE kind <> 'bom' AND name ~ '-1[0-5][0-9]{3}$'`, bigOwner)
	require.NoError(t, err)
	_, err = e.pool.Exec(ctx, "VACUUM ANALYZE resources, resource_phases, resource_labels")
	require.NoError(t, err)
	var deepName string
	require.NoError(t, e.pool.QueryRow(ctx,
		`SELECT name FROM resources WHERE kind = 'subnet' ORDER BY created_at DESC, id DESC OFFSET 4000 LIMIT 1`).Scan(&deepName))
	cursor := encodeKeyset(mustTime(t, e, deepName), mustID(t, e, deepName))

	cases := map[string]struct {
		reason string
		opts   ListOptions
		index  string
		// smallSet allows a bitmap scan of the index plus a sort of what it
		// returns: the planner's choice when a branch is known to be tiny.
		smallSet bool
	}{
		"KindPhase":     {"a kind + phase page", ListOptions{Kind: "vpc", Phases: []resource.Phase{resource.PhaseFailed}}, "idx_resource_phases_kind_page", false},
		"KindAllPhases": {"a kind page, all phases, deep", ListOptions{Kind: "subnet", After: cursor}, "idx_resource_phases_kind_page", false},
		"Owner":         {"a large owner's page", ListOptions{OwnerID: &bigOwner}, "idx_resource_phases_owner_page", false},
		"OwnerPhases":   {"a large owner's page, two phases", ListOptions{OwnerID: &bigOwner, Phases: []resource.Phase{resource.PhaseReady, resource.PhaseDegraded}}, "idx_resource_phases_owner_page", false},
		"SmallOwner":    {"a small owner's page", ListOptions{OwnerID: &owner}, "idx_resource_phases_owner_page", true},
		"Unfiltered":    {"the first page of everything", ListOptions{}, "idx_resource_phases_page", false},
		"Deep":          {"a deep page of everything", ListOptions{After: cursor}, "idx_resource_phases_page", false},
		"Label":         {"a label page walks the label's entries", ListOptions{Labels: map[string]string{"team": "t7"}, After: cursor}, "resource_labels_pkey", false},
		"LabelPhase":    {"a label + phase page", ListOptions{Labels: map[string]string{"env": "prod"}, Phases: []resource.Phase{resource.PhaseFailed}}, "resource_labels_pkey", false},
	}
	pageIndexes := map[string]bool{"idx_resource_phases_page": true, "idx_resource_phases_kind_page": true,
		"idx_resource_phases_owner_page": true, "resources_pkey": true, "resource_labels_pkey": true}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			q, err := buildListQuery(tc.opts)
			require.NoError(t, err)
			var raw []byte
			require.NoError(t, e.pool.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+q.sql, q.args...).Scan(&raw))
			var plan []struct {
				Plan planNode `json:"Plan"`
			}
			require.NoError(t, json.Unmarshal(raw, &plan))
			indexes := map[string]bool{}
			plan[0].Plan.walk(func(n planNode, ancestors []planNode) {
				if n.Index != "" {
					indexes[n.Index] = true
				}
				if n.Relation != "resources" && n.Relation != "resource_phases" && n.Relation != "resource_labels" {
					return
				}
				require.NotEqual(t, "Seq Scan", n.NodeType, "%s: sequential scan of %s\n%s", tc.reason, n.Relation, raw)
				if n.NodeType == "Bitmap Heap Scan" {
					require.True(t, tc.smallSet, "%s: bitmap scan of resources\n%s", tc.reason, raw)
					return
				}
				if n.Index == "resources_pkey" {
					return
				}
				// An ordered page-index scan is cut by a Limit before any Sort.
				for i := len(ancestors) - 1; i >= 0; i-- {
					if ancestors[i].NodeType == "Limit" {
						break
					}
					require.NotEqual(t, "Sort", ancestors[i].NodeType, "%s: a Sort over an uncut scan\n%s", tc.reason, raw)
				}
			})
			require.True(t, indexes[tc.index], "%s: %s not used (used %v)\n%s", tc.reason, tc.index, keys(indexes), raw)
			for ix := range indexes {
				require.True(t, pageIndexes[ix], "%s: unexpected index %s\n%s", tc.reason, ix, raw)
			}
		})
	}
}

type planNode struct {
	NodeType string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Index    string     `json:"Index Name"`
	Plans    []planNode `json:"Plans"`
}

func (n planNode) walk(fn func(n planNode, ancestors []planNode)) {
	var rec func(n planNode, anc []planNode)
	rec = func(n planNode, anc []planNode) {
		fn(n, anc)
		for _, c := range n.Plans {
			rec(c, append(slices.Clone(anc), n))
		}
	}
	rec(n, nil)
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func mustID(t *testing.T, e env, name string) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT id FROM resources WHERE name = $1`, name).Scan(&id))
	return id
}

func mustTime(t *testing.T, e env, name string) time.Time {
	t.Helper()
	var at time.Time
	require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT created_at FROM resources WHERE name = $1`, name).Scan(&at))
	return at
}

// TestListResources_LabelWalksAgreeWithTheDatabase covers the label plans:
// a plain walk, a bounded walk that the other filters satisfy, a phase or
// kind smaller than the label (its phase branches drive the page), and a
// multi-label filter driven by its smallest label. Starved walks are in
// list_budget_test.go.
func TestListResources_LabelWalksAgreeWithTheDatabase(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	require.NoError(t, applyFixtureKinds(ctx, e.store))
	require.NoError(t, loadFixture(ctx, e.pool, 0, 4000)) // env=prod: 1,334 rows, more than labelBudget
	var owner uuid.UUID
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT id FROM resources WHERE name = 'bom-1500'`).Scan(&owner))

	cases := map[string]struct {
		reason string
		opts   ListOptions
		where  string
		args   []any
	}{
		"OneLabel": {"a label alone walks its entries", ListOptions{Labels: map[string]string{"env": "prod"}, Limit: 40},
			`labels @> '{"env":"prod"}'`, nil},
		"SmallLabel": {"a small label", ListOptions{Labels: map[string]string{"team": "t7"}, Limit: 2},
			`labels @> '{"team":"t7"}'`, nil},
		"LabelCommonPhase": {"a phase most of the label's rows are in fills the bounded walk",
			ListOptions{Labels: map[string]string{"env": "prod"}, Phases: []resource.Phase{resource.PhaseReady}, Limit: 30},
			`labels @> '{"env":"prod"}' AND phase = 'Ready'`, nil},
		"LabelRarePhase": {"a phase rarer than the label: its phase branches drive the page",
			ListOptions{Labels: map[string]string{"env": "prod"}, Phases: []resource.Phase{resource.PhaseQuarantined, resource.PhaseDeleting}, Limit: 50},
			`labels @> '{"env":"prod"}' AND phase IN ('Quarantined', 'Deleting')`, nil},
		"LabelRareKind": {"a kind smaller than the label drives the page too",
			ListOptions{Labels: map[string]string{"env": "dev"}, Kind: "bom", Limit: 30},
			`labels @> '{"env":"dev"}' AND kind = 'bom'`, nil},
		"LabelOwner": {"an owner's children with a label",
			ListOptions{Labels: map[string]string{"env": "prod"}, OwnerID: &owner, Limit: 5},
			`labels @> '{"env":"prod"}' AND owner_id = $1`, []any{owner}},
		"TwoLabels": {"two labels drive from the smaller",
			ListOptions{Labels: map[string]string{"env": "prod", "team": "t3"}, Limit: 1},
			`labels @> '{"env":"prod","team":"t3"}'`, nil},
		"TwoLargeLabels": {"two large labels",
			ListOptions{Labels: map[string]string{"env": "dev", "team": "t1"}, Phases: []resource.Phase{resource.PhaseReady, resource.PhaseFailed}, Limit: 3},
			`labels @> '{"env":"dev","team":"t1"}' AND phase IN ('Ready', 'Failed')`, nil},
		"NoMatch": {"a label nobody has", ListOptions{Labels: map[string]string{"team": "nobody"}}, `false`, nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			want := e.dbOrder(t, tc.where, tc.args...)
			if diff := cmp.Diff(want, e.listAll(t, tc.opts)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestResourceLabels_StayInStepWithResources(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	inSync := func(reason string) {
		t.Helper()
		var missing, extra int64
		require.NoError(t, e.pool.QueryRow(ctx, `
			SELECT (SELECT count(*) FROM resources r, jsonb_each_text(r.labels) l
			         WHERE NOT EXISTS (SELECT 1 FROM resource_labels x WHERE x.key = l.key AND x.value = l.value
			                             AND x.created_at = r.created_at AND x.resource_id = r.id)),
			       (SELECT count(*) FROM resource_labels x
			         WHERE NOT EXISTS (SELECT 1 FROM resources r WHERE r.id = x.resource_id
			                             AND r.labels @> jsonb_build_object(x.key, x.value) AND r.created_at = x.created_at))`).
			Scan(&missing, &extra))
		require.Zero(t, missing, "%s: labels missing from resource_labels", reason)
		require.Zero(t, extra, "%s: stale resource_labels rows", reason)
	}
	in := ApplyResourceInput{Kind: "noop", Name: "a", Spec: json.RawMessage(`{}`), Labels: map[string]string{"team": "x", "env": "prod"}}
	e.apply(t, in)
	e.noop(t, "b", map[string]string{"team": "x"})
	inSync("after inserts")
	in.Labels = map[string]string{"team": "y", "tier": "gold"}
	e.apply(t, in)
	inSync("after a labels change")
	in.Spec = json.RawMessage(`{"v": 2}`)
	e.apply(t, in)
	inSync("after a spec change")
	_, err := e.pool.Exec(ctx, `UPDATE resources SET synced_gen = generation, health_ok = false`) // the drainer's write
	require.NoError(t, err)
	inSync("after status writes")
	_, err = e.store.RequestDeletion(ctx, "noop", "b", "ops")
	require.NoError(t, err)
	inSync("after a deletion")
	page, err := e.store.ListResources(ctx, ListOptions{Labels: map[string]string{"team": "x"}})
	require.NoError(t, err)
	require.Empty(t, page.Items, "a relabelled and a deleted resource no longer match")
	page, err = e.store.ListResources(ctx, ListOptions{Labels: map[string]string{"tier": "gold"}})
	require.NoError(t, err)
	require.Len(t, page.Items, 1)
}

// forgedKeyset is a keyset cursor of the right shape at us µs since the
// epoch, whatever us is.
func forgedKeyset(us int64) string {
	b := make([]byte, 1+8+16)
	b[0] = cursorKeyset
	binary.BigEndian.PutUint64(b[1:9], uint64(us))
	id := uuid.New()
	copy(b[9:], id[:])
	return base64.RawURLEncoding.EncodeToString(b)
}
