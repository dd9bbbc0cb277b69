package cli_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/cli"
)

func walkCommands(c *cobra.Command, f func(*cobra.Command)) {
	f(c)
	for _, sub := range c.Commands() {
		walkCommands(sub, f)
	}
}

func TestCommands_EveryCommandHasHelpWithExamples(t *testing.T) {
	t.Parallel()
	root := cli.NewCommand(cli.Env{})
	walkCommands(root, func(c *cobra.Command) {
		require.NotEmptyf(t, c.Short, "%s has a short description", c.CommandPath())
		require.NotEmptyf(t, strings.TrimSpace(c.Example), "%s has examples", c.CommandPath())
		args := append(strings.Fields(strings.TrimPrefix(c.CommandPath(), "conctl")), "--help")
		r := runConctl(context.Background(), "http://127.0.0.1:1", "", args...)
		require.Equalf(t, 0, r.code, "%s --help: %s", c.CommandPath(), r.stderr)
		require.Containsf(t, r.stdout, "Examples:", "%s --help shows the examples", c.CommandPath())
	})
}

func TestCommands_UsageErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		reason string
		args   []string
		stderr []string
	}{
		{"an unknown command", []string{"frobnicate"}, []string{`unknown command "frobnicate"`, "Run 'conctl --help' for usage."}},
		{"an unknown flag", []string{"get", "res", "--frob"}, []string{"unknown flag: --frob", "Run 'conctl get --help' for usage."}},
		{"a missing argument", []string{"get"}, []string{"requires at least 1 arg(s)"}},
		{"an unknown --type", []string{"apply", "--type", "pod", "-f", "-"}, []string{`unknown type "pod"`}},
		{"a bad --limit", []string{"get", "res", "--limit", "0"}, []string{"--limit 0: want 1-500"}},
		{"watch operation without its id", []string{"watch", "operations"}, []string{"watch operation needs the operation's id"}},
		{"--tls-cert without --tls-key", []string{"get", "kinds", "--tls-cert", "c.pem"}, []string{"--tls-cert and --tls-key go together"}},
		{"edit edits YAML and prints apply's lines: -o json is refused", []string{"edit", "res", "account/x", "-o", "json"},
			[]string{"edit prints no object: -o json is not supported here", "Run 'conctl edit --help' for usage."}},
		{"watch operation prints state lines: -o yaml is refused", []string{"watch", "operation", "op-1", "-o", "yaml"},
			[]string{"watch operation prints no object: -o yaml is not supported here"}},
		{"--version is a kind's", []string{"edit", "res", "account/x", "--version", "v2"}, []string{"only edit kind takes it"}},
		{"kinds are listed whole: --limit is refused", []string{"get", "kinds", "--limit", "1"},
			[]string{"--limit pages resources and providerconfigs only: kinds are listed whole"}},
		{"so are reactor bindings: --after is refused", []string{"list", "rb", "--after", "x"},
			[]string{"--after pages resources and providerconfigs only: reactorbindings are listed whole"}},
		{"and cluster members", []string{"get", "nodes", "--limit", "2"}, []string{"clustermembers are listed whole"}},
		{"a resource's operations are its 100 newest: --limit is refused", []string{"get", "operations", "account/a", "--limit", "5"},
			[]string{"--limit pages resources and providerconfigs only: a resource's operations are listed as its 100 newest"}},
		{"a watch lists kinds whole: --limit is refused", []string{"watch", "kinds", "--limit", "1"},
			[]string{"--limit pages a watch's first listing of resources only: kinds are listed whole"}},
		{"and cluster members", []string{"watch", "nodes", "--limit", "2"}, []string{"clustermembers are listed whole"}},
		{"and provider configs: --after is refused", []string{"watch", "pc", "--after", "x"},
			[]string{"--after pages a watch's first listing of resources only: providerconfigs are listed whole"}},
		{"a --wait timeout that is not positive is refused, not reported as a timeout", []string{"apply", "-f", "-", "--wait", "--timeout", "-1s"},
			[]string{"--timeout -1s: want a positive duration", "Run 'conctl apply --help' for usage."}},
		{"so is delete's", []string{"delete", "res", "account/x", "--wait", "--timeout", "0s"},
			[]string{"--timeout 0s: want a positive duration", "Run 'conctl delete --help' for usage."}},
		{"and run's", []string{"run", "enable_flow_logs", "vpc/x", "--wait", "--timeout", "-1m"},
			[]string{"--timeout -1m0s: want a positive duration", "Run 'conctl run --help' for usage."}},
		{"and cluster drain's", []string{"cluster", "drain", "m-1", "--wait", "--timeout", "0"},
			[]string{"--timeout 0s: want a positive duration", "Run 'conctl cluster drain --help' for usage."}},
		{"apply without -f is a usage error", []string{"apply"},
			[]string{"no input: pass -f FILE, -f DIR or -f -", "Run 'conctl apply --help' for usage."}},
		{"so is diff's", []string{"diff"}, []string{"no input: pass -f", "Run 'conctl diff --help' for usage."}},
		{"and stdin twice", []string{"apply", "-f", "-", "-f", "-"}, []string{"-f - (stdin) given twice", "Run 'conctl apply --help' for usage."}},
		{"watch pc NAME needs a kind", []string{"watch", "pc", "default"}, []string{`"default": want KIND/NAME (or NAME with --kind)`}},
		{"an extra argument", []string{"version", "extra"}, []string{"accepts 0 arg(s), received 1", "Run 'conctl version --help' for usage."}},
		{"an unknown subcommand of a group (cobra printed the group's help and exited 0)", []string{"kind", "confg", "route"},
			[]string{`unknown command "confg" for "conctl kind"`, "Run 'conctl kind --help' for usage."}},
		{"so of completion", []string{"completion", "tcsh"}, []string{`unknown command "tcsh" for "conctl completion"`}},
		{"an unknown help topic (cobra printed 'Unknown help topic' and exited 0)", []string{"help", "frob"}, []string{`unknown help topic "frob"`}},
		{"a bad flag value", []string{"get", "res", "--limit", "many"}, []string{`invalid argument "many" for "--limit" flag`}},
		{"a --server that is no http(s) URL", []string{"get", "kinds", "--server", "ftp://host"}, []string{`--server "ftp://host": scheme "ftp" is not http or https`}},
	}
	for _, tc := range cases {
		r := runConctl(context.Background(), "http://127.0.0.1:1", "", tc.args...)
		require.Equal(t, cli.ExitUsage, r.code, tc.reason)
		require.True(t, strings.HasPrefix(r.stderr, "Error: "), "%s: %q", tc.reason, r.stderr)
		for _, want := range tc.stderr {
			require.Containsf(t, r.stderr, want, tc.reason)
		}
	}
}

// A failure that is no bad invocation exits 1, never 2: a script tells "I
// called it wrong" from everything else by the code alone.
func TestCommands_OtherFailuresExit1(t *testing.T) {
	t.Parallel()
	cases := []struct {
		reason string
		args   []string
		stderr string
	}{
		{"a CA file that cannot be read", []string{"get", "kinds", "--tls-ca", "/nonexistent/ca.pem"}, "read --tls-ca"},
		{"a server that does not answer", []string{"get", "kinds"}, "connection refused (is converge running there?"},
		{"a file that cannot be read", []string{"apply", "-f", "/nonexistent/doc.json"}, "read /nonexistent/doc.json"},
	}
	for _, tc := range cases {
		r := runConctl(context.Background(), "http://127.0.0.1:1", "", tc.args...)
		require.Equal(t, cli.ExitFailure, r.code, tc.reason)
		require.Contains(t, r.stderr, tc.stderr, tc.reason)
		require.NotContains(t, r.stderr, "--help' for usage", tc.reason)
	}
	r := runConctl(context.Background(), "http://127.0.0.1:1", "", "kind")
	require.Equal(t, cli.ExitOK, r.code, "a group without a subcommand prints its help")
	require.Contains(t, r.stdout, "Available Commands:")
}

func TestCommands_CompletionScripts(t *testing.T) {
	t.Parallel()
	for _, sh := range []string{"bash", "zsh", "fish", "powershell"} {
		r := runConctl(context.Background(), "http://127.0.0.1:1", "", "completion", sh)
		require.Equal(t, 0, r.code, sh)
		require.Contains(t, r.stdout, "conctl", sh)
	}
	r := runConctl(context.Background(), "http://127.0.0.1:1", "", "__complete", "get", "")
	require.Equal(t, 0, r.code)
	for _, want := range []string{"resource", "res", "crd", "pc", "rb", "nodes"} {
		require.Contains(t, strings.Fields(r.stdout), want)
	}
	r = runConctl(context.Background(), "http://127.0.0.1:1", "", "__complete", "get", "res", "--phase", "")
	require.Contains(t, strings.Fields(r.stdout), "quarantined")
}

// A token with a control character (a file's trailing newline) is refused
// before any request, naming where it came from, never printing it; net/http
// refused every request with "invalid header field value", naming neither.
func TestCommands_RefusesATokenAHeaderCannotCarry(t *testing.T) {
	t.Parallel()
	r := runConctl(context.Background(), "http://127.0.0.1:1", "", "get", "kinds", "--token", "s3cret\n")
	require.Equal(t, cli.ExitUsage, r.code, "a bad --token is a usage error")
	require.Contains(t, r.stderr, `Error: the token (--token or CONVERGE_TOKEN) contains a control character ('\n' at byte 6)`)
	require.NotContains(t, r.stderr, "s3cret")
}

func TestDocs_CLIReferenceIsFresh(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	require.NoError(t, cli.GenerateMarkdown(&b))
	onDisk, err := os.ReadFile("../docs/cli.md")
	require.NoError(t, err)
	require.Equal(t, string(onDisk), b.String(), "docs/cli.md is stale: run go generate ./cli")
	for _, want := range []string{"## conctl apply", "## conctl watch", "## conctl describe", "--insecure-skip-verify"} {
		require.Contains(t, b.String(), want)
	}
}
