package maintenance_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/shard"
)

func TestSweepExpiredOrphans_EscalatesOnlyExpiredGrace(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "leaf", orphanGraceS: 60})
	f.kind(kind{name: "net", finalizer: "net.example/teardown", orphanGraceS: 60})
	expired := ptr(t0.Add(-time.Second))

	cases := map[string]struct {
		reason    string
		row       res
		wantPhase string // "" = hard-deleted
		wantTask  bool   // a delete task was enqueued
	}{
		"ExpiredLeaf": {
			reason: "a leaf kind without a finalizer is hard-deleted when its grace elapses",
			row:    res{kind: "leaf", shard: 1, frozen: expired},
		},
		"ExpiredFinalizerKind": {
			reason:    "a finalizer kind goes through the soft delete so its Deleter runs",
			row:       res{kind: "net", shard: 2, frozen: expired},
			wantPhase: "Deleting", wantTask: true,
		},
		"InGrace": {
			reason:    "re-emit may still re-adopt it",
			row:       res{kind: "leaf", shard: 3, frozen: ptr(t0.Add(time.Second))},
			wantPhase: "Orphaned",
		},
		"Quarantined": {
			reason:    "'infinity' is never < now: quarantine is never reaped",
			row:       res{kind: "leaf", shard: 4, quarantined: true},
			wantPhase: "Quarantined",
		},
		"Live": {
			reason:    "not orphaned at all",
			row:       res{kind: "leaf", shard: 5},
			wantPhase: "Ready",
		},
		"OutsideRange": {
			reason:    "another reaper's shard",
			row:       res{kind: "leaf", shard: 77, frozen: expired},
			wantPhase: "Orphaned",
		},
	}
	ids := map[string]string{}
	for name, tc := range cases {
		ids[name] = f.res(tc.row)
	}
	n, err := f.at(t0).SweepExpiredOrphans(ctx, shard.Between(0, 15), 100)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	for name, tc := range cases {
		id := ids[name]
		if tc.wantPhase == "" {
			require.False(t, f.exists(id), "%s: %s", name, tc.reason)
			continue
		}
		require.Equal(t, tc.wantPhase, f.phase(id), "%s: %s", name, tc.reason)
		require.Equal(t, tc.wantTask, len(f.tasks(id)) == 1, "%s: %s", name, tc.reason)
	}
	require.Zero(t, f.int(`SELECT count(*) FROM resources WHERE deletion_requested_at IS NOT NULL AND frozen_until IS NOT NULL`),
		"escalation clears the grace deadline: the idle gate is empty again")

	n, err = f.at(t0.Add(100*365*24*time.Hour)).SweepExpiredOrphans(ctx, shard.Between(0, 15), 100)
	require.NoError(t, err)
	require.Equal(t, 1, n, "a century later only the in-grace row has expired; the quarantined one never does")
	require.Equal(t, "Quarantined", f.phase(ids["Quarantined"]))
}

func TestSweepExpiredOrphans_ProtectsAnOrphanedCompositesChildren(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "leaf"})
	f.kind(kind{name: "net", finalizer: "net.example/teardown"})
	parent := f.res(res{kind: "leaf", frozen: ptr(t0.Add(-time.Minute))})
	child := f.res(res{kind: "net", owner: parent, root: parent})

	n, err := f.at(t0).SweepExpiredOrphans(ctx, shard.All, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.True(t, f.exists(parent), "an orphan that owns children is soft-deleted, not cascaded away")
	require.Equal(t, []task{{taskType: "delete", trigger: "deleteRequested", gen: 1}}, f.tasks(child),
		"its finalizer child tears down first")
	f.teardown(child)
	_, err = f.at(t0).SweepDeletable(ctx, shard.All, 10)
	require.NoError(t, err)
	require.False(t, f.exists(parent))
}

// A dependent gated on an orphan that the sweep hard-deletes loses its edge
// with the row: its gate may have opened, and nothing else would send it
// through before the reaper's lagging walk. The sweep sends it, in the same
// transaction, as a compose's prune does.
func TestSweepExpiredOrphans_HardDeleteRegatesItsDependents(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "leaf", orphanGraceS: 60})
	orphan := f.res(res{kind: "leaf", shard: 1, lagging: true, frozen: ptr(t0.Add(-time.Second))})
	freed := f.res(res{kind: "leaf", shard: 2, lagging: true})
	f.dep(freed, orphan)
	other := f.res(res{kind: "leaf", shard: 3, lagging: true})
	stillGated := f.res(res{kind: "leaf", shard: 4, lagging: true})
	f.dep(stillGated, orphan)
	f.dep(stillGated, other)
	require.Empty(t, f.tasks(freed), "gated on its lagging upstream")

	n, err := f.at(t0).SweepExpiredOrphans(ctx, shard.All, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.False(t, f.exists(orphan))
	require.Equal(t, []task{{taskType: "reconcile", trigger: "specChange", gen: 1}}, f.tasks(freed),
		"its last upstream gone, the dependent is queued by the sweep itself")
	require.Empty(t, f.tasks(stillGated), "a dependent still gated on another lagging upstream stays gated")
}
