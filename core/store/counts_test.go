package store

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/resource"
)

// truth counts the resources by phase: the ground truth PhaseCounts must
// equal (tests may count; the store never does).
func (e env) truth(t *testing.T, kind string) map[resource.Phase]int64 {
	t.Helper()
	rows, err := e.pool.Query(context.Background(),
		`SELECT phase, count(*) FROM resources WHERE $1 = '' OR kind = $1 GROUP BY phase`, kind)
	require.NoError(t, err)
	out := map[resource.Phase]int64{}
	for rows.Next() {
		var p string
		var n int64
		require.NoError(t, rows.Scan(&p, &n))
		out[resource.Phase(p)] = n
	}
	require.NoError(t, rows.Err())
	return out
}

func (e env) counts(t *testing.T, kind string) map[resource.Phase]int64 {
	t.Helper()
	got, err := e.store.PhaseCounts(context.Background(), kind)
	require.NoError(t, err)
	require.Len(t, got, len(resource.AllPhases), "every phase is reported, zeros included")
	out := map[resource.Phase]int64{}
	for i, c := range got {
		require.Equal(t, resource.AllPhases[i], c.Phase, "precedence order")
		if c.Count != 0 {
			out[c.Phase] = c.Count
		}
	}
	return out
}

func TestPhaseCounts_FollowInsertsUpdatesAndDeletesWithAndWithoutFolding(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	mk := func(kind string, i int) {
		spec := `{}`
		if kind == "vpc" {
			spec = `{"cidr": "10.0.0.0/8"}`
		}
		e.apply(t, ApplyResourceInput{Kind: kind, Name: fmt.Sprintf("%s-%d", kind, i), Spec: []byte(spec)})
	}
	steps := []struct {
		reason string
		do     func()
		fold   bool
	}{
		{"an empty fleet counts zero everywhere", func() {}, false},
		{"inserts count as Reconciling", func() {
			for i := range 5 {
				mk("noop", i)
			}
			for i := range 3 {
				mk("vpc", i)
			}
		}, false},
		{"folding changes no count", func() {}, true},
		{"updates move rows between phases", func() {
			e.setScalars(t, mustID(t, e, "noop-0"), scalars{generation: 1, syncedGen: 1, healthOK: true})
			e.setScalars(t, mustID(t, e, "noop-1"), scalars{generation: 1, syncedGen: 1, healthOK: false})
			e.setScalars(t, mustID(t, e, "vpc-0"), scalars{generation: 1, failureGen: 1, healthOK: true})
			e.setScalars(t, mustID(t, e, "vpc-1"), scalars{generation: 1, healthOK: true, frozen: "infinity"})
		}, false},
		{"a multi-row update in one statement", func() {
			_, err := e.pool.Exec(ctx, `UPDATE resources SET synced_gen = generation WHERE kind = 'noop' AND name IN ('noop-2', 'noop-3', 'noop-4')`)
			require.NoError(t, err)
		}, true},
		{"a labels-only apply moves nothing", func() {
			e.apply(t, ApplyResourceInput{Kind: "noop", Name: "noop-2", Spec: []byte(`{}`), Labels: map[string]string{"a": "b"}})
		}, false},
		{"a spec change moves a Ready row back to Reconciling", func() {
			e.apply(t, ApplyResourceInput{Kind: "noop", Name: "noop-3", Spec: []byte(`{"v": 2}`)})
		}, false},
		{"soft delete moves rows to Deleting", func() {
			e.setScalars(t, mustID(t, e, "vpc-2"), scalars{generation: 1, syncedGen: 1, healthOK: true, deleting: true})
		}, true},
		{"hard deletes (the sweep's) remove rows from the counts", func() {
			// Stands in for sweep_deletable's hard delete.
			_, err := e.pool.Exec(ctx, `DELETE FROM resources WHERE name IN ('vpc-2', 'noop-4')`)
			require.NoError(t, err)
		}, false},
		{"more inserts after a fold", func() {
			for i := 10; i < 13; i++ {
				mk("vpc", i)
			}
		}, true},
	}
	for _, st := range steps {
		st.do()
		for _, kind := range []string{"", "noop", "vpc", "statussink"} {
			if diff := cmp.Diff(e.truth(t, kind), e.counts(t, kind)); diff != "" {
				t.Fatalf("%s, kind %q, before folding (-truth +counts):\n%s", st.reason, kind, diff)
			}
		}
		if !st.fold {
			continue
		}
		n, err := e.store.FoldPhaseCounts(ctx)
		require.NoError(t, err)
		var pending int64
		require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*) FROM resource_phase_deltas`).Scan(&pending))
		require.Zero(t, pending, "%s: the fold leaves no delta (folded %d)", st.reason, n)
		for _, kind := range []string{"", "noop", "vpc"} {
			if diff := cmp.Diff(e.truth(t, kind), e.counts(t, kind)); diff != "" {
				t.Fatalf("%s, kind %q, after folding (-truth +counts):\n%s", st.reason, kind, diff)
			}
		}
	}
}

func TestFoldPhaseCounts_NothingToFoldIsZero(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	n, err := e.store.FoldPhaseCounts(context.Background())
	require.NoError(t, err)
	require.Zero(t, n)
	e.noop(t, "a", nil)
	e.noop(t, "b", nil)
	n, err = e.store.FoldPhaseCounts(context.Background())
	require.NoError(t, err)
	require.Equal(t, 2, n, "one delta per insert statement")
	n, err = e.store.FoldPhaseCounts(context.Background())
	require.NoError(t, err)
	require.Zero(t, n)
}
