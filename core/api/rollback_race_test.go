package api_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// A rollback reads the resource and the kept generation in the transaction
// that applies it, under the resource's row lock: a resource deleted (or
// deleted and created anew under its name) while the rollback waits for
// that lock is NOT_FOUND. The reads used to run before the apply's
// transaction, so the rollback then created the deleted resource again, or
// copied the old resource's generation onto the new one as a "rollback" of
// a generation the new one never had.
func TestRollback_ReadsAndWritesInOneTransaction(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		reason    string
		meanwhile string
		wantSpec  string // "" = no resource leaf/a afterwards
	}{
		"deleted": {
			reason:    "the deleted resource stays deleted",
			meanwhile: `DELETE FROM resources WHERE kind = 'leaf' AND name = 'a'`,
		},
		"recreated": {
			reason: "the new resource keeps its own spec",
			meanwhile: `WITH gone AS (DELETE FROM resources WHERE kind = 'leaf' AND name = 'a' RETURNING 1),
				n AS (SELECT gen_random_uuid() AS id FROM gone)
				INSERT INTO resources (id, kind, version, name, spec, shard_id)
				SELECT id, 'leaf', 'v1', 'a', '{"size": 9}', shard_of(id) FROM n`,
			wantSpec: `{"size": 9}`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.manifest(workerKind)
			e.apply("leaf", "a", `{size: 1}`)
			e.apply("leaf", "a", `{size: 2}`)

			tx, err := e.pool.BeginTx(e.ctx, pgx.TxOptions{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
			_, err = tx.Exec(e.ctx, `SELECT 1 FROM resources WHERE kind = 'leaf' AND name = 'a' FOR UPDATE`)
			require.NoError(t, err)

			answer := make(chan gqlResponse, 1)
			go func() {
				answer <- e.do(adminToken, `mutation { rollbackResource(kind: "leaf", name: "a", toGeneration: 1) { id generation } }`, nil)
			}()
			e.waitBlocked(1) // the rollback waits for the row
			_, err = tx.Exec(e.ctx, tc.meanwhile)
			require.NoError(t, err)
			require.NoError(t, tx.Commit(e.ctx))

			var r gqlResponse
			select {
			case r = <-answer:
			case <-time.After(30 * time.Second):
				t.Fatal("the rollback did not answer")
			}
			require.Equal(t, "NOT_FOUND", r.code(), "%s: answered %s %+v", tc.reason, r.Data, r.Errors)

			var got struct {
				Resource *struct {
					Spec    json.RawMessage
					History struct{ Items []struct{ Reason string } }
				}
			}
			e.ok(`{ resource(kind: "leaf", name: "a") { spec history { items { reason } } } }`, nil, &got)
			if tc.wantSpec == "" {
				require.Nil(t, got.Resource, tc.reason)
				return
			}
			require.NotNil(t, got.Resource, tc.reason)
			require.JSONEq(t, tc.wantSpec, string(got.Resource.Spec), tc.reason)
			require.Empty(t, got.Resource.History.Items, tc.reason)
		})
	}
}
