package live_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/live"
	"github.com/converge-run/converge/core/resource"
)

// insertOperation writes a Pending operation on a new leaf.
func (e *hubEnv) insertOperation() uuid.UUID {
	e.t.Helper()
	res := e.insert("leaf", "operated-"+uuid.NewString()[:8], uuid.Nil, uuid.Nil)
	op := uuid.New()
	e.exec(`INSERT INTO resource_operations (id, resource_id, verb) VALUES ($1, $2, 'restart')`, op, res)
	return op
}

// An operation subscriber that does not read until its operation finished
// still gets the final state: its buffer (8) filled with the states before,
// the final one is owed and pushed once it fits, and only then does the
// subscription end. Before, the hub closed the channel after a push of the
// final state that did not fit, and the client never saw SUCCEEDED.
func TestOperationUpdated_FullBufferStillEndsWithTheFinalState(t *testing.T) {
	t.Parallel()
	e := startHub(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	id := e.insertOperation()
	ch, err := live.SubscribeOperation(ctx, e.hub, id, func(op resource.Operation) resource.Operation { return op })
	require.NoError(t, err)
	waitLen(t, ch, 1) // the current state at once
	for i := 2; i <= 8; i++ {
		e.exec(`UPDATE resource_operations SET state = 'Running', updated_at = now() + $2 * interval '1 ms' WHERE id = $1`, id, i)
		waitLen(t, ch, i)
	}
	e.exec(`UPDATE resource_operations SET state = 'Succeeded', finished_at = now(), updated_at = now() + interval '1 s'
		WHERE id = $1`, id)
	waitOwed(t, e.hub, 1)

	last := next(t, ch, "the final state", func(op resource.Operation) bool { return op.State.Final() })
	require.Equal(t, resource.OperationSucceeded, last.State)
	select {
	case _, open := <-ch:
		require.False(t, open, "the subscription ends after the final state")
	case <-ctx.Done():
	}
	waitOwed(t, e.hub, 0)
}
