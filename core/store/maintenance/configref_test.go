package maintenance_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/maintenance"
)

// dangle names providerconfig kind/name from id and then deletes the config
// under it: a ref left dangling before the API and the keep-named trigger
// refused that (nothing new can make one).
func (f *fixture) dangle(id, kind, name string) {
	f.t.Helper()
	f.exec(`INSERT INTO providerconfigs (kind, name, spec) VALUES ($1, $2, '{}')`, kind, name)
	f.exec(`UPDATE resources SET provider_config_ref = $2 WHERE id = $1`, id, name)
	f.exec(`DELETE FROM providerconfigs WHERE kind = $1 AND name = $2`, kind, name)
}

// heldFor is the reason of id's Synced=False condition, "" without one.
func (f *fixture) heldFor(id string) string {
	f.t.Helper()
	var reason string
	_ = f.db.QueryRow(ctx, `SELECT coalesce(reason, '') FROM resource_conditions
	                            WHERE resource_id = $1 AND type = 'Synced' AND status = 'False'`, id).Scan(&reason)
	return reason
}

func TestRequeueForResync_HoldsARowWhoseConfigIsMissing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "probe", resyncSecs: 60})
	const interval = time.Minute
	old := t0.Add(-2 * interval)
	id := f.res(res{kind: "probe", shard: 3, updatedAt: old})
	f.dangle(id, "probe", "gone")

	n, err := f.at(t0).RequeueForResync(ctx, maintenance.Resync{Kind: "probe", Version: "v1", Interval: interval},
		shard.Between(3, 3), 100)
	require.NoError(t, err)
	require.Zero(t, n, "not re-observed with the kind's default config")
	require.Empty(t, f.tasks(id))
	require.Equal(t, "ProviderConfigNotFound", f.heldFor(id))
	require.Equal(t, 1, f.int(`SELECT count(*) FROM resources WHERE id = $1 AND last_resync_at = $2`, id, t0),
		"stamped all the same: a held row does not come first in every pass")
}

func TestTeardown_HoldsTheDeleteOfARowWhoseConfigIsMissing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "net", finalizer: "net.example/teardown"})
	id := f.res(res{kind: "net", name: "n"})
	f.dangle(id, "net", "gone")
	f.int(`SELECT request_resource_deletion($1, $2)`, id, t0)

	require.Empty(t, f.tasks(id), "no teardown with the kind's default config")
	require.Equal(t, "ProviderConfigNotFound", f.heldFor(id))
	require.Equal(t, "Deleting", f.phase(id))

	f.exec(`INSERT INTO providerconfigs (kind, name, spec) VALUES ('net', 'gone', '{}')`)
	require.Equal(t, 1, f.int(`SELECT teardown_advance(ARRAY[$1::uuid], 0, 255, $2, NULL)`, id, t0.Add(time.Second)),
		"the config applied again: the backstop's next pass queues the teardown")
	require.Len(t, f.tasks(id), 1)
}

func TestRequeueFailedAndPending_FailsALostOperationWhoseConfigIsMissing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "leaf"})
	id := f.res(res{shard: 1})
	f.dangle(id, "leaf", "gone")
	var op string
	require.NoError(t, f.db.QueryRow(ctx, `INSERT INTO resource_operations (resource_id, verb, state, created_at, updated_at)
	                                        VALUES ($1, 'flip', 'Pending', $2, $2) RETURNING id::text`,
		id, t0.Add(-time.Hour)).Scan(&op))

	n, err := f.at(t0).RequeueFailedAndPending(ctx, shard.Between(0, 15), 100, time.Minute)
	require.NoError(t, err)
	require.Zero(t, n, "not queued again with the kind's default config")
	require.Empty(t, f.tasks(id))
	var state, msg string
	require.NoError(t, f.db.QueryRow(ctx, `SELECT state, coalesce(error, '') FROM resource_operations WHERE id = $1`, op).
		Scan(&state, &msg))
	require.Equal(t, "Failed", state, "refused as runOperation refuses it now")
	require.Contains(t, msg, "providerconfig leaf/gone")
}
