package cli_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/converge-run/converge/cli"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
)

// seedAccounts applies the classic kinds (no providerconfigs: the spec's
// sim block drives the simulation) and account resources: ready-1..5 that
// succeed at once, broken that fails terminally and is quarantined, and
// doomed that fails terminally; it waits until each has settled.
func seedAccounts(t *testing.T, s *stack) {
	t.Helper()
	for _, f := range []string{"account.kind.json", "vpc.kind.json", "route.kind.json", "bom.kind.json", "statussink.kind.json"} {
		must(t, s.conctl("apply", "-f", filepath.Join(classicFixtures, f)))
	}
	must(t, s.conctlIn(`{"kind":"account","name":"default","is_default":true,"spec":{"latency_ms":0}}`+"\n"+
		`{"kind":"statussink","name":"default","is_default":true,"spec":{"endpoint":"file:///nonexistent/converge-test"}}`,
		"apply", "-f", "-"))
	must(t, s.conctlIn(`{"name":"account-failed-to-statussink","watch_kind":"account","transition":"failed","reactor":"statussink","enabled":false}`,
		"apply", "-f", "-"))
	var docs []string
	for i := 1; i <= 5; i++ {
		team := "blue"
		if i%2 == 0 {
			team = "green"
		}
		docs = append(docs, fmt.Sprintf(`{"kind":"account","name":"ready-%d","labels":{"team":%q},"spec":{"team":"t%d","sim":{"latency_ms":0,"failure_rate":0}}}`, i, team, i))
	}
	for _, n := range []string{"broken", "doomed"} {
		docs = append(docs, fmt.Sprintf(`{"kind":"account","name":%q,"labels":{"team":"red"},"spec":{"team":"x","sim":{"latency_ms":0,"terminal_failure_rate":1}}}`, n))
	}
	for _, d := range docs { // one at a time: distinct creation instants give a stable newest-first order
		must(t, s.conctlIn(d, "apply", "-f", "-"))
	}
	for i := 1; i <= 5; i++ {
		s.WaitPhase("account", fmt.Sprintf("ready-%d", i), resource.PhaseReady, 90*time.Second)
	}
	s.WaitPhase("account", "broken", resource.PhaseFailed, 90*time.Second)
	s.WaitPhase("account", "doomed", resource.PhaseFailed, 90*time.Second)
	must(t, s.conctl("quarantine", "account/broken"))
	s.WaitPhase("account", "broken", resource.PhaseQuarantined, 90*time.Second)
}

// names reads the "name" of every item of a -o json list.
func names(t *testing.T, out string) []string {
	t.Helper()
	var page struct {
		Items []struct {
			Name string `json:"name"`
		} `json:"items"`
		NextCursor *string `json:"nextCursor"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &page), out)
	var ns []string
	for _, it := range page.Items {
		ns = append(ns, it.Name)
	}
	return ns
}

func TestGet_OutputFormatsFiltersAndPaging(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{})
	seedAccounts(t, s)

	t.Run("golden tables", func(t *testing.T) {
		cases := []struct {
			reason string
			args   []string
			golden string
		}{
			{"resources, newest first", []string{"get", "resources", "--kind", "account"}, "get-resources.txt"},
			{"resources, wide", []string{"list", "res", "--kind", "account", "-o", "wide"}, "get-resources-wide.txt"},
			{"one resource by KIND/NAME", []string{"get", "res", "account/ready-1"}, "get-resource-one.txt"},
			{"two resources by NAME with --kind", []string{"get", "resource", "ready-2", "ready-3", "--kind", "account"}, "get-resource-two.txt"},
			{"the phase union", []string{"get", "res", "--phase", "failed", "--phase", "QUARANTINED"}, "get-resources-phase-union.txt"},
			{"labels intersect", []string{"get", "res", "-l", "team=blue"}, "get-resources-label.txt"},
			{"kinds", []string{"get", "crds"}, "get-kinds.txt"},
			{"kinds, wide", []string{"get", "kinds", "-o", "wide"}, "get-kinds-wide.txt"},
			{"one kind", []string{"get", "kind", "vpc"}, "get-kind-one.txt"},
			{"providerconfigs", []string{"get", "pc"}, "get-providerconfigs.txt"},
			{"providerconfigs, wide", []string{"get", "providerconfigs", "-o", "wide"}, "get-providerconfigs-wide.txt"},
			{"reactor bindings", []string{"get", "rb"}, "get-reactorbindings.txt"},
			{"reactor bindings, wide", []string{"get", "rb", "-o", "wide"}, "get-reactorbindings-wide.txt"},
		}
		for _, tc := range cases {
			r := must(t, s.conctl(tc.args...))
			require.Empty(t, r.stderr, tc.reason)
			golden(t, tc.golden, r.stdout)
		}
	})

	t.Run("json and yaml", func(t *testing.T) {
		cases := []struct {
			reason string
			args   []string
			want   []string
		}{
			{"every account, newest first", []string{"get", "res", "--kind", "account"},
				[]string{"doomed", "broken", "ready-5", "ready-4", "ready-3", "ready-2", "ready-1"}},
			{"--phase repeats as a union, computed by the server", []string{"get", "res", "--phase", "ready", "--phase", "failed"},
				[]string{"doomed", "ready-5", "ready-4", "ready-3", "ready-2", "ready-1"}},
			{"--phase takes a comma list too", []string{"get", "res", "--phase", "failed,quarantined"},
				[]string{"doomed", "broken"}},
			{"--label k=v repeats as an intersection", []string{"get", "res", "-l", "team=green", "-l", "team=green"},
				[]string{"ready-4", "ready-2"}},
			{"--all follows the cursors across pages of --limit", []string{"get", "res", "--kind", "account", "--limit", "2", "--all"},
				[]string{"doomed", "broken", "ready-5", "ready-4", "ready-3", "ready-2", "ready-1"}},
			{"kinds by name", []string{"get", "kinds"}, []string{"account", "bom", "route", "statussink", "vpc"}},
			{"providerconfigs, newest first", []string{"get", "pc"}, []string{"default", "default"}},
			{"bindings", []string{"get", "rb"}, []string{"account-failed-to-statussink"}},
		}
		for _, tc := range cases {
			r := must(t, s.conctl(append(tc.args, "-o", "json")...))
			require.Equal(t, tc.want, names(t, r.stdout), tc.reason)
			y := must(t, s.conctl(append(tc.args, "-o", "yaml")...))
			var v any
			require.NoError(t, yaml.Unmarshal([]byte(y.stdout), &v), tc.reason)
			asJSON, err := json.Marshal(v)
			require.NoError(t, err)
			require.Equal(t, tc.want, names(t, string(asJSON)), tc.reason+" (yaml)")
		}
	})

	t.Run("one page without --all", func(t *testing.T) {
		r := must(t, s.conctl("get", "res", "--kind", "account", "--limit", "2"))
		require.Equal(t, 3, strings.Count(r.stdout, "\n"), "a header and two rows:\n%s", r.stdout)
		require.Contains(t, r.stderr, "more results: --all, or --after ")
		cursor := strings.TrimSpace(strings.TrimSuffix(strings.SplitN(r.stderr, "--after ", 2)[1], ")\n"))
		next := must(t, s.conctl("get", "res", "--kind", "account", "--limit", "2", "--after", cursor, "-o", "json"))
		require.Equal(t, []string{"ready-5", "ready-4"}, names(t, next.stdout))
		j := must(t, s.conctl("get", "res", "--kind", "account", "--limit", "3", "-o", "json"))
		var page struct {
			NextCursor *string `json:"nextCursor"`
		}
		require.NoError(t, json.Unmarshal([]byte(j.stdout), &page))
		require.NotNil(t, page.NextCursor, "json carries the next cursor")
	})

	t.Run("single objects", func(t *testing.T) {
		r := must(t, s.conctl("get", "resource", "account/ready-1", "-o", "json"))
		var one struct {
			Name  string          `json:"name"`
			Phase string          `json:"phase"`
			Spec  json.RawMessage `json:"spec"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &one))
		require.Equal(t, "ready-1", one.Name)
		require.Equal(t, "READY", one.Phase)
		require.JSONEq(t, `{"team":"t1","sim":{"latency_ms":0,"failure_rate":0}}`, string(one.Spec))
		k := must(t, s.conctl("get", "kind", "vpc", "-o", "yaml"))
		require.Contains(t, k.stdout, "specSchema:")
		require.Contains(t, k.stdout, "enable_flow_logs")
	})

	t.Run("cluster members", func(t *testing.T) {
		r := must(t, s.conctl("get", "nodes"))
		require.Contains(t, r.stdout, "ROLE")
		require.Contains(t, r.stdout, "ALL")
		require.Contains(t, r.stdout, "READY")
		c := must(t, s.conctl("cluster"))
		require.Contains(t, c.stdout, "version v-test")
		require.Contains(t, c.stdout, "READY 5")
		require.Contains(t, c.stdout, "QUARANTINED 1")
		v := must(t, s.conctl("version"))
		require.Contains(t, v.stdout, "server: v-test")
	})

	t.Run("describe", func(t *testing.T) {
		r := must(t, s.conctl("describe", "resource", "account/doomed"))
		for _, want := range []string{"Name:                 doomed", "Phase:                FAILED",
			"terminal: not retried until the spec changes", "Conditions:", "simulated terminal failure", "Events:", "Created"} {
			require.Contains(t, r.stdout, want)
		}
		j := must(t, s.conctl("describe", "res", "doomed", "--kind", "account", "-o", "json"))
		var d struct {
			Phase      string `json:"phase"`
			Conditions []struct {
				Type string `json:"type"`
			} `json:"conditions"`
		}
		require.NoError(t, json.Unmarshal([]byte(j.stdout), &d))
		require.Equal(t, "FAILED", d.Phase)
		require.NotEmpty(t, d.Conditions)
	})

	t.Run("errors", func(t *testing.T) {
		cases := []struct {
			reason string
			args   []string
			code   int // cli.ExitUsage for a bad invocation, cli.ExitFailure for the rest
			stderr []string
		}{
			{"an unknown type lists the known ones", []string{"get", "pods"}, cli.ExitUsage,
				[]string{`unknown type "pods"`, "resource, kind, providerconfig", "Run 'conctl get --help' for usage."}},
			{"a missing resource is NOT_FOUND", []string{"get", "res", "account/nope"}, cli.ExitFailure, []string{"NOT_FOUND", "account/nope"}},
			{"a name without a kind is refused", []string{"get", "res", "nope"}, cli.ExitUsage, []string{"want KIND/NAME"}},
			{"an unknown phase is refused", []string{"get", "res", "--phase", "running"}, cli.ExitUsage, []string{`unknown phase "running"`}},
			{"an unknown output format is refused", []string{"get", "res", "-o", "xml"}, cli.ExitUsage, []string{`unknown output format "xml"`}},
			{"the server refuses a bad label filter value", []string{"get", "res", "-l", "team"}, cli.ExitUsage, []string{"want key=value"}},
			{"two values of one label match nothing: refused, not narrowed to the last", []string{"get", "res", "-l", "team=blue", "-l", "team=green"}, cli.ExitUsage,
				[]string{`--label team is given twice ("blue" and "green")`}},
			{"describe takes only resources", []string{"describe", "kind", "vpc"}, cli.ExitUsage, []string{"not supported here"}},
			{"an unreachable server says so", []string{"get", "kinds", "--server", "http://127.0.0.1:1"}, cli.ExitFailure,
				[]string{"connection refused", "is converge running there?"}},
		}
		for _, tc := range cases {
			r := s.conctl(tc.args...)
			require.Equalf(t, tc.code, r.code, "%s: %s", tc.reason, r.stdout)
			for _, want := range tc.stderr {
				require.Containsf(t, r.stderr, want, tc.reason)
			}
		}
	})
}

func TestVerbs_QuarantineResyncDeleteRun(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{})
	for _, f := range []string{"account.kind.json", "vpc.kind.json"} {
		must(t, s.conctl("apply", "-f", filepath.Join(classicFixtures, f)))
	}
	must(t, s.conctlIn(`{"kind":"vpc","name":"v","labels":{},"spec":{"cidr":"10.0.0.0/24","account_id":"a-1","sim":{"latency_ms":0,"failure_rate":0}}}`,
		"apply", "-f", "-", "--wait", "--timeout", "60s"))

	r := must(t, s.conctl("run", "enable_flow_logs", "vpc/v", "--input", `{"retention_days":7}`, "--wait", "--timeout", "60s"))
	require.Contains(t, r.stdout, "SUCCEEDED")
	ops := must(t, s.conctl("get", "operations", "vpc/v", "-o", "json"))
	var page struct {
		Items []struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(ops.stdout), &page))
	require.Len(t, page.Items, 1)
	require.Equal(t, "SUCCEEDED", page.Items[0].State)
	one := must(t, s.conctl("get", "op", page.Items[0].ID))
	require.Contains(t, one.stdout, "enable_flow_logs")
	w := must(t, s.conctl("watch", "operation", page.Items[0].ID))
	require.Contains(t, w.stdout, "SUCCEEDED")

	bad := s.conctl("run", "no_such_verb", "vpc/v")
	require.Equal(t, 1, bad.code)
	require.Contains(t, bad.stderr, "BAD_USER_INPUT")

	must(t, s.conctl("resync", "vpc/v"))
	q := must(t, s.conctl("quarantine", "vpc/v"))
	require.Equal(t, "resource/vpc/v quarantined (QUARANTINED)\n", q.stdout)
	u := must(t, s.conctl("unquarantine", "vpc/v", "-o", "json"))
	require.Contains(t, u.stdout, `"name": "v"`)

	d := must(t, s.conctl("delete", "resource", "vpc/v", "--wait", "--timeout", "60s"))
	require.Contains(t, d.stdout, "resource/vpc/v deleted")
	gone := s.conctl("get", "res", "vpc/v")
	require.Equal(t, 1, gone.code)
	require.Contains(t, gone.stderr, "NOT_FOUND")

	must(t, s.conctlIn(`{"kind":"vpc","name":"extra","is_default":false,"spec":{}}`, "apply", "-f", "-"))
	must(t, s.conctl("delete", "pc", "vpc/extra"))
	again := s.conctl("delete", "pc", "vpc/extra")
	require.Equal(t, 1, again.code)
	require.Contains(t, again.stderr, "NOT_FOUND")
	kinds := s.conctl("delete", "kind", "vpc")
	require.Equal(t, cli.ExitUsage, kinds.code)
	require.Contains(t, kinds.stderr, "not supported here")
}

// A filter get cannot apply is refused, naming it, rather than ignored: a
// named resource is shown whatever its phase or labels, and kinds, configs,
// bindings, members and operations have no phase, labels or owner (kubectl
// refuses a name with a selector too).
func TestGet_RefusesFiltersItCannotApply(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{})
	must(t, s.conctl("apply", "-f", filepath.Join(classicFixtures, "account.kind.json")))
	must(t, s.conctlIn(`{"kind":"account","name":"a","labels":{"team":"blue"},"spec":{"team":"t","sim":{"latency_ms":0,"failure_rate":0}}}`,
		"apply", "-f", "-"))
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"get", "account", "a", "--phase", "failed"}, "--phase filters a list: it does not apply to named resources"},
		{[]string{"get", "res", "account/a", "-l", "team=red"}, "--label filters a list: it does not apply to named resources"},
		{[]string{"get", "account/a", "--owner", "bom/x"}, "--owner filters a list: it does not apply to named resources"},
		{[]string{"get", "res", "--reactor", "account"}, "--reactor does not apply to resources"},
		{[]string{"get", "res", "--version", "v1"}, "--version does not apply to resources"},
		{[]string{"get", "kinds", "--phase", "failed"}, "--phase does not apply to kinds"},
		{[]string{"list", "kinds", "--version", "v1"}, "--version does not apply to a list of kinds"},
		{[]string{"get", "pc", "-l", "team=blue"}, "--label does not apply to providerconfigs"},
		{[]string{"get", "rb", "--owner", "account/a"}, "--owner does not apply to reactorbindings"},
		{[]string{"get", "nodes", "--kind", "account"}, "--kind does not apply to clustermembers"},
		{[]string{"get", "operations", "account/a", "--phase", "failed"}, "--phase does not apply to operations"},
	}
	for _, tc := range cases {
		r := s.conctl(tc.args...)
		require.Equalf(t, cli.ExitUsage, r.code, "%v: stdout %q", tc.args, r.stdout)
		require.Emptyf(t, r.stdout, "%v", tc.args)
		require.Containsf(t, r.stderr, "Error: "+tc.want, "%v", tc.args)
		require.Containsf(t, r.stderr, "--help' for usage", "%v: a usage error", tc.args)
	}
	// The filters that do apply still work.
	must(t, s.conctl("get", "account", "a", "--kind", "account"))
	must(t, s.conctl("get", "res", "--kind", "account", "--phase", "ready", "-l", "team=blue"))
	must(t, s.conctl("get", "kind", "account", "--version", "v1"))
}

// The API lists a resource's 100 newest operations, no more: get operations
// KIND/NAME says so on stderr when it shows that many, rather than passing
// the 100 off as the whole list.
func TestGet_OperationsSaysWhenItShowsOnlyTheNewest(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{})
	must(t, s.conctl("apply", "-f", filepath.Join(classicFixtures, "vpc.kind.json")))
	must(t, s.conctlIn(`{"kind":"vpc","name":"v","labels":{},"spec":{"cidr":"10.0.0.0/24","account_id":"a-1","sim":{"latency_ms":0,"failure_rate":0}}}`,
		"apply", "-f", "-"))
	for range 101 {
		must(t, s.conctl("run", "enable_flow_logs", "vpc/v", "--input", `{"retention_days":7}`))
	}
	for _, o := range []string{"table", "json"} {
		r := must(t, s.conctl("get", "operations", "vpc/v", "-o", o))
		require.Containsf(t, r.stderr, "the 100 newest operations of vpc/v", "-o %s", o)
		if o == "json" {
			var page struct {
				Items []json.RawMessage `json:"items"`
			}
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &page), "stdout is the one JSON object")
			require.Len(t, page.Items, 100)
		}
	}
}

// TestGet_LimitFillsAPageAcrossShortServerPages: the server reads a bounded
// number of resources per request, so a label rare within a kind comes back
// in short, even empty, pages with a cursor; --limit keeps asking until it
// has its page, and --all still serves every match once.
func TestGet_LimitFillsAPageAcrossShortServerPages(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{noWorker: true})
	for _, f := range []string{"account.kind.json", "vpc.kind.json"} {
		must(t, s.conctl("apply", "-f", filepath.Join(classicFixtures, f)))
	}
	ctx := t.Context()
	apply := func(kind, name string, labels map[string]string, spec string) {
		_, _, err := s.store.ApplyResource(ctx, store.ApplyResourceInput{Kind: kind, Name: name, Labels: labels, Spec: json.RawMessage(spec)})
		require.NoError(t, err)
	}
	// The oldest: five accounts labelled zone=a. Then, newer, more vpcs
	// labelled zone=a and more unlabelled accounts than a request reads.
	for i := 1; i <= 5; i++ {
		apply("account", fmt.Sprintf("zoned-%d", i), map[string]string{"zone": "a"}, `{"team":"t"}`)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < 1100; i += 4 {
				apply("vpc", fmt.Sprintf("vpc-%d", i), map[string]string{"zone": "a"}, `{"cidr":"10.0.0.0/24"}`)
				apply("account", fmt.Sprintf("plain-%d", i), nil, `{"team":"t"}`)
			}
		}()
	}
	wg.Wait()

	r := must(t, s.conctl("get", "res", "--kind", "account", "-l", "zone=a", "--limit", "3", "-o", "json"))
	require.Equal(t, []string{"zoned-5", "zoned-4", "zoned-3"}, names(t, r.stdout), "the first server page is empty: conctl asks again")
	require.Contains(t, r.stdout, `"nextCursor"`)
	r = must(t, s.conctl("get", "res", "--kind", "account", "-l", "zone=a", "--limit", "3", "--all", "-o", "json"))
	require.Equal(t, []string{"zoned-5", "zoned-4", "zoned-3", "zoned-2", "zoned-1"}, names(t, r.stdout))
	r = must(t, s.conctl("get", "res", "--kind", "account", "-l", "zone=a", "--limit", "3"))
	require.Contains(t, r.stderr, "(more results: --all, or --after ")
	require.NotContains(t, r.stderr, "requests", "a full page needs no warning")

	// Newer still, more zone=a vpcs than a page's requests read (conctl's
	// 10, each of the server's 400 candidates): the page stops after its
	// last request, empty, says so, and keeps the cursor, from which the
	// next page goes on to the accounts.
	const requests, budget = 10, 400
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1100 + w; i < 1100+requests*budget+100; i += 4 {
				apply("vpc", fmt.Sprintf("vpc-%d", i), map[string]string{"zone": "a"}, `{"cidr":"10.0.0.0/24"}`)
			}
		}()
	}
	wg.Wait()
	r = must(t, s.conctl("get", "res", "--kind", "account", "-l", "zone=a", "--limit", "3", "-o", "json"))
	require.Empty(t, names(t, r.stdout), "every request read vpcs only")
	require.Contains(t, r.stderr, fmt.Sprintf("(0 of 3 after %d requests", requests))
	var page struct {
		NextCursor string `json:"nextCursor"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &page))
	require.NotEmpty(t, page.NextCursor, "the page keeps its cursor")
	r = must(t, s.conctl("get", "res", "--kind", "account", "-l", "zone=a", "--limit", "3", "--after", page.NextCursor, "-o", "json"))
	require.Equal(t, []string{"zoned-5", "zoned-4", "zoned-3"}, names(t, r.stdout), "the next page goes on from the cursor")
}
