package cli_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/cli"
)

// lines splits a command's stdout into its lines.
func lines(s string) []string { return strings.Split(strings.TrimSuffix(s, "\n"), "\n") }

// -o name prints one TYPE/NAME per line (kubectl's habit, for xargs), in a
// form every command taking TYPE/NAME reads back; commands that print no
// list of objects refuse it.
func TestOutputName_PrintsOneNamePerLineThatCommandsReadBack(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{})
	r := must(t, s.conctl("apply", "-o", "name", "-f", filepath.Join(classicFixtures, "account.kind.json"),
		"-f", filepath.Join(classicFixtures, "providerconfig-account.json")))
	require.Equal(t, []string{"kind/account", "providerconfig/account/default"}, lines(r.stdout), "apply names what it applied")
	r = must(t, s.conctlIn(account("a")+account("b"), "apply", "-f", "-", "--wait", "-o", "name"))
	require.Equal(t, []string{"account/a", "account/b"}, lines(r.stdout), "stdout holds the names alone: the READY lines go to stderr")
	require.Contains(t, r.stderr, "resource/account/a is READY")

	for _, tc := range []struct {
		reason string
		args   []string
		want   []string
	}{
		{"a kind's resources", []string{"get", "account", "--sort-by", ".name"}, []string{"account/a", "account/b"}},
		{"resources by --kind", []string{"list", "res", "--kind", "account", "--sort-by", ".name"}, []string{"account/a", "account/b"}},
		{"named resources", []string{"get", "account/b", "account/a"}, []string{"account/b", "account/a"}},
		{"kinds", []string{"get", "kinds"}, []string{"kind/account"}},
		{"a named kind", []string{"get", "kind", "account"}, []string{"kind/account"}},
		{"providerconfigs", []string{"get", "pc"}, []string{"providerconfig/account/default"}},
		{"quarantine names what it set aside", []string{"quarantine", "account/b"}, []string{"account/b"}},
		{"unquarantine too", []string{"unquarantine", "account/b"}, []string{"account/b"}},
		{"resync too", []string{"resync", "account/a", "account/b"}, []string{"account/a", "account/b"}},
	} {
		r := must(t, s.conctl(append(tc.args, "-o", "name")...))
		require.Equal(t, tc.want, lines(r.stdout), tc.reason)
	}
	members := lines(must(t, s.conctl("get", "nodes", "-o", "name")).stdout)
	require.NotEmpty(t, members)
	for _, m := range members {
		require.True(t, strings.HasPrefix(m, "clustermember/"), m)
	}

	// The names read back: get prints the same objects, delete --wait names
	// each once (requested, then gone).
	names := lines(must(t, s.conctl("get", "account", "-o", "name")).stdout)
	require.Equal(t, names, lines(must(t, s.conctl(append([]string{"get", "-o", "name"}, names...)...)).stdout))
	require.ElementsMatch(t, []string{"account/a", "account/b"}, names)
	r = must(t, s.conctl(append([]string{"delete", "--wait", "-o", "name"}, names...)...))
	require.Equal(t, names, lines(r.stdout))
	require.Equal(t, []string{"providerconfig/account/default"},
		lines(must(t, s.conctl("delete", "providerconfig/account/default", "-o", "name")).stdout))

	for _, tc := range []struct {
		reason string
		args   []string
		stderr string
	}{
		{"describe shows one object's detail", []string{"describe", "account/a"}, "conctl describe prints no list of objects: -o name is not supported here"},
		{"diff shows changes", []string{"diff", "-f", "-"}, "conctl diff prints no list of objects"},
		{"a watch prints changes", []string{"watch", "res"}, "conctl watch prints no list of objects"},
		{"so does get -w", []string{"get", "res", "-w"}, "-o name names the objects of a list: it does not apply to --watch"},
		{"cluster is a report", []string{"cluster"}, "conctl cluster prints no list of objects"},
		{"so is why", []string{"why", "account/a"}, "conctl why prints no list of objects"},
	} {
		r := s.conctl(append(tc.args, "-o", "name")...)
		require.Equal(t, cli.ExitUsage, r.code, tc.reason)
		require.Contains(t, r.stderr, tc.stderr, tc.reason)
		require.Empty(t, r.stdout, tc.reason)
	}
}
