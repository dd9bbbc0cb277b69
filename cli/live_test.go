package cli_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
)

// Kinds, provider configs and reactor bindings are live: a second client's
// edits reach watch (and get -w) as they happen.
func TestWatch_CatalogsLiveAcrossClients(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{noWorker: true})
	for _, f := range []string{"account.kind.json", "statussink.kind.json"} {
		must(t, s.conctl("apply", "-f", filepath.Join(classicFixtures, f)))
	}
	kinds := startWatch(t, s.server, "kinds")
	kinds.waitLine(t, "the kinds listed", `^ADDED\s+account\s+v1\s+unlimited`)
	must(t, s.conctl("kind", "config", "account", "--max-inflight", "5"))
	kinds.waitLine(t, "a policy edit by another client", `^MODIFIED\s+account\s+v1\s+5\s`)

	pcs := startWatch(t, s.server, "pc", "--kind", "account")
	rbs := startWatch(t, s.server, "get", "rb", "-w")
	must(t, s.conctlIn(`{"kind":"account","name":"staging","is_default":false,"spec":{"latency_ms":0}}`, "apply", "-f", "-"))
	pcs.waitLine(t, "a new config", `^ADDED\s+account\s+staging\s+no`)
	must(t, s.conctlIn(`{"kind":"account","name":"staging","is_default":true,"spec":{"latency_ms":0}}`, "apply", "-f", "-"))
	pcs.waitLine(t, "a changed config", `^MODIFIED\s+account\s+staging\s+yes`)
	must(t, s.conctl("delete", "pc", "account/staging"))
	pcs.waitLine(t, "a deleted config", `^DELETED\s+account\s+staging`)

	must(t, s.conctlIn(`{"name":"acc-failed","watch_kind":"account","transition":"failed","reactor":"statussink"}`, "apply", "-f", "-"))
	rbs.waitLine(t, "a new binding", `^ADDED\s+acc-failed\s+account\s+failed\s+statussink\s+yes`)
	must(t, s.conctl("delete", "rb", "acc-failed"))
	rbs.waitLine(t, "a deleted binding", `^DELETED\s+acc-failed`)
}

// delete --wait follows the teardown of the whole subtree.
func TestDeleteWait_ShowsTeardownProgress(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{})
	for _, f := range []string{"account.kind.json", "vpc.kind.json", "route.kind.json", "bom.kind.json"} {
		must(t, s.conctl("apply", "-f", filepath.Join(classicFixtures, f)))
	}
	must(t, s.conctlIn(`{"kind":"bom","name":"gone","spec":{"teams":3,"routes_per_team":2,"leaf_sim":{"latency_ms":0,"failure_rate":0}}}`,
		"apply", "-f", "-", "--wait", "--timeout", "90s"))
	s.WaitPhase("bom", "gone", resource.PhaseReady, 90*time.Second)
	r := must(t, s.conctl("delete", "bom", "gone", "--wait", "--timeout", "90s"))
	require.Equal(t, "resource/bom/gone deletion requested (DELETING)\nresource/bom/gone deleted\n", r.stdout)
	require.Contains(t, r.stderr, "resource/bom/gone DELETING (", "teardown progress while children remain")
	require.Regexp(t, `left: \d+ DELETING`, r.stderr)
	for _, l := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		require.True(t, strings.HasPrefix(l, "resource/bom/gone DELETING"), "only progress lines since the request: %q", l)
	}
	r = s.conctl("delete", "bom/gone", "--wait")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "NOT_FOUND")

	// --timeout bounds the wait, not the request: a timeout that passes
	// before the deletion is requested (here at once; on a loaded machine
	// or a slow server, any short one) still requests it.
	must(t, s.conctlIn(`{"kind":"account","name":"soon","spec":{"team":"x","sim":{"latency_ms":0}}}`, "apply", "-f", "-"))
	r = s.conctl("delete", "account/soon", "--wait", "--timeout", "1ns")
	require.True(t, strings.HasPrefix(r.stdout, "resource/account/soon deletion requested (DELETING)\n"),
		"stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	if r.code == 0 { // the teardown's first push may say it is gone already
		require.Equal(t, "resource/account/soon deletion requested (DELETING)\nresource/account/soon deleted\n", r.stdout)
	} else {
		require.Equal(t, 1, r.code)
		require.Contains(t, r.stderr, "Error: timed out after 1ns waiting for resource/account/soon to be deleted")
	}
	apptest.WaitFor(t, 60*time.Second, "account/soon deleted", func() bool {
		_, err := s.Store.GetResource(context.Background(), "account", "soon")
		return errors.Is(err, store.ErrNotFound)
	})
}
