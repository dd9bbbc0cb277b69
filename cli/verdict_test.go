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

// A leaf (nothing below it) that settles DEGRADED at its live spec ends the
// wait with an error at once, as apply --wait's help promises; while its
// reconcile is still on its way, the wait goes on.
func TestFollowerVerdict_DegradedLeafEndsTheWait(t *testing.T) {
	t.Parallel()
	var leaf WaitRow
	leaf.Id, leaf.Kind, leaf.Name, leaf.Phase, leaf.Generation, leaf.SyncedGeneration = "l", "route", "l", PhaseDegraded, 2, 2
	f := &follower{target: ref{kind: "route", name: "l"}, root: leaf, children: map[string]WaitRow{},
		progress: &WatchSubtreeSubtreeProgress{Total: 0}}
	done, err := f.verdict()
	require.True(t, done, "a settled DEGRADED leaf cannot become READY by waiting")
	require.ErrorContains(t, err, "resource/route/l cannot become READY: it is DEGRADED")

	f.root.SyncedGeneration = 1
	done, err = f.verdict()
	require.False(t, done, "a new generation is still being reconciled")
	require.NoError(t, err)

	f.root.SyncedGeneration = 2
	f.progress = &WatchSubtreeSubtreeProgress{Total: 2}
	done, _ = f.verdict()
	require.False(t, done, "something below it (not read yet): a root's rollup, not a leaf's verdict")
}
