package api_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/api"
)

// TestNPlusOne_NestedPageIsAConstantNumberOfStatements: a 50-row page with
// nested owner, children (and their conditions), conditions, dependencies,
// dependents, provider config (and its owner) and kind costs a small,
// constant number of SQL statements, the same as a 5-row page.
func TestNPlusOne_NestedPageIsAConstantNumberOfStatements(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(api.Limits{LoaderWait: time.Nanosecond})) // only the page's prefetch batches
	e.manifest(workerKind)
	e.ok(`mutation { applyProviderConfig(input: {kind: "leaf", name: "default", isDefault: true, spec: {}}) { id } }`, nil, nil)
	e.ok(`mutation { applyProviderConfig(input: {kind: "leaf", name: "special", isDefault: false, spec: {}}) { id } }`, nil, nil)
	// 30 parents, each with a child that depends on it (value flow) and
	// carries a stored condition; every third parent uses "special".
	for i := range 30 {
		ref := ""
		if i%3 == 0 {
			ref = `providerConfigRef: "special"`
		}
		p := e.apply("leaf", fmt.Sprintf("p%02d", i), `{}`, ref)
		c := e.child("leaf", fmt.Sprintf("c%02d", i), p)
		_, err := e.pool.Exec(e.ctx, `INSERT INTO resource_deps (dependent_id, dependency_id, value_flows)
			VALUES ($1, $2, '[{"src_field":"/id","dep_field":"/parent"}]')`, c, p)
		require.NoError(t, err)
		_, err = e.pool.Exec(e.ctx, `INSERT INTO resource_conditions (resource_id, type, status, reason)
			VALUES ($1, 'Healthy', 'True', 'Probe')`, c)
		require.NoError(t, err)
	}
	query := `query($n: Int) { resources(first: $n) { items {
		name phase
		owner { name }
		children(first: 5) { items { name conditions { type status } } nextCursor }
		conditions { type status reason }
		dependencies(first: 5) { upstream { name phase } valueFlows { srcField depField } }
		dependents { name }
		providerConfig { name owner { name } }
		definition { name config { maxInflight } }
	} nextCursor } }`
	statements := func(n int) int64 {
		var out struct {
			Resources struct {
				Items []struct {
					Name           string
					Owner          *struct{ Name string }
					Children       struct{ Items []struct{ Name string } }
					Deps           []struct{ Upstream struct{ Name string } } `json:"dependencies"`
					Dependents     []struct{ Name string }
					ProviderConfig *struct{ Name string }
				}
			}
		}
		used := e.statementsOf(query, map[string]any{"n": n}, &out)
		require.Len(t, out.Resources.Items, n)
		for _, it := range out.Resources.Items {
			require.NotNil(t, it.ProviderConfig, it.Name)
			if it.Name[0] == 'c' {
				require.NotNil(t, it.Owner)
				require.Len(t, it.Deps, 1)
				require.Equal(t, "p"+it.Name[1:], it.Deps[0].Upstream.Name)
			} else {
				require.Len(t, it.Children.Items, 1)
				require.Len(t, it.Dependents, 1)
			}
		}
		return used
	}
	big := statements(50)
	small := statements(5)
	t.Logf("statements: 50 rows %d, 5 rows %d", big, small)
	// one statement per nested field, and the page's own three: its
	// read-only transaction's BEGIN (with the page's sorts-off setting),
	// the page, the ROLLBACK
	require.LessOrEqual(t, big, int64(11), "a 50-row nested page: one statement per nested field")
	require.Equal(t, small, big, "the count does not grow with the page")
}

// TestNPlusOne_HistoryOfAPageIsOneStatement: history of a page's rows is
// read in one statement. It was one a row, concurrently: a 500-row page
// asking for one event each (complexity ~7,000) held up to 500 read-pool
// connections at once, every other request waiting behind it.
func TestNPlusOne_HistoryOfAPageIsOneStatement(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(api.Limits{LoaderWait: time.Nanosecond})) // only the page's prefetch batches
	e.manifest(workerKind)
	for i := range 40 {
		e.apply("leaf", fmt.Sprintf("r%02d", i), `{}`)
	}
	query := `query($n: Int) { resources(first: $n) { items { name history(first: 1) { items { reason } nextCursor } } } }`
	statements := func(n int) int64 {
		var out struct {
			Resources struct {
				Items []struct {
					Name    string
					History struct {
						Items      []struct{ Reason string }
						NextCursor *string
					}
				}
			}
		}
		used := e.statementsOf(query, map[string]any{"n": n}, &out)
		require.Len(t, out.Resources.Items, n)
		for _, it := range out.Resources.Items {
			require.Len(t, it.History.Items, 1, it.Name)
			require.Equal(t, "Created", it.History.Items[0].Reason, it.Name)
		}
		return used
	}
	big, small := statements(40), statements(4)
	t.Logf("statements: 40 rows %d, 4 rows %d", big, small)
	require.Equal(t, small, big, "the count does not grow with the page")

	// its pages still follow each other, and a bad cursor fails its field
	e.apply("leaf", "r00", `{size: 3}`)
	var one struct {
		Resource struct {
			History struct {
				Items      []struct{ Reason string }
				NextCursor *string
			}
		}
	}
	const page = `query($after: String) { resource(kind: "leaf", name: "r00") { history(first: 1, after: $after) { items { reason } nextCursor } } }`
	e.ok(page, nil, &one)
	require.Equal(t, "SpecUpdated", one.Resource.History.Items[0].Reason)
	require.NotNil(t, one.Resource.History.NextCursor)
	e.ok(page, map[string]any{"after": *one.Resource.History.NextCursor}, &one)
	require.Equal(t, "Created", one.Resource.History.Items[0].Reason)
	require.Nil(t, one.Resource.History.NextCursor)
	r := e.do("", page, map[string]any{"after": "bogus"})
	require.Equal(t, "BAD_USER_INPUT", r.code(), "%+v", r.Errors)
	require.Equal(t, "after", r.Errors[0].Extensions["field"])
}

// TestNPlusOne_DeadLettersOfAPageAreOneStatement: deadLetter of a page's
// rows reads the conditions of its terminally failed rows in one statement,
// prefetched with the page (a nanosecond loader window here: the loaders
// alone would read them a row at a time on a slow machine).
func TestNPlusOne_DeadLettersOfAPageAreOneStatement(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(api.Limits{LoaderWait: time.Nanosecond}))
	e.manifest(workerKind)
	for i := range 30 {
		e.apply("leaf", fmt.Sprintf("r%02d", i), `{}`)
	}
	_, err := e.pool.Exec(e.ctx, `UPDATE resources SET failure_gen = generation, failure_terminal = true WHERE kind = 'leaf'`)
	require.NoError(t, err)
	_, err = e.pool.Exec(e.ctx, `INSERT INTO resource_conditions (resource_id, type, status, reason, message, observed_generation)
		SELECT id, 'Synced', 'False', 'DeadLettered', 'gave up on ' || name, generation FROM resources WHERE kind = 'leaf'
		ON CONFLICT (resource_id, type) DO UPDATE SET status = excluded.status, reason = excluded.reason,
		    message = excluded.message, observed_generation = excluded.observed_generation`)
	require.NoError(t, err)
	query := `query($n: Int) { resources(kind: "leaf", first: $n) { items { name deadLetter { message } } } }`
	statements := func(n int) int64 {
		var out struct {
			Resources struct {
				Items []struct {
					Name       string
					DeadLetter *struct{ Message string }
				}
			}
		}
		used := e.statementsOf(query, map[string]any{"n": n}, &out)
		require.Len(t, out.Resources.Items, n)
		for _, it := range out.Resources.Items {
			require.NotNil(t, it.DeadLetter, it.Name)
			require.Equal(t, "gave up on "+it.Name, it.DeadLetter.Message)
		}
		return used
	}
	big, small := statements(30), statements(3)
	t.Logf("statements: 30 rows %d, 3 rows %d", big, small)
	require.Equal(t, small, big, "the count does not grow with the page")
}
