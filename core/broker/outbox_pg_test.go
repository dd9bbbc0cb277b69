package broker

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/store/pipeline"
	"github.com/converge-run/converge/db/pgtest"
)

// Against the real store: a batch holding a result Postgres cannot store (a
// status with an escaped lone surrogate, which jsonb refuses) is refused as
// a whole by the append and written again without it — the invalid result
// alone fails, and the two batched with it are in the outbox.
func TestOutboxWriter_AnInvalidResultFailsAloneAgainstTheStore(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool := pgtest.Pool(t)
	_, err := pool.Exec(ctx, `INSERT INTO kind_manifest (kind, version, manifest) VALUES ('vpc', 'v1',
	    '{"kind":"vpc","reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}')`)
	require.NoError(t, err)
	ids := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	for i, id := range ids {
		_, err = pool.Exec(ctx, `INSERT INTO resources (id, kind, version, name, spec, labels, shard_id)
		                         VALUES ($1, 'vpc', 'v1', $2, '{}', '{}', shard_of($1))`, id, "vpc-"+string(rune('a'+i)))
		require.NoError(t, err)
	}
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT schedule_eligible($1::uuid[], now())`, ids).Scan(&n))
	require.Equal(t, 3, n)
	ps := pipeline.New(pool)
	tasks, err := ps.Claim(ctx, pipeline.Lease{WorkerID: "broker-1", Lo: 0, Hi: 255},
		pipeline.Batch{Kind: "vpc", Version: "v1", TaskType: pipeline.TaskReconcile, Max: 3})
	require.NoError(t, err)
	require.Len(t, tasks, 3)

	w := newOutboxWriter(ps.AppendOutbox)
	errs := make(map[uuid.UUID]chan error, 3)
	for i, tk := range tasks {
		status := json.RawMessage(`{"ok":true}`)
		if i == 1 {
			status = json.RawMessage(`{"name":"\ud800"}`)
		}
		done := make(chan error, 1)
		errs[tk.Key.ResourceID] = done
		// Queued before the writer runs: the three go out in one batch.
		require.NoError(t, w.queue(tk.Result(status), func(err error) { done <- err }))
	}
	go func() { _ = w.Run(ctx) }()
	var written []uuid.UUID
	for i, tk := range tasks {
		select {
		case err := <-errs[tk.Key.ResourceID]:
			if i == 1 {
				require.ErrorIs(t, err, pipeline.ErrInvalidResult)
				continue
			}
			require.NoError(t, err)
			written = append(written, tk.Key.ResourceID)
		case <-ctx.Done():
			t.Fatal("a result's write never ended")
		}
	}
	rows, err := pool.Query(ctx, `SELECT resource_id FROM work_outbox`)
	require.NoError(t, err)
	var inOutbox []uuid.UUID
	for rows.Next() {
		var id uuid.UUID
		require.NoError(t, rows.Scan(&id))
		inOutbox = append(inOutbox, id)
	}
	require.NoError(t, rows.Err())
	require.ElementsMatch(t, written, inOutbox, "the two valid results, and only they")
}
