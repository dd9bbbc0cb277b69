package cli_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/cli"
	"github.com/converge-run/converge/core/resource"
)

// conctl why, history, rollback, diff and apply --dry-run against a real
// stack: a vpc applied, changed, explained, diffed and rolled back, its
// worker reconciling each generation.
func TestExplainAndUndo_WhyHistoryRollbackDiff(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{})
	must(t, s.conctl("apply", "-f", filepath.Join(classicFixtures, "vpc.kind.json")))
	must(t, s.conctl("apply", "-f", filepath.Join(classicFixtures, "providerconfig-vpc.json")))
	must(t, s.conctlIn(`{"kind":"vpc","name":"net","labels":{"v":"1"},"spec":{"cidr":"10.0.0.0/24","account_id":"a1"}}`, "apply", "-f", "-"))
	s.WaitPhase("vpc", "net", resource.PhaseReady, time.Minute)
	r := must(t, s.conctl("why", "vpc/net"))
	require.Equal(t, "vpc/net is READY (generation 1, synced 1)\nnothing holds it\n", r.stdout)

	// a dry run writes nothing and prints the diff
	next := `{"kind":"vpc","name":"net","labels":{"v":"2"},"spec":{"cidr":"10.0.1.0/24","account_id":"a1"}}`
	r = must(t, s.conctlIn(next, "diff", "-f", "-"))
	require.Equal(t, "resource/vpc/net configured (dry run)\n  generation 1 -> 2\n"+
		"  - spec/cidr: \"10.0.0.0/24\"\n  + spec/cidr: \"10.0.1.0/24\"\n  - labels/v: \"1\"\n  + labels/v: \"2\"\n", r.stdout)
	r = must(t, s.conctlIn(next, "apply", "--dry-run", "-f", "-"))
	require.Equal(t, "resource/vpc/net configured (dry run)\n", r.stdout)
	cur, err := s.store.GetResource(context.Background(), "vpc", "net")
	require.NoError(t, err)
	require.EqualValues(t, 1, cur.Generation, "nothing written")
	r = s.conctlIn(`{"kind":"vpc","name":"net","spec":{"cidr":5}}`, "diff", "-f", "-")
	require.Equal(t, 1, r.code)
	applied := s.conctlIn(`{"kind":"vpc","name":"net","spec":{"cidr":5}}`, "apply", "-f", "-")
	require.Equal(t, 1, applied.code)
	require.Equal(t, strings.Replace(applied.stderr, "apply resource/vpc/net", "dry run resource/vpc/net", 1), r.stderr,
		"the dry run fails exactly as the real apply")

	must(t, s.conctlIn(next, "apply", "-f", "-"))
	s.WaitPhase("vpc", "net", resource.PhaseReady, time.Minute)
	r = must(t, s.conctl("history", "vpc/net"))
	require.Equal(t, "GENERATION   REASON        ACTOR   AGE\n2            SpecUpdated   api     1m\n1            Created       api     1m\n", r.stdout)
	r = must(t, s.conctl("history", "vpc/net", "--diff"))
	require.Contains(t, r.stdout, "generation 2  SpecUpdated  by api  1m ago\n  - spec/cidr: \"10.0.0.0/24\"\n  + spec/cidr: \"10.0.1.0/24\"\n")
	require.Contains(t, r.stdout, "generation 1  Created  by api  1m ago\n  (the oldest kept generation)\n")

	r = must(t, s.conctl("rollback", "vpc/net", "--to", "1", "--dry-run"))
	require.Contains(t, r.stdout, "now generation 3 (dry run: nothing written)")
	r = must(t, s.conctl("rollback", "vpc/net", "--to", "1"))
	require.Equal(t, "resource/vpc/net rolled back to the spec of generation 1: now generation 3\n", r.stdout)
	r = must(t, s.conctl("rollback", "vpc/net", "--to", "1"))
	require.Equal(t, "resource/vpc/net unchanged: generation 1's spec is already current (generation 3)\n", r.stdout,
		"a rollback to what is current says so")
	got := s.WaitPhase("vpc", "net", resource.PhaseReady, time.Minute)
	require.EqualValues(t, 3, got.SyncedGen, "the rollback reconciles")
	require.JSONEq(t, `{"cidr":"10.0.0.0/24","account_id":"a1"}`, string(got.Spec))
	require.Equal(t, map[string]string{"v": "1"}, got.Labels)
	page, err := s.store.ListEvents(context.Background(), got.ID, 50, "")
	require.NoError(t, err)
	var reasons []string
	for _, e := range page.Items {
		reasons = append(reasons, e.Reason)
	}
	require.Contains(t, reasons, resource.ReasonRolledBack)

	r = s.conctl("rollback", "vpc/net", "--to", "9")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "toGeneration must be an earlier generation (1-2), got 9")
	r = must(t, s.conctl("history", "vpc/net", "-o", "json"))
	var hs []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &hs))
	require.Len(t, hs, 3)
	require.EqualValues(t, 1, hs[0]["rolledBackFrom"])
}

func TestWhy_NamesTheUpstreamAndTheMissingWorker(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{noWorker: true})
	must(t, s.conctl("apply", "-f", filepath.Join(classicFixtures, "vpc.kind.json")))
	must(t, s.conctlIn(`{"kind":"vpc","name":"net","spec":{"cidr":"10.0.0.0/24","account_id":"a1"}}`, "apply", "-f", "-"))
	r := must(t, s.conctl("why", "vpc/net"))
	require.Contains(t, r.stdout, "vpc/net is RECONCILING (generation 1, synced 0)\n")
	require.Contains(t, r.stdout, "waiting on NO_WORKER: no live broker has a ready worker for kind vpc/v1\n")
	require.Contains(t, r.stdout, "  and QUEUED: its reconcile task (specChange) is queued, waiting for a claim [since ")
	r = must(t, s.conctl("kind", "history-limit", "vpc"))
	require.Equal(t, "vpc/v1 keeps 20 generations per resource\n", r.stdout)
	r = must(t, s.conctl("kind", "history-limit", "vpc", "1"))
	require.Equal(t, "vpc/v1 keeps 1 generations per resource\n", r.stdout)
	must(t, s.conctlIn(`{"kind":"vpc","name":"net","spec":{"cidr":"10.0.9.0/24","account_id":"a1"}}`, "apply", "-f", "-"))
	r = must(t, s.conctl("history", "vpc/net"))
	require.Equal(t, 2, strings.Count(r.stdout, "\n"), "the header and the one kept generation: %s", r.stdout)
	r = s.conctl("kind", "history-limit", "vpc", "1001")
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, `"1001": want a number of generations, 0-1000`)
	r = s.conctl("why", "vpc/nope")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "vpc/nope")
}

// A broker is judged live by the fleet's own window, 3 × MEMBER_HEARTBEAT_EVERY
// (the stack's heartbeat is 1 s): one whose heartbeat is older does not serve
// the kind, for conctl why (NO_WORKER) and for Kind.usage.servedBy alike.
func TestWhy_JudgesBrokersByTheFleetsLiveness(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{noWorker: true})
	require.Equal(t, time.Second, s.Process.Config.HeartbeatEvery)
	must(t, s.conctl("apply", "-f", filepath.Join(classicFixtures, "vpc.kind.json")))
	must(t, s.conctlIn(`{"kind":"vpc","name":"net","spec":{"cidr":"10.0.0.0/24","account_id":"a1"}}`, "apply", "-f", "-"))
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.DatabaseURL)
	require.NoError(t, err)
	defer func() { _ = conn.Close(ctx) }()
	// a broker that reported a vpc/v1 worker, then stopped heartbeating 20 s
	// ago: long past the fleet's 3 s window
	_, err = conn.Exec(ctx, `INSERT INTO cluster_members (member_id, role, kinds, last_heartbeat)
		VALUES ('gone', 'broker', '{vpc/v1}', now() - interval '20 seconds')`)
	require.NoError(t, err)

	r := must(t, s.conctl("why", "vpc/net"))
	require.Contains(t, r.stdout, "waiting on NO_WORKER: no live broker has a ready worker for kind vpc/v1\n")
	require.Contains(t, gqlData(t, s.server, `{ kind(name: "vpc") { usage { servedBy } } }`), `"servedBy":0`)
	// the cluster view judges it by the same window
	require.Contains(t, gqlData(t, s.server, `{ clusterMembers { id status } }`), `{"id":"gone","status":"NOT_READY"}`)
}
