package api_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/api"
)

// Resource.specHistory reads up to `first` full specs a resource, and
// Resource.waitingOn runs the explanation's statements a resource: in a
// page of resources each costs its size, so the complexity limit
// (API_MAX_COMPLEXITY, default 25,000) bounds what one request reads.
func TestLimits_ExplainAndHistoryCostWhatTheyRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cases := map[string]struct {
		reason string
		query  string
		refuse bool
	}{
		"HistoryOfAPage": {"500 resources × 1000 kept specs",
			`{ resources(first: 500) { items { specHistory(first: 1000) { generation spec } } } }`, true},
		"WhyOfAPage": {"500 explanations, each a few statements and up to 20 blockers a gate",
			`{ resources(first: 500) { items { waitingOn { gate blockers { id name } } } } }`, true},
		"HistoryOfOne": {"one resource's whole history is an ordinary read",
			`{ resource(kind: "x", name: "y") { specHistory(first: 1000) { generation spec labels reason actor createdAt } } }`, false},
		"WhyOfOne": {"conctl why",
			`{ resource(kind: "x", name: "y") { waitingOn { gate message since until blockerCount blockers { kind name phase } inFlight cap brokerId } } }`, false},
		"WhyOfAListPage": {"a page of 50 with its gates",
			`{ resources(first: 50) { items { waitingOn { gate message } } } }`, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := e.do("", tc.query, nil)
			if !tc.refuse {
				for _, err := range r.Errors {
					require.NotEqual(t, "complexity", err.Extensions["limit"], "%s: %v", tc.reason, err.Message)
				}
				return
			}
			require.NotEmpty(t, r.Errors, tc.reason)
			require.Equal(t, "complexity", r.Errors[0].Extensions["limit"], "%s: %+v", tc.reason, r.Errors)
		})
	}
}

// TestWaitingOn_APageIsAConstantNumberOfStatements: waitingOn (with its
// blockers) of a page costs the same few statements however many rows the
// page has — explained together, their blockers read together. It ran
// three statements a row on the primary, concurrently: a 400-row page
// within the complexity limit was 1,200 statements, each holding a primary
// connection the writes need. The page's explanations are prefetched, not
// left to the loaders' batch window: a window that closed before the 80th
// row's resolver ran (a loaded machine, -race) split the batch. The window
// here is a nanosecond, so only the prefetch keeps the count.
func TestWaitingOn_APageIsAConstantNumberOfStatements(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(api.Limits{LoaderWait: time.Nanosecond}))
	e.manifest(workerKind)
	// parents each with an upstream that has not synced: every parent waits
	// on one blocker (UPSTREAM)
	for i := range 40 {
		up := e.apply("leaf", fmt.Sprintf("up%02d", i), `{}`)
		p := e.apply("leaf", fmt.Sprintf("p%02d", i), `{}`)
		_, err := e.pool.Exec(e.ctx, `INSERT INTO resource_deps (dependent_id, dependency_id, value_flows) VALUES ($1, $2, '[]')`, p, up)
		require.NoError(t, err)
	}
	_, err := e.pool.Exec(e.ctx, `DELETE FROM work_queue WHERE resource_id IN (SELECT id FROM resources WHERE name LIKE 'p%')`)
	require.NoError(t, err)
	query := `query($n: Int) { resources(first: $n) { items { name waitingOn { gate blockerCount blockers { name } } } } }`
	statements := func(n int) int64 {
		var out struct {
			Resources struct {
				Items []struct {
					Name      string
					WaitingOn []struct {
						Gate     string
						Blockers []struct{ Name string }
					}
				}
			}
		}
		used := e.statementsOf(query, map[string]any{"n": n}, &out)
		require.Len(t, out.Resources.Items, n)
		for _, it := range out.Resources.Items {
			require.NotEmpty(t, it.WaitingOn, it.Name)
			if it.Name[0] == 'p' {
				require.Equal(t, "UPSTREAM", it.WaitingOn[0].Gate, it.Name)
				require.Len(t, it.WaitingOn[0].Blockers, 1, it.Name)
				require.Equal(t, "up"+it.Name[1:], it.WaitingOn[0].Blockers[0].Name)
			}
		}
		return used
	}
	big, small := statements(80), statements(4)
	t.Logf("statements: 80 rows %d, 4 rows %d", big, small)
	require.Equal(t, small, big, "the count does not grow with the page")
}

// TestSpecHistory_APageIsAConstantNumberOfStatements: specHistory of a
// page's rows is read in one statement, not one a row on the primary (a
// 500-row page asking for one generation each, complexity ~1,500, was 500
// concurrent statements holding primary connections).
func TestSpecHistory_APageIsAConstantNumberOfStatements(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(api.Limits{LoaderWait: time.Nanosecond})) // only the prefetch batches
	e.manifest(workerKind)
	for i := range 40 {
		name := fmt.Sprintf("r%02d", i)
		e.apply("leaf", name, `{size: 1}`)
		e.apply("leaf", name, `{size: 2}`)
	}
	query := `query($n: Int) { resources(first: $n) { items { name specHistory(first: 1) { generation spec } } } }`
	statements := func(n int) int64 {
		var out struct {
			Resources struct {
				Items []struct {
					Name        string
					SpecHistory []struct {
						Generation int
						Spec       map[string]int
					}
				}
			}
		}
		used := e.statementsOf(query, map[string]any{"n": n}, &out)
		require.Len(t, out.Resources.Items, n)
		for _, it := range out.Resources.Items {
			require.Len(t, it.SpecHistory, 1, it.Name)
			require.Equal(t, 2, it.SpecHistory[0].Generation, it.Name)
			require.Equal(t, 2, it.SpecHistory[0].Spec["size"], it.Name)
		}
		return used
	}
	big, small := statements(40), statements(4)
	t.Logf("statements: 40 rows %d, 4 rows %d", big, small)
	require.Equal(t, small, big, "the count does not grow with the page")
}
