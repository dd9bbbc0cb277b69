package store

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store/internal/plantest"
)

// loadZoneFleet loads rows fixture rows and labels zone=a every vpc and
// route (60% of the children: far more entries than labelBudget) and one
// subnet in 997: a label common in the fleet and rare within the subnets.
func loadZoneFleet(t *testing.T, e env, rows int) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, applyFixtureKinds(ctx, e.store))
	require.NoError(t, loadFixture(ctx, e.pool, 0, rows))
	_, err := e.pool.Exec(ctx, `UPDATE resources SET labels = labels || '{"zone": "a"}'
		WHERE kind IN ('vpc', 'route') OR kind = 'subnet' AND split_part(name, '-', 2)::int % 997 = 0`)
	require.NoError(t, err)
}

// TestListResources_EveryFilteredPageIsBounded: a label rare within a kind
// (or an owner) is the filter no index serves. Every page of such a listing
// reads at most labelBudget candidates: a page may end short, even empty,
// with a cursor at the last candidate it examined, and paging on serves
// every match exactly once, in order.
func TestListResources_EveryFilteredPageIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	loadZoneFleet(t, e, 40000)
	var bigOwner, smallOwner uuid.UUID
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT id FROM resources WHERE name = 'bom-1000'`).Scan(&bigOwner))
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT id FROM resources WHERE name = 'bom-2000'`).Scan(&smallOwner)) // 49 children
	// a large owner of subnets, tgws and accounts: few of them zone=a
	_, err := e.pool.Exec(ctx, `UPDATE resources SET owner_id = $1, root_id = $1
		WHERE kind IN ('subnet', 'tgw', 'account') AND name ~ '-1[0-9]{4}$'`, bigOwner)
	require.NoError(t, err)
	_, err = e.pool.Exec(ctx, "VACUUM ANALYZE resources, resource_phases, resource_labels")
	require.NoError(t, err)
	rec := &plantest.Recorder{}
	s := New(plantest.Pool(t, e.pool.Config(), rec), nil)
	// A page's candidates are fetched by primary key, a few buffers each;
	// an unbounded page reads the kind's (or owner's) rows, 16k and 6k here.
	const maxBuffers = 5 * labelBudget

	cases := map[string]struct {
		reason string
		opts   ListOptions
		where  string
		args   []any
		// short: some pages end early (the label walk starved)
		short bool
	}{
		"RareLabelInKind": {"a label rare within a large kind",
			ListOptions{Kind: "subnet", Labels: map[string]string{"zone": "a"}, Limit: 50},
			`kind = 'subnet' AND labels @> '{"zone":"a"}'`, nil, true},
		"RareLabelInKindPhase": {"the same with a phase filter",
			ListOptions{Kind: "subnet", Phases: []resource.Phase{resource.PhaseReady, resource.PhaseFailed}, Labels: map[string]string{"zone": "a"}, Limit: 3},
			`kind = 'subnet' AND phase IN ('Ready', 'Failed') AND labels @> '{"zone":"a"}'`, nil, true},
		"RareLabelInOwner": {"a label rare among a large owner's children",
			ListOptions{OwnerID: &bigOwner, Labels: map[string]string{"zone": "a"}, Limit: 50},
			`owner_id = $1 AND labels @> '{"zone":"a"}'`, []any{bigOwner}, true},
		"SmallOwner": {"an owner with fewer children than the budget drives the page: one exact page",
			ListOptions{OwnerID: &smallOwner, Labels: map[string]string{"env": "prod"}, Limit: 500},
			`owner_id = $1 AND labels @> '{"env":"prod"}'`, []any{smallOwner}, false},
		"CommonLabelInKind": {"a label common within the kind fills its pages",
			ListOptions{Kind: "vpc", Labels: map[string]string{"zone": "a"}, Limit: 50},
			`kind = 'vpc' AND labels @> '{"zone":"a"}'`, nil, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			// sequential: the recorder's plans belong to one listing at a time
			want := e.dbOrder(t, tc.where, tc.args...)
			var got []string
			short := 0
			var most int64
			opts := tc.opts
			for pages := 0; ; pages++ {
				require.Less(t, pages, 200, "paging does not end")
				page, err := s.ListResources(ctx, opts)
				require.NoError(t, err)
				var buffers int64
				for _, p := range rec.Take(t) {
					buffers += p.Buffers()
				}
				most = max(most, buffers)
				require.LessOrEqual(t, buffers, int64(maxBuffers), "%s: page %d read %d buffers", tc.reason, pages, buffers)
				require.LessOrEqual(t, len(page.Items), opts.Limit)
				for _, r := range page.Items {
					got = append(got, r.Name)
				}
				if page.NextCursor == "" {
					break
				}
				if len(page.Items) < opts.Limit {
					short++
				}
				opts.After = page.NextCursor
			}
			t.Logf("%d matches, %d short pages, at most %d buffers a page", len(want), short, most)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
			}
			require.Equal(t, tc.short, short > 0, "%s: %d short pages with a cursor", tc.reason, short)
		})
	}
}

// TestListResources_StarvedWalkGapFreeWhileAnotherGoroutineInserts: rows
// inserted while a starved listing pages (its cursors at rejected rows) are
// newer than every cursor: each row that existed when the listing began is
// served exactly once, in order, and nothing twice.
func TestListResources_StarvedWalkGapFreeWhileAnotherGoroutineInserts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	loadZoneFleet(t, e, 5000) // zone=a: 3,000 vpcs and routes, 2 subnets
	_, err := e.pool.Exec(ctx, `UPDATE resources SET labels = labels || '{"zone": "a"}'
		WHERE kind = 'subnet' AND split_part(name, '-', 2)::int % 53 = 0`)
	require.NoError(t, err)
	where := `kind = 'subnet' AND labels @> '{"zone":"a"}'`
	existing := e.dbOrder(t, where)
	require.Greater(t, len(existing), 10)

	served, short := e.pageWhileInserting(t, ListOptions{Kind: "subnet", Labels: map[string]string{"zone": "a"}, Limit: 25},
		func(i int) ApplyResourceInput {
			kind := "vpc" // feeds the driving label
			if i%3 == 0 {
				kind = "subnet"
			}
			return ApplyResourceInput{Kind: kind, Name: fmt.Sprintf("new-%04d", i), Labels: map[string]string{"zone": "a"}, Spec: json.RawMessage(`{}`)}
		})
	require.Positive(t, short, "no page ended early: the walk was not starved")
	for _, r := range served {
		require.Equal(t, "subnet", r.Kind)
	}
	requireServedOnceInOrder(t, served, existing)
}
