package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/store"
)

// breakingNet requires net's cidr to be an integer: the children composed
// below (cidr a string) violate it.
const breakingNet = `{"kind":"net","spec_schema":{"type":"object","properties":{"cidr":{"type":"integer"}}},
 "reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`

// waitingOn waits until a backend is blocked on a lock running a statement
// containing query, or done is closed.
func (f *fx) waitingOn(query string, done <-chan struct{}) bool {
	f.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return false
		default:
		}
		var n int
		require.NoError(f.t, f.pool.QueryRow(f.ctx, `SELECT count(*) FROM pg_stat_activity
		  WHERE datname = current_database() AND wait_event_type = 'Lock' AND strpos(query, $1) > 0`, query).Scan(&n))
		if n > 0 {
			return true
		}
		time.Sleep(5 * time.Millisecond) // polling pg_stat_activity for the wait
	}
	f.t.Fatalf("no backend came to wait on a lock in %q", query)
	return false
}

// A compose writing children while a breaking re-apply of their kind runs
// its schema-stability gate: the gate waits for the compose (holding the
// kind row's key-share lock from before it validated the children), scans
// them once they are committed, and refuses the re-apply naming them. No
// stored resource ends up violating an accepted schema.
func TestSchemaGate_WaitsForAComposeWritingChildren(t *testing.T) {
	t.Parallel()
	f, task := composeFx(t)
	ss := store.New(f.pool, nil)

	// Hold the compose at its last write (its event), children written.
	blocker, err := f.pool.Begin(f.ctx)
	require.NoError(t, err)
	defer func() { _ = blocker.Rollback(context.Background()) }()
	_, err = blocker.Exec(f.ctx, `LOCK TABLE resource_events IN SHARE MODE`)
	require.NoError(t, err)

	composed := composeNetAsync(f, task)
	f.waitingOn("INSERT INTO resource_events", nil)

	applied := make(chan error, 1)
	applyDone := make(chan struct{})
	go func() {
		_, _, err := ss.ApplyManifest(f.ctx, []byte(breakingNet))
		applied <- err
		close(applyDone)
	}()
	require.True(t, f.waitingOn("FROM kind_manifest WHERE kind = $1 AND version = $2 FOR UPDATE", applyDone),
		"the gate waits for the compose's key-share lock (it must not scan past the uncommitted children)")
	require.NoError(t, blocker.Commit(f.ctx))
	require.NoError(t, <-composed)

	err = <-applied
	var brk *store.BreakingChangeError
	require.True(t, errors.As(err, &brk), "refused: %v", err)
	require.Equal(t, []string{"net-a"}, brk.Resources)
	k, err := ss.GetKind(f.ctx, "net", "v1")
	require.NoError(t, err)
	require.Nil(t, k.Manifest.SpecSchema, "the breaking schema was not accepted")
}

// The other order: a re-apply holding the kind row (its gate done, not yet
// committed) makes a compose wait, and the compose validates its children
// against the schema the re-apply committed, so it is refused, not written.
func TestSchemaGate_AComposeAfterTheGateValidatesAgainstTheNewSchema(t *testing.T) {
	t.Parallel()
	f, task := composeFx(t)
	gate, err := f.pool.Begin(f.ctx)
	require.NoError(t, err)
	defer func() { _ = gate.Rollback(context.Background()) }()
	_, err = gate.Exec(f.ctx, `SELECT 1 FROM kind_manifest WHERE kind = 'net' AND version = 'v1' FOR UPDATE`)
	require.NoError(t, err)
	_, err = gate.Exec(f.ctx, `UPDATE kind_manifest SET manifest = $1::jsonb WHERE kind = 'net' AND version = 'v1'`, breakingNet)
	require.NoError(t, err)

	composed := composeNetAsync(f, task)
	f.waitingOn("FOR KEY SHARE OF m", nil)
	require.NoError(t, gate.Commit(f.ctx))
	err = <-composed
	var ce *ComposeError
	require.True(t, errors.As(err, &ce), "refused against the new schema: %v", err)
	var n int
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT count(*) FROM resources WHERE kind = 'net'`).Scan(&n))
	require.Zero(t, n, "no child written against the replaced schema")
}

// composeNetAsync applies a composition of one net child in a goroutine;
// the channel gets its error.
func composeNetAsync(f *fx, task Task) <-chan error {
	composed := make(chan error, 1)
	go func() {
		_, err := f.st.ApplyCompose(f.ctx, task, Composition{Children: []Child{
			{Kind: "net", Name: "net-a", Spec: json.RawMessage(`{"cidr":"10.0.0.0/16"}`)}}})
		composed <- err
	}()
	return composed
}
