package cli

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A DEGRADED root ends a wait only while some child is still not READY: once
// every child recovered (a transient failure retried successfully) the
// root's own rollup back to READY is on its way, and the wait goes on.
func TestFollowerVerdict_DegradedRootWithEveryChildReadyKeepsWaiting(t *testing.T) {
	t.Parallel()
	row := func(id string, phase Phase, gen, synced int) WaitRow {
		var r WaitRow
		r.Id, r.Kind, r.Name, r.Phase, r.Generation, r.SyncedGeneration = id, "route", id, phase, gen, synced
		return r
	}
	root := row("root", PhaseDegraded, 1, 1)
	root.Kind = "bom"
	f := &follower{target: ref{kind: "bom", name: "root"}, root: root,
		children: map[string]WaitRow{"a": row("a", PhaseReady, 1, 1), "b": row("b", PhaseReady, 1, 1)}}
	done, err := f.verdict()
	require.False(t, done, "every child READY: the root's rollup will recover it")
	require.NoError(t, err)

	f.children["b"] = row("b", PhaseDegraded, 1, 1)
	done, err = f.verdict()
	require.True(t, done, "a child settled DEGRADED keeps the root DEGRADED")
	require.ErrorContains(t, err, "cannot become READY")
}
