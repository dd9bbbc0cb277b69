package broker

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
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
	ps, tasks := claimedVPCs(ctx, t, pool, "broker-1", 3)

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
	inOutbox, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	require.ElementsMatch(t, written, inOutbox, "the two valid results, and only they")
}
