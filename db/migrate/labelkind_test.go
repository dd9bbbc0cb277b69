package migrate_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/db/migrate"
	"github.com/converge-run/converge/db/pgtest"
)

// TestMigration00025_EveryLabelRowGetsItsKindLabel: a kind + label page
// reads idx_resource_labels_kind only, so a label row without its
// kind_label is missing from every such page. The rows written before the
// column (00026 fills them) and those the previous release's trigger
// bodies write after it, until the new bodies are in (the fill trigger of
// 00025 sets them), all get theirs.
func TestMigration00025_EveryLabelRowGetsItsKindLabel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	upTo(t, url, 25)
	conn := connect(t, url)
	exec := func(sql string) {
		t.Helper()
		_, err := conn.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	// The previous release's rows: resources and their label rows as its
	// trigger wrote them (the triggers here are this release's bodies,
	// written for the column, so they are off while the rows go in).
	exec(`SET session_replication_role = replica`)
	exec(`INSERT INTO resources (id, kind, version, name, labels, shard_id, created_at)
	      VALUES ('00000000-0000-0000-0000-000000000001', 'vpc', 'v1', 'a', '{"zone":"a","env":"prod"}', 1, '2026-01-01'),
	             ('00000000-0000-0000-0000-000000000002', 'subnet', 'v1', 'b', '{"zone":"a"}', 1, '2026-01-02')`)
	// enough rows for many of the backfill's batches (100 pages each)
	exec(`INSERT INTO resources (kind, version, name, labels, shard_id, created_at)
	      SELECT 'route', 'v1', 'r-' || g, '{"team":"t"}', 1, '2025-01-01' FROM generate_series(1, 40000) g`)
	exec(`INSERT INTO resource_labels (resource_id, key, value, created_at)
	      SELECT r.id, l.key, l.value, r.created_at FROM resources r, jsonb_each_text(r.labels) l`)
	var pages int
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_relation_size('resource_labels') / 8192`).Scan(&pages))
	require.Greater(t, pages, 200, "the label rows span several batches")
	exec(`RESET session_replication_role`)

	r, err := migrate.Open(url, nil)
	require.NoError(t, err)
	defer r.Close()
	_, err = r.Up(ctx)
	require.NoError(t, err)

	// A row as the previous release's bodies write it (no kind_label), as
	// they do until the function set's bodies are replaced.
	exec(`SET session_replication_role = replica`)
	exec(`INSERT INTO resources (id, kind, version, name, labels, shard_id, created_at)
	      VALUES ('00000000-0000-0000-0000-000000000003', 'route', 'v1', 'c', '{"zone":"b"}', 1, '2026-01-03')`)
	exec(`RESET session_replication_role`)
	exec(`INSERT INTO resource_labels (resource_id, key, value, created_at)
	      VALUES ('00000000-0000-0000-0000-000000000003', 'zone', 'b', '2026-01-03')`)

	rows, err := conn.Query(ctx, `SELECT coalesce(kind_label, 'NULL') FROM resource_labels WHERE key <> 'team' ORDER BY 1`)
	require.NoError(t, err)
	var got []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		got = append(got, s)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"route:zone=b", "subnet:zone=a", "vpc:env=prod", "vpc:zone=a"}, got)
	var filled int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM resource_labels WHERE kind_label = 'route:team=t'`).Scan(&filled))
	require.Equal(t, 40000, filled, "every batch's rows")
}
