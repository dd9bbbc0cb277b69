package app_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
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

// A peer's dead-member probe reports a member that crashed, once, at WARN,
// naming it (removed_member_id) and itself (member_id); a member that shut down is never reported: it deregisters
// before it lets its liveness lock go, so no peer sees its lock gone while
// its row is still there.
func TestProcess_APeerReportsAKilledMemberButNotOneThatShutDown(t *testing.T) {
	t.Parallel()
	db := pgtest.URL(t)
	pool := pgtest.PoolFor(t, db)
	logs := &capturedLog{}
	pw := freePort(t)
	spawnLogged(t, logs, "DATABASE_URL="+db, "ROLE=all", fmt.Sprintf("LISTEN_ADDR=127.0.0.1:%d", pw),
		"MEMBER_HEARTBEAT_EVERY=1s", "SHUTDOWN_DRAIN=5s")
	apptest.WaitFor(t, apptest.BootWithin, "the watching member is ready", func() bool { return readyz(pw) == http.StatusOK })
	ps, pk := freePort(t), freePort(t)
	stopped := spawnServer(t, db, config.RoleAll, ps, ps)
	killed := spawnServer(t, db, config.RoleAll, pk, pk)
	memberOf := func(c *child) string {
		var id string
		apptest.WaitFor(t, apptest.BootWithin, "the member's row", func() bool {
			return pool.QueryRow(context.Background(), `SELECT member_id FROM cluster_members WHERE pid = $1`,
				c.cmd.Process.Pid).Scan(&id) == nil
		})
		return id
	}
	stoppedID, killedID := memberOf(stopped), memberOf(killed)
	gone := func(id string) func() bool {
		return func() bool {
			var n int
			require.NoError(t, pool.QueryRow(context.Background(),
				`SELECT count(*) FROM cluster_members WHERE member_id = $1`, id).Scan(&n))
			return n == 0
		}
	}

	stopped.term(t)
	apptest.WaitFor(t, 10*time.Second, "the stopped member's row is gone", gone(stoppedID))
	killed.kill(t)
	apptest.WaitFor(t, 10*time.Second, "the killed member's row is gone", gone(killedID))
	reported := func() []logLine {
		var out []logLine
		for _, l := range logs.between(time.Time{}, time.Now().Add(time.Hour)) {
			if strings.Contains(l.msg, "liveness lock is gone") {
				out = append(out, l)
			}
		}
		return out
	}
	apptest.WaitFor(t, 10*time.Second, "the watching member reports the killed one", func() bool { return len(reported()) > 0 })
	got := reported()
	require.Len(t, got, 1, "one report, for the killed member only (the stopped one is %s): %+v", stoppedID, got)
	require.Equal(t, "warn", got[0].level)
	require.Equal(t, killedID, got[0].removed, "the report names the member that crashed")
	var watcherID string
	for _, l := range logs.between(time.Time{}, time.Now().Add(time.Hour)) {
		if l.msg == "converge ready" {
			watcherID = l.memberID
		}
	}
	require.NotEmpty(t, watcherID, "the watching member said it was ready")
	require.Equal(t, watcherID, got[0].memberID, "member_id is the member that reports, as on its every line")
}
