package migrate_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/db/migrate"
	"github.com/converge-run/converge/db/pgtest"
)

// TestMigration00027_EveryLabelRowGetsItsKindLabel: a kind + label page
// reads idx_resource_labels_kind only, so a label row without its
// kind_label is missing from every such page. The rows written before the
// column (00028 fills them) and those the previous release's trigger
// bodies write after it, until the new bodies are in (the fill trigger of
// 00027 sets them), all get theirs.
func TestMigration00027_EveryLabelRowGetsItsKindLabel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	upTo(t, url, 27)
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

// TestMigration00028_TheBackfillHoldsOnlyItsBatchsRows: the backfill
// commits a batch at a time, so while it waits for a row some transaction
// holds, the rows of the batches before are written and free — a delete of
// a labelled resource there need not wait for the whole backfill (one
// UPDATE of every label row held them all until it committed: minutes at
// 1M resources).
func TestMigration00028_TheBackfillHoldsOnlyItsBatchsRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	upTo(t, url, 28) // the column is there, the rows written before it are not filled
	conn := connect(t, url)
	for _, sql := range []string{
		`SET session_replication_role = replica`,
		`INSERT INTO resources (kind, version, name, labels, shard_id, created_at)
		 SELECT 'route', 'v1', 'r-' || g, '{"team":"t"}', 1, '2025-01-01' FROM generate_series(1, 20000) g`,
		`INSERT INTO resource_labels (resource_id, key, value, created_at)
		 SELECT r.id, l.key, l.value, r.created_at FROM resources r, jsonb_each_text(r.labels) l`,
		`RESET session_replication_role`,
	} {
		_, err := conn.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	var first, last string
	require.NoError(t, conn.QueryRow(ctx, `SELECT (SELECT resource_id::text FROM resource_labels ORDER BY ctid LIMIT 1),
	                                             (SELECT resource_id::text FROM resource_labels ORDER BY ctid DESC LIMIT 1)`).Scan(&first, &last))

	// A transaction holds the last page's row: the backfill's last batch
	// waits for it.
	holder := connect(t, url)
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT 1 FROM resource_labels WHERE resource_id = $1 FOR UPDATE`, last)
	require.NoError(t, err)

	r, err := migrate.Open(url, nil)
	require.NoError(t, err)
	defer r.Close()
	done := make(chan error, 1)
	go func() {
		_, err := r.Up(ctx)
		done <- err
	}()
	probe := connect(t, url)
	require.Eventually(t, func() bool {
		var n int
		err := probe.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		    WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%SET kind_label%'`).Scan(&n)
		return err == nil && n > 0
	}, time.Minute, 10*time.Millisecond, "the backfill waits for the held row")

	// The first batch's row: written, committed, and locked by nobody.
	var kindLabel string
	require.NoError(t, pgx.BeginFunc(ctx, connect(t, url), func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT kind_label FROM resource_labels WHERE resource_id = $1 FOR UPDATE NOWAIT`, first).Scan(&kindLabel)
	}), "the first batch's row is free while the backfill waits")
	require.Equal(t, "route:team=t", kindLabel)

	require.NoError(t, tx.Rollback(ctx))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(2 * time.Minute):
		t.Fatal("the backfill did not end once the row was released")
	}
	var missing int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM resource_labels WHERE kind_label IS NULL`).Scan(&missing))
	require.Zero(t, missing)
}
