package cli_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/cli"
	"github.com/converge-run/converge/core/app/apptest"
)

// watcher is a conctl watch running in the background.
type watcher struct {
	out, err syncBuffer
	cancel   context.CancelFunc
	done     chan int
}

func startWatch(t *testing.T, server string, args ...string) *watcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{cancel: cancel, done: make(chan int, 1)}
	if len(args) == 0 || args[0] != "get" { // get ... -w runs as given
		args = append([]string{"watch"}, args...)
	}
	go func() {
		w.done <- cli.Run(ctx, testEnv(server, "", &w.out, &w.err), args)
	}()
	t.Cleanup(func() { w.stop(t) })
	return w
}

// stop interrupts the watch (Ctrl+C) and returns its exit code.
func (w *watcher) stop(t *testing.T) int {
	t.Helper()
	w.cancel()
	select {
	case code := <-w.done:
		w.done <- code
		return code
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not stop")
	}
	return -1
}

// waitLine waits up to 30 s for an output line matching re; a timeout
// shows what the watch printed instead.
func (w *watcher) waitLine(t *testing.T, reason, re string) {
	t.Helper()
	rx := regexp.MustCompile(re)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for {
		for _, l := range strings.Split(w.out.String(), "\n") {
			if rx.MatchString(l) {
				return
			}
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out after 30s waiting for %s (/%s/ in watch output); it printed:\n%s\nand on stderr:\n%s",
				reason, re, w.out.String(), w.err.String())
		}
	}
}

// waitSubscribed waits until the stack's hub has n resource subscribers.
func (s *stack) waitSubscribed(t *testing.T, n int) {
	t.Helper()
	apptest.WaitFor(t, 10*time.Second, "the watch's subscription", func() bool {
		res, _, _, _ := s.hub.SubscriberCount()
		return res >= n
	})
}

func account(name string) string { return accountTaking(name, 0) }

// accountTaking is an account whose reconcile takes ms milliseconds.
func accountTaking(name string, ms int) string {
	return `{"kind":"account","name":"` + name + `","labels":{},"spec":{"team":"x","sim":{"latency_ms":` + strconv.Itoa(ms) +
		`,"failure_rate":0}}}`
}

func TestWatch_PrintsChangesMadeByAnotherClient(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{})
	must(t, s.conctl("apply", "-f", filepath.Join(classicFixtures, "account.kind.json")))
	must(t, s.conctlIn(account("w-1"), "apply", "-f", "-", "--wait"))

	table := startWatch(t, s.server, "resources", "--kind", "account")
	table.waitLine(t, "the header comes first", `^EVENT\s+KIND\s+NAME\s+PHASE\s+GENERATION\s+SYNCED\s+AGE$`)
	table.waitLine(t, "the current rows are listed", `^ADDED\s+account\s+w-1\s+READY\s+1\s+1\s+1m$`)
	lines := startWatch(t, s.server, "res", "--kind", "account", "--watch-only", "-o", "json")
	named := startWatch(t, s.server, "res", "account/w-2")
	// Label filters are matched by conctl: a resource that never matched
	// shows nothing, not even its deletion.
	blue := startWatch(t, s.server, "res", "--kind", "account", "-l", "team=blue")
	blueOnly := startWatch(t, s.server, "res", "--kind", "account", "-l", "team=blue", "--watch-only")
	s.waitSubscribed(t, 5)

	steps := []struct {
		reason string
		do     func()
		table  string // a line of the table watch
		json   string // a line of the JSON watch
	}{
		// Its reconcile takes 3 s: a watch shows a row's latest state, and
		// an instant reconcile could be READY before the hub re-reads the
		// new row (seen under a loaded CI run), so RECONCILING never shows.
		{"a resource another client creates shows up as ADDED",
			func() { must(t, s.conctlIn(accountTaking("w-2", 3000), "apply", "-f", "-")) },
			`^ADDED\s+account\s+w-2\s+RECONCILING\s+1\s+0\s+1m$`, `"event":"ADDED".*"name":"w-2".*"phase":"RECONCILING"`},
		{"its reconcile shows up as MODIFIED, READY",
			func() {},
			`^MODIFIED\s+account\s+w-2\s+READY\s+1\s+1\s+1m$`, `"event":"MODIFIED".*"name":"w-2".*"phase":"READY"`},
		{"a deletion shows up as DELETED",
			func() { must(t, s.conctl("delete", "res", "account/w-1", "--wait")) },
			`^DELETED\s+account\s+w-1\s+`, `"event":"DELETED".*"name":"w-1"`},
	}
	for _, st := range steps {
		st.do()
		table.waitLine(t, st.reason, st.table)
		lines.waitLine(t, st.reason+" (json)", st.json)
	}
	named.waitLine(t, "a named watch follows its one resource", `^MODIFIED\s+account\s+w-2\s+READY`)
	require.NotContains(t, named.out.String(), "w-1", "a named watch shows nothing else")

	must(t, s.conctlIn(`{"kind":"account","name":"w-blue","labels":{"team":"blue"},"spec":{"team":"x","sim":{"latency_ms":0,"failure_rate":0}}}`,
		"apply", "-f", "-", "--wait"))
	must(t, s.conctl("delete", "res", "account/w-blue", "--wait"))
	for _, w := range []*watcher{blue, blueOnly} {
		w.waitLine(t, "a matching resource's deletion", `^DELETED\s+account\s+w-blue\s+`)
		require.NotContains(t, w.out.String(), "w-1", "the deleted w-1 never matched team=blue: no (blank) DELETED row")
		require.NotContains(t, w.out.String(), "w-2")
	}
	require.Equal(t, 0, table.stop(t), "an interrupted watch exits 0")
	require.Equal(t, 0, lines.stop(t))
	for _, l := range strings.Split(strings.TrimSpace(lines.out.String()), "\n") {
		require.True(t, json.Valid([]byte(l)), "-o json prints one JSON object per line: %q", l)
	}
	require.NotContains(t, lines.out.String(), `"name":"w-1","`+"phase"+`":"READY"`, "--watch-only skips the listing")

	nodes := startWatch(t, s.server, "nodes")
	nodesOnly := startWatch(t, s.server, "nodes", "--watch-only")
	nodes.waitLine(t, "the membership is listed", `^ADDED\s+\S+\s+ALL\s+READY\s+`)
	apptest.WaitFor(t, 10*time.Second, "both member watches subscribed", func() bool {
		_, _, members, _ := s.hub.SubscriberCount()
		return members >= 2
	})
	require.Equal(t, 0, nodes.stop(t))
	require.Equal(t, 0, nodesOnly.stop(t))
	require.Empty(t, nodesOnly.out.String(), "--watch-only: nothing changed, nothing printed (TestMemberWatch_WatchOnlyPrintsOnlyChanges drives the changes)")

	// A providerconfig named NAME with --kind, as get pc takes it.
	must(t, s.conctlIn(`{"kind":"account","name":"default","is_default":true,"spec":{"latency_ms":0}}`, "apply", "-f", "-"))
	pc := startWatch(t, s.server, "pc", "default", "--kind", "account")
	pc.waitLine(t, "NAME --kind lists it", `^ADDED\s+account\s+default\s+yes`)
}

func TestWatch_ReconnectsAndRelists(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{})
	must(t, s.conctl("apply", "-f", filepath.Join(classicFixtures, "account.kind.json")))
	must(t, s.conctlIn(account("r-1"), "apply", "-f", "-", "--wait"))
	must(t, s.conctlIn(account("r-2"), "apply", "-f", "-", "--wait"))
	proxy := startProxy(t, strings.TrimPrefix(s.server, "http://"))
	w := startWatch(t, proxy.URL(), "res", "--kind", "account")
	w.waitLine(t, "the initial listing", `^ADDED\s+account\s+r-2\s+READY`)
	s.waitSubscribed(t, 1)

	// The network drops; meanwhile another client creates r-3 and
	// deletes r-1. No subscription can carry that: only the re-list after
	// the reconnect can.
	proxy.pause()
	apptest.WaitFor(t, 10*time.Second, "the server to drop the watch's subscription", func() bool {
		res, _, _, _ := s.hub.SubscriberCount()
		return res == 0
	})
	must(t, s.conctlIn(account("r-3"), "apply", "-f", "-", "--wait"))
	must(t, s.conctl("delete", "res", "account/r-1", "--wait"))
	before := w.out.String()
	require.NotContains(t, before, "r-3")
	proxy.resume()

	w.waitLine(t, "the re-list prints the resource created meanwhile", `^ADDED\s+account\s+r-3\s+READY`)
	w.waitLine(t, "and the one deleted meanwhile", `^DELETED\s+account\s+r-1\s+`)
	s.waitSubscribed(t, 1)
	require.NotContains(t, strings.TrimPrefix(w.out.String(), before), "r-2", "unchanged rows are not re-printed")
	must(t, s.conctlIn(account("r-4"), "apply", "-f", "-"))
	w.waitLine(t, "the subscription is live again", `^MODIFIED\s+account\s+r-4\s+READY`)
	require.Equal(t, 0, w.stop(t))
	require.Contains(t, w.err.String(), "warning: websocket connection lost, reconnecting")
}
