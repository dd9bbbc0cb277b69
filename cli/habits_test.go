package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/converge-run/converge/cli"
	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/resource"
)

// kubectl's habits, each against a real converge: kinds as types, -w,
// --sort-by, every page by default, -o yaml|json that apply -f takes back
// unchanged, edit through $EDITOR, kind config, document types inferred,
// and names completed from the server.
func TestHabits_KubectlStyle(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{})
	seedAccounts(t, s)

	t.Run("kinds as types", func(t *testing.T) { habitKindsAsTypes(t, s) })
	t.Run("sort-by", func(t *testing.T) { habitSortBy(t, s) })
	t.Run("round trip", func(t *testing.T) { habitRoundTrip(t, s) })
	t.Run("edit", func(t *testing.T) { habitEdit(t, s) })
	t.Run("kind config", func(t *testing.T) { habitKindConfig(t, s) })
	t.Run("completion", func(t *testing.T) { habitCompletion(t, s) })
	t.Run("get -w", func(t *testing.T) { habitGetWatch(t, s) })
	t.Run("type inferred and every page", func(t *testing.T) { habitInferredAndPages(t, s) })
	// Last: they resync resources and apply a kind the tests above do not list.
	t.Run("several objects, one list", func(t *testing.T) { habitSeveralObjectsOneList(t, s) })
	t.Run("numbers round trip exactly", func(t *testing.T) { habitExactNumbers(t, s) })
}

// habitSeveralObjectsOneList: a command naming several objects prints them
// as get does, one list {"items": [...]}: one JSON value, one YAML document.
func habitSeveralObjectsOneList(t *testing.T, s *stack) {
	for _, args := range [][]string{
		{"resync", "account/ready-1", "account/ready-2"},
		{"quarantine", "ready-3", "ready-5", "--kind", "account"},
		{"unquarantine", "account/ready-3", "account/ready-5"},
		{"describe", "account/ready-1", "account/ready-2"},
		{"get", "account", "ready-1", "ready-2"},
	} {
		for _, o := range []string{"json", "yaml"} {
			out := must(t, s.conctl(append(args, "-o", o)...)).stdout
			var docs []map[string]any
			if o == "json" {
				dec := json.NewDecoder(strings.NewReader(out))
				for dec.More() {
					var v map[string]any
					require.NoErrorf(t, dec.Decode(&v), "%v -o json: %s", args, out)
					docs = append(docs, v)
				}
			} else {
				dec := yaml.NewDecoder(strings.NewReader(out))
				for {
					var v map[string]any
					err := dec.Decode(&v)
					if errors.Is(err, io.EOF) {
						break
					}
					require.NoErrorf(t, err, "%v -o yaml: %s", args, out)
					docs = append(docs, v)
				}
			}
			require.Lenf(t, docs, 1, "%v -o %s: one document", args, o)
			items, ok := docs[0]["items"].([]any)
			require.Truef(t, ok, "%v -o %s: a list: %s", args, o, out)
			require.Lenf(t, items, 2, "%v -o %s", args, o)
		}
	}
	one := must(t, s.conctl("resync", "account/ready-1", "-o", "json")).stdout
	require.Contains(t, one, `"name": "ready-1"`, "one object named: the object itself, as get prints it")
	require.NotContains(t, one, `"items"`)
}

// habitExactNumbers: a spec with an integer past int64 and a decimal past a
// float64's digits reads back from get -o yaml exactly: applying it back
// (as edit does) changes nothing.
func habitExactNumbers(t *testing.T, s *stack) {
	must(t, s.conctlIn(`{"kind":"blob","description":"any object","spec_schema":{"type":"object"},`+
		`"reactions":[{"name":"work","trigger":"specChange","emits":["status","conditions"],"reads":["spec"]}]}`, "apply", "-f", "-"))
	must(t, s.conctlIn(`{"kind":"blob","name":"big","spec":{"id":12345678901234567890,"ratio":0.12345678901234567890123}}`,
		"apply", "-f", "-"))
	y := must(t, s.conctl("get", "blob", "big", "-o", "yaml")).stdout
	require.Contains(t, y, "id: 12345678901234567890\n")
	require.Contains(t, y, "ratio: 0.12345678901234567890123\n")
	require.Equal(t, "resource/blob/big unchanged\n", must(t, s.conctlIn(y, "apply", "-f", "-")).stdout)
	j := must(t, s.conctl("get", "blob", "big", "-o", "json")).stdout
	require.Contains(t, j, `"generation": 1,`, "nothing was rewritten")
	require.Regexp(t, `"id": ?12345678901234567890,`, j)

	ed := writeEditor(t, `sed -i 's/ratio: 0.12345678901234567890123$/ratio: 0.12345678901234567890124/' "$1"`)
	require.Equal(t, "resource/blob/big configured\n", must(t, s.conctlEnv(map[string]string{"EDITOR": ed}, "edit", "blob/big")).stdout)
	require.Regexp(t, `"ratio": ?0.12345678901234567890124\b`, must(t, s.conctl("get", "blob", "big", "-o", "json")).stdout,
		"an edit keeps the digits it does not touch")
}

func habitKindsAsTypes(t *testing.T, s *stack) {
	all := names(t, must(t, s.conctl("get", "account", "-o", "json")).stdout)
	require.ElementsMatch(t, []string{"ready-1", "ready-2", "ready-3", "ready-4", "ready-5", "broken", "doomed"}, all,
		"get KIND lists the kind's resources")
	require.ElementsMatch(t, all, names(t, must(t, s.conctl("get", "accounts", "-o", "json")).stdout), "the plural works too")

	one := must(t, s.conctl("get", "account", "ready-1")).stdout
	require.Contains(t, one, "ready-1")
	require.NotContains(t, one, "ready-2")
	require.Equal(t, one, must(t, s.conctl("get", "account/ready-1")).stdout, "get KIND/NAME is get KIND NAME")
	require.Equal(t, one, must(t, s.conctl("get", "resource", "account/ready-1")).stdout, "and get resource KIND/NAME")

	for _, args := range [][]string{{"describe", "account/ready-1"}, {"describe", "account", "ready-1"}, {"describe", "res", "account/ready-1"}} {
		out := must(t, s.conctl(args...)).stdout
		require.Regexpf(t, `Name:\s+ready-1\nKind:\s+account`, out, "%v", args)
		require.Containsf(t, out, "READY", "%v", args)
	}

	r := s.conctl("get", "nosuchkind")
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, `unknown type "nosuchkind": neither a built-in type`)
	require.Contains(t, r.stderr, "applied kinds: account, bom, route, statussink, vpc")
	r = s.conctl("get", "account/ready-1", "pc/account/default")
	require.Equal(t, cli.ExitUsage, r.code, "one type per command")
	require.Contains(t, r.stderr, "one type per command")

	must(t, s.conctlIn(account("short-lived"), "apply", "-f", "-"))
	s.WaitPhase("account", "short-lived", resource.PhaseReady, 90*time.Second)
	out := must(t, s.conctl("delete", "account/short-lived", "--wait")).stdout
	require.Contains(t, out, "resource/account/short-lived deleted")
	r = s.conctl("get", "account", "short-lived")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "NOT_FOUND")
}

func habitSortBy(t *testing.T, s *stack) {
	got := names(t, must(t, s.conctl("get", "account", "--sort-by", ".name", "-o", "json")).stdout)
	require.True(t, sort.StringsAreSorted(got), "sorted by name: %v", got)
	table := must(t, s.conctl("get", "account", "--sort-by", "{.name}")).stdout
	lines := strings.Split(strings.TrimSpace(table), "\n")[1:]
	var col []string
	for _, l := range lines {
		col = append(col, strings.Fields(l)[1])
	}
	require.Equal(t, got, col, "the table is sorted the same way (kubectl's {.name} spelling)")

	named := []string{"get", "account", "ready-3", "ready-1", "ready-2", "-o", "json"}
	require.Equal(t, []string{"ready-3", "ready-1", "ready-2"}, names(t, must(t, s.conctl(named...)).stdout),
		"named items come in the order named")
	require.Equal(t, []string{"ready-1", "ready-2", "ready-3"}, names(t, must(t, s.conctl(append(named, "--sort-by", ".name")...)).stdout),
		"and --sort-by sorts them too")

	var phases []string
	var page struct {
		Items []struct{ Phase string } `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(must(t, s.conctl("get", "account", "--sort-by", ".phase", "-o", "json")).stdout), &page))
	for _, it := range page.Items {
		phases = append(phases, it.Phase)
	}
	require.True(t, sort.StringsAreSorted(phases), "sorted by phase: %v", phases)
	require.Len(t, phases, 7)

	kinds := names(t, must(t, s.conctl("get", "kinds", "--sort-by", ".config.maxInflight", "-o", "json")).stdout)
	require.Len(t, kinds, 5, "a nested field sorts kinds")

	r := s.conctl("get", "account", "--sort-by", ".nosuch")
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, "--sort-by .nosuch: no object has this field")
	r = s.conctl("get", "account", "--sort-by", ".items[0]")
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, "want a dotted field path")
}

// habitRoundTrip: what get -o yaml|json prints, apply -f takes back, and
// nothing changes.
func habitRoundTrip(t *testing.T, s *stack) {
	dir := t.TempDir()
	cases := []struct {
		get  []string
		want []string // apply's lines
	}{
		{[]string{"get", "account", "ready-1"}, []string{"resource/account/ready-1 unchanged"}},
		{[]string{"get", "pc", "account/default"}, []string{"providerconfig/account/default unchanged"}},
		{[]string{"get", "rb", "account-failed-to-statussink"}, []string{"reactorbinding/account-failed-to-statussink unchanged"}},
		{[]string{"get", "kind", "account"}, []string{"manifest/account unchanged"}},
		{[]string{"get", "kinds"}, []string{"manifest/account unchanged", "manifest/bom unchanged", "manifest/vpc unchanged"}},
		{[]string{"get", "account", "--phase", "ready"}, []string{"resource/account/ready-1 unchanged", "resource/account/ready-5 unchanged"}},
		{[]string{"describe", "account/ready-2"}, []string{"resource/account/ready-2 unchanged"}},
	}
	for i, tc := range cases {
		for _, format := range []string{"yaml", "json"} {
			before := must(t, s.conctl(append(tc.get, "-o", format)...)).stdout
			path := filepath.Join(dir, fmt.Sprintf("%d.%s", i, format))
			require.NoError(t, os.WriteFile(path, []byte(before), 0o600))
			out := must(t, s.conctl("apply", "-f", path)).stdout
			for _, w := range tc.want {
				require.Containsf(t, out, w, "%v -o %s applied back", tc.get, format)
			}
			require.NotContainsf(t, out, "configured", "%v -o %s: nothing changes", tc.get, format)
			require.NotContainsf(t, out, "created", "%v -o %s: nothing changes", tc.get, format)
			require.Equalf(t, before, must(t, s.conctl(append(tc.get, "-o", format)...)).stdout,
				"%v -o %s: the object reads the same after the round trip", tc.get, format)
		}
	}
	// A spec edit of the printed YAML is a change apply takes.
	y := must(t, s.conctl("get", "account", "ready-3", "-o", "yaml")).stdout
	require.Contains(t, y, "team: t3")
	path := filepath.Join(dir, "edited.yaml")
	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(y, "team: t3", "team: t33", 1)), 0o600))
	require.Contains(t, must(t, s.conctl("apply", "-f", path)).stdout, "resource/account/ready-3 configured")
	require.Contains(t, must(t, s.conctl("get", "account", "ready-3", "-o", "yaml")).stdout, "team: t33")
}

func writeEditor(t *testing.T, script string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "editor.sh")
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\nset -e\n"+script+"\n"), 0o700))
	return path
}

func (s *stack) conctlEnv(env map[string]string, args ...string) result {
	s.t.Helper()
	var out, errb syncBuffer
	e := testEnv(s.server, "", &out, &errb)
	e.Getenv = func(k string) string {
		if k == "CONVERGE_SERVER" {
			return s.server
		}
		return env[k]
	}
	code := cli.Run(context.Background(), e, args)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

func habitEdit(t *testing.T, s *stack) {
	ed := writeEditor(t, `sed -i 's/team: t4$/team: t44/' "$1"`)
	r := s.conctlEnv(map[string]string{"EDITOR": ed}, "edit", "account/ready-4")
	must(t, r)
	require.Contains(t, r.stdout, "resource/account/ready-4 configured")
	require.Contains(t, must(t, s.conctl("get", "account", "ready-4", "-o", "yaml")).stdout, "team: t44")

	r = s.conctlEnv(map[string]string{"VISUAL": "true", "EDITOR": ed}, "edit", "account", "ready-4")
	must(t, r)
	require.Contains(t, r.stdout, "Edit cancelled, no changes made.", "VISUAL wins, and an unchanged file cancels")

	ed = writeEditor(t, `sed -i 's/latency_ms: 0$/latency_ms: 1/' "$1"`)
	r = must(t, s.conctlEnv(map[string]string{"EDITOR": ed}, "edit", "pc", "account/default"))
	require.Contains(t, r.stdout, "providerconfig/account/default configured")
	require.Contains(t, must(t, s.conctl("get", "pc", "account/default", "-o", "yaml")).stdout, "latency_ms: 1")

	bad := writeEditor(t, `sed -i 's/team: t44$/team: [1, 2]/' "$1"`)
	r = s.conctlEnv(map[string]string{"EDITOR": bad}, "edit", "account/ready-4")
	require.Equal(t, 1, r.code, r.stdout)
	require.Contains(t, r.stderr, "BAD_USER_INPUT")
	require.Contains(t, r.stderr, "your edit is kept in ")
	_, kept, _ := strings.Cut(r.stderr, "kept in ")
	kept, _, _ = strings.Cut(kept, ":")
	b, err := os.ReadFile(kept)
	require.NoError(t, err, "the rejected edit is kept")
	require.Contains(t, string(b), "team: [1, 2]")
	_ = os.RemoveAll(filepath.Dir(kept))

	r = s.conctlEnv(map[string]string{"EDITOR": "false"}, "edit", "account/ready-4")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "the editor (false) exited with status 1; nothing applied")
	r = s.conctl("edit", "operations", "x")
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, "not supported here")
}

func habitKindConfig(t *testing.T, s *stack) {
	out := must(t, s.conctl("kind", "config", "account", "--max-inflight", "8", "--task-deadline", "2m", "--resync", "600")).stdout
	require.Contains(t, out, "kind/account v1 configured")
	require.Regexp(t, `account\s+v1\s+8\s+2m0s\s+10m0s`, out)
	var k struct {
		Config struct {
			MaxInflight, TaskDeadlineSecs, ResyncIntervalSecs, OrphanGraceSecs int
			ResyncRecomposes                                                   bool
		}
	}
	require.NoError(t, json.Unmarshal([]byte(must(t, s.conctl("get", "kind", "account", "-o", "json")).stdout), &k))
	require.Equal(t, 8, k.Config.MaxInflight)
	require.Equal(t, 120, k.Config.TaskDeadlineSecs)
	require.Equal(t, 600, k.Config.ResyncIntervalSecs)

	must(t, s.conctl("kind", "config", "account", "--resync-recomposes", "--orphan-grace", "1h"))
	require.NoError(t, json.Unmarshal([]byte(must(t, s.conctl("get", "kind", "account", "-o", "json")).stdout), &k))
	require.Equal(t, 8, k.Config.MaxInflight, "absent fields are kept")
	require.True(t, k.Config.ResyncRecomposes)
	require.Equal(t, 3600, k.Config.OrphanGraceSecs)

	show := must(t, s.conctl("kind", "config", "account", "-o", "yaml")).stdout
	require.Contains(t, show, "maxInflight: 8")
	must(t, s.conctl("kind", "config", "account", "--max-inflight", "0", "--task-deadline", "0", "--resync", "0"))

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--task-deadline", "1.5s"}, "--task-deadline 1.5s: want whole seconds"},
		{[]string{"--resync", "soon"}, `--resync "soon": want a duration`},
		{[]string{"--max-inflight", "-1"}, "--max-inflight -1: want 0 (unlimited) or more"},
		{[]string{"--orphan-grace", "-5"}, "--orphan-grace -5: want 0 or more seconds"},
	} {
		r := s.conctl(append([]string{"kind", "config", "account"}, tc.args...)...)
		require.Equalf(t, cli.ExitUsage, r.code, "%v", tc.args)
		require.Containsf(t, r.stderr, tc.want, "%v", tc.args)
	}
	r := s.conctl("kind", "config", "nosuch", "--max-inflight", "1")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "NOT_FOUND")
}

// completions runs cobra's hidden completion command and returns the
// offered words.
func (s *stack) completions(args ...string) []string {
	r := s.conctl(append([]string{"__complete"}, args...)...)
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if l != "" && !strings.HasPrefix(l, ":") {
			out = append(out, l)
		}
	}
	return out
}

func habitCompletion(t *testing.T, s *stack) {
	types := s.completions("get", "")
	require.Subset(t, types, []string{"resource", "kind", "account", "bom", "vpc"}, "types and the applied kinds")
	require.Subset(t, s.completions("get", "account", ""), []string{"ready-1", "broken", "doomed"}, "names from the server")
	require.Equal(t, []string{"ready-1", "ready-2", "ready-3", "ready-4", "ready-5"}, sorted(s.completions("get", "account", "re")))
	require.Equal(t, []string{"account/ready-1"}, s.completions("describe", "account/ready-1"), "KIND/NAME")
	require.Subset(t, s.completions("get", "pc", ""), []string{"account/default", "statussink/default"})
	require.Equal(t, []string{"account-failed-to-statussink"}, s.completions("delete", "rb", ""))
	require.Equal(t, []string{"account"}, s.completions("kind", "config", "acc"))
	require.NotContains(t, s.completions("get", "account", "ready-1", ""), "ready-1", "names already given are not offered")
}

func sorted(xs []string) []string {
	sort.Strings(xs)
	return xs
}

func habitGetWatch(t *testing.T, s *stack) {
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() { done <- cli.Run(ctx, testEnv(s.server, "", &out, &errb), []string{"get", "account", "-w"}) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("get -w did not stop")
		}
	}()
	waitOut(t, &out, "the initial listing", "ready-5")
	s.waitSubscribed(t, 1)
	must(t, s.conctlIn(account("watched"), "apply", "-f", "-"))
	waitOut(t, &out, "the new account's line", "watched")
}

func waitOut(t *testing.T, b *syncBuffer, what, needle string) {
	t.Helper()
	apptest.WaitFor(t, 30*time.Second, what, func() bool { return strings.Contains(b.String(), needle) })
}

func habitInferredAndPages(t *testing.T, s *stack) {
	// kind, name and spec: a resource (a provider config says is_default).
	out := must(t, s.conctlIn(`{"kind":"account","name":"inferred","spec":{"team":"x","sim":{"latency_ms":0,"failure_rate":0}}}`,
		"apply", "-f", "-")).stdout
	require.Contains(t, out, "resource/account/inferred created")
	out = must(t, s.conctlIn(`{"kind":"account","name":"staging","is_default":false,"spec":{"latency_ms":0}}`,
		"apply", "-f", "-")).stdout
	require.Contains(t, out, "providerconfig/account/staging created")

	var docs []string
	for i := range 60 {
		docs = append(docs, fmt.Sprintf(`{"kind":"account","name":"bulk-%02d","spec":{"team":"x","sim":{"latency_ms":0,"failure_rate":0}}}`, i))
	}
	must(t, s.conctlIn(strings.Join(docs, "\n"), "apply", "-f", "-"))
	r := must(t, s.conctl("get", "account"))
	require.Len(t, strings.Split(strings.TrimSpace(r.stdout), "\n"), 1+60+9, "every page by default (header, 60 bulk, 9 others)")
	require.Empty(t, r.stderr, "no more-pages hint")
	r = must(t, s.conctl("get", "account", "--limit", "20"))
	require.Len(t, strings.Split(strings.TrimSpace(r.stdout), "\n"), 1+20, "--limit shows one page")
	require.Contains(t, r.stderr, "(more results: --all, or --after ")
	r = must(t, s.conctl("get", "account", "--limit", "20", "--all", "-o", "json"))
	require.Len(t, names(t, r.stdout), 69, "--all with --limit follows the cursors in pages of 20")
}
