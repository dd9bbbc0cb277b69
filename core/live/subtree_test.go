package live_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/live"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/notify"
	"github.com/converge-run/converge/db/pgtest"
)

// hubEnv is a real hub on a private database: its one LISTEN connection,
// the hub loop, and a pool to write rows with plain SQL.
type hubEnv struct {
	t   *testing.T
	db  *pgxpool.Pool
	hub *live.Hub
}

func startHub(t *testing.T) *hubEnv {
	t.Helper()
	return startHubWith(t, live.Options{CountsInterval: 10 * time.Millisecond, MemberPoll: time.Hour})
}

// startHubWith is startHub with the hub's options.
func startHubWith(t *testing.T, opts live.Options) *hubEnv {
	t.Helper()
	url := pgtest.URL(t)
	db := pgtest.PoolFor(t, url)
	log := zerolog.Nop()
	l := notify.NewListener(db, log)
	h := live.NewHub(l, db, log, live.WithOptions(opts))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = h.Run(ctx) }()
	<-h.Started()
	go func() { _ = l.Run(ctx) }()
	select {
	case <-l.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("the listener did not become ready")
	}
	e := &hubEnv{t: t, db: db, hub: h}
	e.exec(`INSERT INTO kind_manifest (kind, version, manifest) VALUES
		('tree', 'v1', '{"kind":"tree","reactions":[{"name":"c","trigger":"specChange","emits":["children","status"]}]}'),
		('leaf', 'v1', '{"kind":"leaf","reactions":[{"name":"w","trigger":"specChange","emits":["status"]}]}')`)
	return e
}

func (e *hubEnv) exec(sql string, args ...any) {
	e.t.Helper()
	_, err := e.db.Exec(context.Background(), sql, args...)
	require.NoError(e.t, err, sql)
}

// insert writes one resource (owner and root may be uuid.Nil for none).
func (e *hubEnv) insert(kind, name string, owner, root uuid.UUID) uuid.UUID {
	e.t.Helper()
	id := uuid.New()
	var o, r *uuid.UUID
	if owner != uuid.Nil {
		o = &owner
	}
	if root != uuid.Nil {
		r = &root
	}
	e.exec(`INSERT INTO resources (id, kind, version, name, shard_id, owner_id, root_id)
		VALUES ($1, $2, 'v1', $3, shard_of($1), $4, $5)`, id, kind, name, o, r)
	return id
}

// next waits for the subscription's next push that satisfies ok.
func next[T any](t *testing.T, ch <-chan T, what string, ok func(T) bool) T {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case v, open := <-ch:
			require.True(t, open, "%s: the subscription ended", what)
			if ok(v) {
				return v
			}
		case <-deadline:
			t.Fatalf("%s: no such push within 30s", what)
		}
	}
}

func count(p live.SubtreeProgress, kind string, phase resource.Phase) int {
	for _, c := range p.Counts {
		if c.Kind == kind && c.Phase == phase {
			return c.Count
		}
	}
	return 0
}

// TestSubtreeProgress_FollowsTheWholeSubtreeFromTheAnnouncements: counts by
// kind and phase over every level, READY over total, failures named, a
// teardown to its end — from the announcements the hub re-reads anyway, so
// two subscribers of one root share one tree.
func TestSubtreeProgress_FollowsTheWholeSubtreeFromTheAnnouncements(t *testing.T) {
	t.Parallel()
	e := startHub(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := e.insert("tree", "root", uuid.Nil, uuid.Nil)
	mid := e.insert("tree", "mid", root, root)
	e.insert("leaf", "pre-existing", mid, root)
	other := e.insert("tree", "other", uuid.Nil, uuid.Nil)

	p1 := live.SubscribeSubtree(ctx, e.hub, root, func(p live.SubtreeProgress) live.SubtreeProgress { return p })
	p2 := live.SubscribeSubtree(ctx, e.hub, root, func(p live.SubtreeProgress) live.SubtreeProgress { return p })
	first := next(t, p1, "the first push", func(live.SubtreeProgress) bool { return true })
	require.NotNil(t, first.Root)
	require.Equal(t, "root", first.Root.Name)
	require.Equal(t, 2, first.Total, "mid and the pre-existing leaf, the root not counted")
	next(t, p2, "the second subscriber's first push", func(p live.SubtreeProgress) bool { return p.Total == 2 })

	var leaves []uuid.UUID
	for i := range 10 {
		leaves = append(leaves, e.insert("leaf", fmt.Sprintf("l%d", i), mid, root))
	}
	e.insert("leaf", "elsewhere", other, other)
	got := next(t, p1, "ten new grandchildren", func(p live.SubtreeProgress) bool { return p.Total == 12 })
	require.Equal(t, 11, count(got, "leaf", resource.PhaseReconciling), "a leaf of another root is not counted")

	e.exec(`UPDATE resources SET synced_gen = generation WHERE id = ANY($1)`, leaves[:6])
	e.exec(`INSERT INTO resource_conditions (resource_id, type, status, reason, message, observed_generation)
		VALUES ($1, 'Synced', 'False', 'ReconcileError', 'quota exceeded', 1)`, leaves[9])
	e.exec(`UPDATE resources SET failure_gen = generation, failure_terminal = true WHERE id = $1`, leaves[9])
	got = next(t, p1, "six READY and one FAILED", func(p live.SubtreeProgress) bool { return p.Ready == 6 && p.FailureCount == 1 })
	require.Equal(t, 6, count(got, "leaf", resource.PhaseReady))
	require.Equal(t, "l9", got.Failures[0].Name)
	require.Equal(t, resource.PhaseFailed, got.Failures[0].Phase)
	require.True(t, got.Failures[0].FailureTerminal)
	require.Equal(t, "ReconcileError", got.Failures[0].Reason, "the failure's reason rides the push")
	require.Equal(t, "quota exceeded", got.Failures[0].Message)

	// a new message on the same failure (the row written again) is pushed
	e.exec(`UPDATE resource_conditions SET message = 'quota exceeded in us-east-1' WHERE resource_id = $1`, leaves[9])
	e.exec(`UPDATE resources SET updated_at = clock_timestamp() + interval '1 second' WHERE id = $1`, leaves[9])
	next(t, p1, "the failure's new message", func(p live.SubtreeProgress) bool {
		return len(p.Failures) == 1 && p.Failures[0].Message == "quota exceeded in us-east-1"
	})
	// a failure with no stored condition is named with the synthesized reason
	e.exec(`UPDATE resources SET failure_gen = generation WHERE id = $1`, leaves[8])
	got = next(t, p1, "a second failure", func(p live.SubtreeProgress) bool { return p.FailureCount == 2 })
	require.Equal(t, "l8", got.Failures[0].Name)
	require.Equal(t, resource.ReasonReconcileError, got.Failures[0].Reason)
	require.NotEmpty(t, got.Failures[0].Message)
	next(t, p2, "the other subscriber sees the same", func(p live.SubtreeProgress) bool { return p.Ready == 6 && p.FailureCount >= 1 })

	e.exec(`DELETE FROM resources WHERE id = ANY($1)`, leaves[:3])
	next(t, p1, "three leaves deleted", func(p live.SubtreeProgress) bool { return p.Total == 9 })
	e.exec(`DELETE FROM resources WHERE id = $1`, root) // ON DELETE CASCADE takes the subtree
	next(t, p1, "the root gone", func(p live.SubtreeProgress) bool { return p.Root == nil && p.Total == 0 })
}

// TestResourceChanged_RootFilterKeepsTheWholeSubtree: rootId keeps the
// root's changes and its descendants' at every level, deletes included,
// and nothing of another root.
func TestResourceChanged_RootFilterKeepsTheWholeSubtree(t *testing.T) {
	t.Parallel()
	e := startHub(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := e.insert("tree", "root", uuid.Nil, uuid.Nil)
	other := e.insert("tree", "other", uuid.Nil, uuid.Nil)
	ch := live.SubscribeResources(ctx, e.hub, live.ResourceFilter{RootID: &root}, func(c live.Change) live.Change { return c })

	mid := e.insert("tree", "mid", root, root)
	leaf := e.insert("leaf", "leaf", mid, root)
	e.insert("leaf", "stranger", other, other)
	e.exec(`UPDATE resources SET synced_gen = generation WHERE id IN ($1, $2)`, root, leaf)
	seen := map[string]bool{}
	next(t, ch, "mid, leaf and the root's update", func(c live.Change) bool {
		require.NotEqual(t, "stranger", c.Name, "another root's leaf")
		if c.Type == live.Upserted {
			seen[c.Name+"/"+string(c.Resource.Phase)] = true
		}
		return seen["mid/"+string(resource.PhaseReconciling)] && seen["leaf/"+string(resource.PhaseReady)] && seen["root/"+string(resource.PhaseReady)]
	})
	e.exec(`DELETE FROM resources WHERE id = $1`, leaf)
	del := next(t, ch, "the leaf's delete", func(c live.Change) bool { return c.Type == live.Deleted })
	require.Equal(t, "leaf", del.Name)
	require.Equal(t, root, *del.RootID)
}

// TestCatalogs_PushedWholeOnEveryChange: kinds (manifest applies and policy
// edits), provider configs and reactor bindings are pushed at once, then on
// every change, each list read once per distinct filter.
func TestCatalogs_PushedWholeOnEveryChange(t *testing.T) {
	t.Parallel()
	e := startHub(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := store.New(e.db, e.db)

	kinds := live.SubscribeKinds(ctx, e.hub, func(ks []store.Kind) []store.Kind { return ks })
	next(t, kinds, "the kinds at once", func(ks []store.Kind) bool { return len(ks) == 2 })
	_, err := st.UpdateKindConfig(ctx, "leaf", "v1", store.KindConfigPatch{MaxInflight: ptr(7)})
	require.NoError(t, err)
	next(t, kinds, "a policy edit", func(ks []store.Kind) bool {
		for _, k := range ks {
			if k.Name == "leaf" {
				return k.Config.MaxInflight == 7
			}
		}
		return false
	})

	pcs := live.SubscribeProviderConfigs(ctx, e.hub, "leaf", func(ps []store.ProviderConfig) []store.ProviderConfig { return ps })
	next(t, pcs, "no configs yet", func(ps []store.ProviderConfig) bool { return len(ps) == 0 })
	_, _, err = st.ApplyProviderConfig(ctx, store.ProviderConfigInput{Kind: "leaf", Name: "default", IsDefault: true, Spec: []byte(`{}`)})
	require.NoError(t, err)
	next(t, pcs, "the new config", func(ps []store.ProviderConfig) bool { return len(ps) == 1 && ps[0].Name == "default" })

	rbs := live.SubscribeReactorBindings(ctx, e.hub, "", "", func(bs []store.ReactorBinding) []store.ReactorBinding { return bs })
	next(t, rbs, "no bindings yet", func(bs []store.ReactorBinding) bool { return len(bs) == 0 })
	e.exec(`INSERT INTO kind_manifest (kind, version, manifest) VALUES
		('sink', 'v1', '{"kind":"sink","reactions":[{"name":"r","trigger":"reactor","emits":["sideEffect"]}]}')`)
	e.exec(`INSERT INTO reactor_bindings (name, watch_kind, transition, reactor) VALUES ('b1', 'leaf', 'failed', 'sink')`)
	next(t, rbs, "the new binding", func(bs []store.ReactorBinding) bool { return len(bs) == 1 && bs[0].Name == "b1" })
	next(t, kinds, "the new kind", func(ks []store.Kind) bool { return len(ks) == 3 })
	e.exec(`DELETE FROM reactor_bindings`)
	next(t, rbs, "the binding deleted", func(bs []store.ReactorBinding) bool { return len(bs) == 0 })
}

func ptr[T any](v T) *T { return &v }
