package app_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/membership"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/db/pgtest"
)

// soleOwner reports whether exactly one live member of role is registered
// and its reported range is the whole [0,256).
func soleOwner(t *testing.T, ms *membership.Store, role string) bool {
	t.Helper()
	members, err := ms.ListLive(context.Background(), membership.DefaultLiveness)
	require.NoError(t, err)
	var mine []membership.Member
	for _, m := range members {
		if m.Role == role {
			mine = append(mine, m)
		}
	}
	return len(mine) == 1 && mine[0].Shards != nil && mine[0].Shards.Lo == 0 && mine[0].Shards.Hi == 256
}

// A SIGKILLed converge process is detected by its liveness lock, not its
// heartbeat: with a 10 s beat (a 30 s liveness window) the survivor owns
// every shard and fresh work in the dead member's former shards settles
// within a few seconds.
func TestProcess_AKilledMemberIsReTiledAwayAndWorkContinuesWithinSeconds(t *testing.T) {
	t.Parallel()
	db := pgtest.URL(t)
	pool := pgtest.PoolFor(t, db)
	st := store.New(pool, nil)
	ms := membership.New(pool)
	applyManifest(t, st, leafKind)
	slow := "MEMBER_HEARTBEAT_EVERY=10s"
	pa, pb := freePort(t), freePort(t)
	doomed := spawnServer(t, db, config.RoleAll, pa, pa, slow)
	spawnServer(t, db, config.RoleAll, pb, pb, slow)
	for _, port := range []int{pa, pb} {
		apptest.StartWorker(t, fmt.Sprintf("http://127.0.0.1:%d", port), worker.Options{MaxParallel: 32},
			apptest.NewProvider("leaf", leafWork))
	}
	require.Eventually(t, func() bool {
		members, err := ms.ListLive(context.Background(), membership.DefaultLiveness)
		require.NoError(t, err)
		return len(members) == 2 && members[0].Shards != nil && members[1].Shards != nil &&
			!members[0].Shards.Empty() && !members[1].Shards.Empty()
	}, apptest.BootWithin, 20*time.Millisecond, "the two members split the shards")

	const n = 40 // spread over the shard space: about half in each member's range
	began := time.Now()
	for i := range n {
		applyResource(t, st, "leaf", "before-"+strconv.Itoa(i), `{}`)
	}
	for i := range n {
		apptest.WaitPhase(t, st, "leaf", "before-"+strconv.Itoa(i), resource.PhaseReady, 60*time.Second)
	}
	baseline := time.Since(began)

	doomed.kill(t)
	killed := time.Now()
	require.Eventually(t, func() bool { return soleOwner(t, ms, string(config.RoleAll)) }, 20*time.Second, 10*time.Millisecond,
		"the survivor owns every shard")
	retiled := time.Since(killed)

	for i := range n {
		applyResource(t, st, "leaf", "after-"+strconv.Itoa(i), `{}`)
	}
	for i := range n {
		apptest.WaitPhase(t, st, "leaf", "after-"+strconv.Itoa(i), resource.PhaseReady, 30*time.Second)
	}
	settled := time.Since(killed)
	t.Logf("SIGKILL → survivor owns all shards: %s; → %d fresh resources Ready: %s (fault-free: %s)", retiled, n, settled, baseline)
	require.Less(t, retiled, 3*time.Second, "the crash is detected by the lock, not the 30 s heartbeat window")
	// Loaded machines slow both waves alike; without the lock the dead
	// member's half would wait out the 30 s window.
	require.Less(t, settled, retiled+2*baseline+3*time.Second, "work in the dead member's shards continues at once")
}
