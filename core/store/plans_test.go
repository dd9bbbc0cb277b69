package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store/internal/plantest"
)

// The rollup reads and the list pages keep their plans at the fixture's 10k
// rows, at 1M-row statistics, after a bulk load the statistics have not
// seen, and with the fleet's tables analyzed while empty; every plan, the
// rollup gate's nested ones included, is recorded through auto_explain.
func TestPlans_RollupAndListKeepTheirPlans(t *testing.T) {
	t.Parallel()
	for _, stats := range []string{"analyzed", "1M", "bulk", "emptied fleet"} {
		t.Run(stats, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := context.Background()
			exec := func(sql string, args ...any) {
				t.Helper()
				_, err := e.pool.Exec(ctx, sql, args...)
				require.NoError(t, err, sql)
			}
			require.NoError(t, applyFixtureKinds(ctx, e.store))
			if stats == "bulk" {
				exec(`ANALYZE`)
			}
			require.NoError(t, loadFixture(ctx, e.pool, 0, 10000))
			switch stats {
			case "analyzed":
				exec(`ANALYZE`)
			case "1M":
				exec(`ANALYZE`)
				plantest.Inflate(t, e.pool, 100, "resources", "resource_labels")
			case "emptied fleet":
				// a fleet torn down, analyzed, and another applied
				exec(`ANALYZE`)
				plantest.AnalyzeEmptied(t, e.pool, "resources", "resource_phases", "resource_labels", "resource_deps")
			}
			rec := &plantest.Recorder{}
			s := New(plantest.Pool(t, e.pool.Config(), rec), nil)
			spec := plantest.Spec{Hot: []string{"resources", "resource_labels"}}

			var root uuid.UUID
			require.NoError(t, e.pool.QueryRow(ctx, `SELECT id FROM resources WHERE name = 'bom-500'`).Scan(&root))

			t.Run("rollup", func(t *testing.T) {
				_, err := s.SubtreeSettled(ctx, root)
				require.NoError(t, err)
				sub, err := s.ComposedSubtree(ctx, root)
				require.NoError(t, err)
				require.NotEmpty(t, sub.Nodes)
				plans := rec.Take(t)
				spec.Rules = []plantest.Rule{
					{Match: "FROM resource_phases d", Uses: []string{"idx_resource_phases_unsettled"}},
					{Match: "WITH RECURSIVE sub", Uses: []string{"idx_resources_owner"}},
				}
				plantest.Check(t, plans, spec)
				t.Log("\n" + plantest.Summary(plans))
			})

			var deep Page
			t.Run("list", func(t *testing.T) {
				cases := []struct {
					name  string
					opts  ListOptions
					index string
				}{
					{"unfiltered", ListOptions{}, "idx_resource_phases_page"},
					{"phase", ListOptions{Phases: []resource.Phase{resource.PhaseReconciling}}, "idx_resource_phases_page"},
					{"kind", ListOptions{Kind: "subnet"}, "idx_resource_phases_kind_page"},
					{"kind+Ready", ListOptions{Kind: "subnet", Phases: []resource.Phase{resource.PhaseReady}}, "idx_resource_phases_kind_page"},
					{"owner", ListOptions{OwnerID: &root}, "idx_resource_phases_owner_page"},
					{"label", ListOptions{Labels: map[string]string{"team": "t7"}}, "resource_labels_pkey"},
					{"label+phase", ListOptions{Labels: map[string]string{"env": "prod"}, Phases: []resource.Phase{resource.PhaseReady}}, "resource_labels_pkey"},
					{"kind+label", ListOptions{Kind: "subnet", Labels: map[string]string{"env": "prod"}}, "resource_labels_pkey"},
					// a kind smaller than the label: its phase branches drive
					{"small kind+label", ListOptions{Kind: "bom", Labels: map[string]string{"env": "prod"}}, "idx_resource_phases_kind_page"},
				}
				for _, tc := range cases {
					page, err := s.ListResources(ctx, tc.opts)
					require.NoError(t, err, tc.name)
					plans := rec.Take(t)
					spec.Rules = []plantest.Rule{{Match: "FROM resource_phases r", Uses: []string{tc.index}}}
					switch {
					case tc.index == "resource_labels_pkey":
						spec.Rules[0].Match = "r.id = c.resource_id" // the label walk
					case tc.opts.Labels != nil:
						spec.Rules[0].Match = "JOIN resources rl" // phase branches with labels
					}
					switch { // the drivers' counts walk the same indexes
					case tc.opts.Labels != nil && tc.opts.Kind != "":
						spec.Rules = append(spec.Rules, plantest.Rule{Match: "SELECT ARRAY[", Uses: []string{"resource_labels_pkey", "idx_resource_phases_kind_page"}})
					case tc.opts.Labels != nil && tc.opts.Phases != nil:
						spec.Rules = append(spec.Rules, plantest.Rule{Match: "SELECT ARRAY[", Uses: []string{"resource_labels_pkey", "idx_resource_phases_page"}})
					}
					plantest.Check(t, plans, spec)
					if tc.name == "kind+Ready" {
						deep = page
					}
				}
				// the kind+Ready deep page: forty pages in
				opts := ListOptions{Kind: "subnet", Phases: []resource.Phase{resource.PhaseReady}, Limit: 50}
				for i := 0; i < 40 && deep.NextCursor != ""; i++ {
					opts.After = deep.NextCursor
					var err error
					deep, err = s.ListResources(ctx, opts)
					require.NoError(t, err)
				}
				plans := rec.Take(t)
				spec.Rules = []plantest.Rule{{Match: "FROM resource_phases r", Uses: []string{"idx_resource_phases_kind_page"}}}
				plantest.Check(t, plans, spec)
				t.Log("\n" + plantest.Summary(plans[len(plans)-1:]))
			})
		})
	}
}

// TestPlans_APISessionPlannedOnEmptyTables: an API pod's session makes its
// plans on a fresh install's empty tables and keeps what it cached — the
// foreign keys' check plans, and a statement's generic plan once five calls
// cost no less — until an ANALYZE replaces it. After a bulk load (no
// ANALYZE), the same session's applies, operator verbs and reads (the
// resource, its events, the list pages and the dataloader's batches) must
// still reach their rows by key: no Seq Scan of a table that grows with the
// fleet.
func TestPlans_APISessionPlannedOnEmptyTables(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	require.NoError(t, applyFixtureKinds(ctx, e.store))
	_, err := e.pool.Exec(ctx, `ANALYZE`)
	require.NoError(t, err)
	rec := &plantest.Recorder{}
	s := New(plantest.Session(t, e.pool.Config(), rec), nil)
	for i := range plantest.KeptPlanCalls {
		apiApply(t, s, fmt.Sprintf("early-%d", i))
	}
	rec.Take(t)

	require.NoError(t, loadFixture(ctx, e.pool, 0, 10000))
	loadAPIRows(t, e.pool)
	apiApply(t, s, "late")
	plans := rec.Take(t)
	plantest.Check(t, plans, plantest.Spec{Hot: []string{"resources", "resource_phases", "resource_labels", "resource_events",
		"resource_conditions", "resource_deps", "resource_operations"}})
	t.Log("\n" + plantest.Summary(plans))
}

// apiReads reads name as the API's queries, pages and dataloader batches do.
func apiReads(t *testing.T, s *Store, name string) {
	t.Helper()
	ctx := context.Background()
	r, err := s.GetResource(ctx, "account", name)
	require.NoError(t, err)
	_, err = s.GetResourceByID(ctx, r.ID)
	require.NoError(t, err)
	_, err = s.ListEvents(ctx, r.ID, 20, "")
	require.NoError(t, err)
	_, err = s.Conditions(ctx, r.ID)
	require.NoError(t, err)
	// the API's dataloader batches
	_, err = s.ConditionsFor(ctx, []uuid.UUID{r.ID})
	require.NoError(t, err)
	_, err = s.ChildrenPages(ctx, []ChildrenKey{{OwnerID: r.ID, Limit: 20}})
	require.NoError(t, err)
	_, err = s.OperationsFor(ctx, []OperationsKey{{ResourceID: r.ID, Limit: 20}})
	require.NoError(t, err)
	_, err = s.DependentsFor(ctx, []DependentsKey{{ID: r.ID, Limit: 20}})
	require.NoError(t, err)
	_, err = s.ResourcesByIDs(ctx, []uuid.UUID{r.ID}) // the live hub's re-read of announced rows
	require.NoError(t, err)
	_, err = s.OperationsByIDs(ctx, []uuid.UUID{r.ID})
	require.NoError(t, err)
	_, err = s.GetOperation(ctx, r.ID) // no operation has the resource's id
	require.ErrorIs(t, err, ErrNotFound)
	_, err = s.OperationForTask(ctx, r.ID)
	require.ErrorIs(t, err, ErrNotFound)
	_, err = s.SubtreeResources(ctx, r.ID)
	require.NoError(t, err)
	_, err = s.SpecHistory(ctx, r.ID, 20)
	require.NoError(t, err)
	_, err = s.Explain(ctx, r.ID, time.Minute)
	require.NoError(t, err)
	// a rollup's reads (a broker's session)
	_, err = s.SubtreeSettled(ctx, r.ID)
	require.NoError(t, err)
	_, err = s.ComposedSubtree(ctx, r.ID)
	require.NoError(t, err)
	for _, opts := range []ListOptions{
		{}, {Phases: []resource.Phase{resource.PhaseReconciling}}, {Kind: "account"},
		{Kind: "account", Phases: []resource.Phase{resource.PhaseReady}}, {OwnerID: &r.ID},
		{Labels: map[string]string{"team": "t1"}},
	} {
		_, err := s.ListResources(ctx, opts)
		require.NoError(t, err)
	}
}

// apiApply creates name, changes its spec, reads it (apiReads), runs each
// operator verb on it and deletes it.
func apiApply(t *testing.T, s *Store, name string) {
	t.Helper()
	ctx := context.Background()
	_, _, err := s.ApplyResource(ctx, ApplyResourceInput{Kind: "account", Name: name, Labels: map[string]string{"team": "t1"},
		Spec: []byte(`{"n":1}`)})
	require.NoError(t, err)
	_, _, err = s.ApplyResource(ctx, ApplyResourceInput{Kind: "account", Name: name, Labels: map[string]string{"team": "t1"},
		Spec: []byte(`{"n":2}`)})
	require.NoError(t, err)
	apiReads(t, s, name)
	for _, verb := range []func(context.Context, string, string, string) (resource.Resource, error){
		s.Resync, s.Quarantine, s.Unquarantine, s.RequestDeletion,
	} {
		_, err := verb(ctx, "account", name, "test")
		require.NoError(t, err)
	}
}

// loadAPIRows adds what the API reads beside the fixture's resources: two
// events a row, conditions, an operation a row and an edge every other row.
func loadAPIRows(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `
INSERT INTO resource_events (resource_id, type, reason, message) SELECT id, 'Normal', 'Loaded', '' FROM resources, generate_series(1, 2);
INSERT INTO resource_conditions (resource_id, type, status) SELECT id, 'Ready', 'True' FROM resources WHERE kind = 'subnet';
INSERT INTO resource_operations (resource_id, verb, state) SELECT id, 'probe', 'Succeeded' FROM resources;
INSERT INTO resource_deps (dependent_id, dependency_id)
SELECT a.id, b.id FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM resources) a
  JOIN (SELECT id, row_number() OVER (ORDER BY id) AS n FROM resources) b ON b.n = a.n + 1
 WHERE a.n % 2 = 0`)
	require.NoError(t, err)
}

// TestPlans_APIUnderEmptiedFleetStatistics: after a fleet's teardown the
// fleet tables may be analyzed while empty, and another fleet applied; the
// planner then sees them as empty however much they hold, until their next
// ANALYZE. The API's applies, verbs and reads must still reach their rows by
// key: no Seq Scan, and no index of a fleet table read whole (the walk a
// planner takes for the outer side of a join when the table looks empty).
func TestPlans_APIUnderEmptiedFleetStatistics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	require.NoError(t, applyFixtureKinds(ctx, e.store))
	require.NoError(t, loadFixture(ctx, e.pool, 0, 10000))
	loadAPIRows(t, e.pool)
	_, err := e.pool.Exec(ctx, `ANALYZE`)
	require.NoError(t, err)
	hot := []string{"resources", "resource_phases", "resource_labels", "resource_events",
		"resource_conditions", "resource_deps", "resource_operations"}
	plantest.AnalyzeEmptied(t, e.pool, hot...)
	rec := &plantest.Recorder{}
	s := New(plantest.Pool(t, e.pool.Config(), rec), nil)
	apiApply(t, s, "late")
	// the edge batches, for resources that have edges both ways
	var dependent, dependency uuid.UUID
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT dependent_id, dependency_id FROM resource_deps LIMIT 1`).Scan(&dependent, &dependency))
	deps, err := s.DependenciesFor(ctx, []DependenciesKey{{ID: dependent, Limit: 100}})
	require.NoError(t, err)
	require.Len(t, deps[DependenciesKey{ID: dependent, Limit: 100}], 1)
	dents, err := s.DependentsFor(ctx, []DependentsKey{{ID: dependency, Limit: 20}})
	require.NoError(t, err)
	require.Len(t, dents[DependentsKey{ID: dependency, Limit: 20}], 1)
	plans := rec.Take(t)
	plantest.Check(t, plans, plantest.Spec{Hot: hot, Small: plantest.SmallRelations(t, e.pool, 64, hot...)})
	t.Log("\n" + plantest.Summary(plans))
}
