package control

import (
	"context"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/store/maintenance"
	"github.com/converge-run/converge/db/pgtest"
)

// A providerconfig its composition pruned while resources outside it named
// it is kept, still the root's. Once none names it any more (re-pointed or
// deleted), the reaper's orphan tick deletes it, without waiting for the
// root's next compose (which may never come), and records it on the root.
// Still named, or still emitted (never pruned), or hand-authored, a config
// stays.
func TestReaper_DeletesAPrunedConfigNoResourceNamesAnyMore(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	exec := func(sql string) {
		t.Helper()
		_, err := pool.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	exec(`INSERT INTO resources (id, kind, version, name, shard_id) VALUES
	        ('00000000-0000-0000-0000-0000000000a1', 'comp', 'v1', 'root', 1)`)
	exec(`INSERT INTO providerconfigs (kind, name, owner_id, pruned_at) VALUES
	        ('app', 'repointed', '00000000-0000-0000-0000-0000000000a1', now()),
	        ('app', 'deleted', '00000000-0000-0000-0000-0000000000a1', now()),
	        ('app', 'named', '00000000-0000-0000-0000-0000000000a1', now()),
	        ('app', 'emitted', '00000000-0000-0000-0000-0000000000a1', NULL)`)
	exec(`INSERT INTO providerconfigs (kind, name) VALUES ('app', 'hand')`)
	exec(`INSERT INTO resources (kind, version, name, shard_id, provider_config_ref) VALUES
	        ('app', 'v1', 'a', 2, 'repointed'), ('app', 'v1', 'b', 3, 'deleted'), ('app', 'v1', 'c', 4, 'named')`)
	// the kept configs' last namers go: one re-pointed, one deleted
	exec(`UPDATE resources SET provider_config_ref = NULL WHERE name = 'a'`)
	exec(`DELETE FROM resources WHERE name = 'b'`)

	r := &Reaper{Maintenance: maintenance.New(pool), Shards: allShards(), Log: zerolog.Nop()}
	r.TestSignals.Init()
	r.Tick(ctx, false)
	require.Zero(t, r.TestSignals.Ticked.WaitOrTimeout(t)["sweep_pruned_configs"], "not on a plain tick")
	r.Tick(ctx, true)
	moved := r.TestSignals.Ticked.WaitOrTimeout(t)

	rows, err := pool.Query(ctx, `SELECT name FROM providerconfigs ORDER BY name`)
	require.NoError(t, err)
	var left []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		left = append(left, n)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"emitted", "hand", "named"}, left, "the pruned configs none names are deleted")
	require.Equal(t, 2, moved["sweep_pruned_configs"])

	rows, err = pool.Query(ctx, `SELECT type || ' ' || reason || ': ' || message FROM resource_events
	                              WHERE resource_id = '00000000-0000-0000-0000-0000000000a1' ORDER BY message`)
	require.NoError(t, err)
	var events []string
	for rows.Next() {
		var e string
		require.NoError(t, rows.Scan(&e))
		events = append(events, e)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{
		"Normal ProviderConfigDeleted: providerconfig app/deleted, kept after this composition stopped emitting it, is deleted: no resource names it any more",
		"Normal ProviderConfigDeleted: providerconfig app/repointed, kept after this composition stopped emitting it, is deleted: no resource names it any more",
	}, events)
}
