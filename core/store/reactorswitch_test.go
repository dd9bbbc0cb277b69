package store

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// A live work kind re-applied as reactor-only would strand its resources
// (nothing reconciles a reactor kind's resources): refused, override or
// not, until they are gone; a kind without resources may switch.
func TestApplyManifest_AKindWithResourcesNeverBecomesReactorOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	const work = `{"kind":"sink","reactions":[{"name":"w","trigger":"specChange","emits":["status"]}]}`
	const reactor = `{"kind":"sink","reactions":[{"name":"r","trigger":"reactor","emits":["sideEffect"]}]}`
	_, _, err := e.store.ApplyManifest(ctx, []byte(work))
	require.NoError(t, err)
	e.apply(t, ApplyResourceInput{Kind: "sink", Name: "a", Spec: json.RawMessage(`{}`)})
	gen := func() int64 {
		var n int64
		require.NoError(t, e.pool.QueryRow(ctx, `SELECT manifest_gen FROM kind_manifest WHERE kind = 'sink'`).Scan(&n))
		return n
	}
	before := gen()

	for _, accept := range []bool{false, true} {
		_, _, err = e.store.ApplyManifestWith(ctx, []byte(reactor), ManifestApplyOptions{AcceptBreaking: accept})
		var brk *BreakingChangeError
		require.True(t, errors.As(err, &brk), "acceptBreaking=%v: %v", accept, err)
		require.Equal(t, "reactor", brk.Op)
		require.Equal(t, []string{"a"}, brk.Resources)
		require.ErrorContains(t, err, "kind sink/v1 would become reactor-only but still has 1 resource(s): a")
		require.Equal(t, before, gen(), "nothing written")
	}

	e.exec(t, `DELETE FROM resources WHERE kind = 'sink'`) // as the delete sweep does once a resource is gone
	_, _, err = e.store.ApplyManifest(ctx, []byte(reactor))
	require.NoError(t, err, "with no resources left the kind may become a reactor")
}
