package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// GenerateMarkdown writes the CLI reference (docs/cli.md) from the command
// tree: every command's synopsis, description, examples and flags. The
// output depends only on the tree, never on the environment.
func GenerateMarkdown(w io.Writer) error {
	root := NewCommand(Env{})
	var b strings.Builder
	b.WriteString("# conctl reference\n\n")
	b.WriteString("<!-- Generated from the command tree by `go generate ./cli` (cli/docs.go): do not edit. -->\n\n")
	b.WriteString(root.Long + "\n\n")
	b.WriteString("## Global flags\n\nEvery command takes these.\n\n```\n")
	b.WriteString(root.PersistentFlags().FlagUsagesWrapped(100))
	b.WriteString("```\n\n" + exitStatus + "\n\n")
	b.WriteString("## Commands\n\n")
	var all []*cobra.Command
	walk(root, func(c *cobra.Command) { all = append(all, c) })
	for _, c := range all {
		fmt.Fprintf(&b, "- [`%s`](#%s) — %s\n", c.CommandPath(), anchor(c.CommandPath()), c.Short)
	}
	b.WriteString("\n")
	for _, c := range all {
		writeCommand(&b, c)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// exitStatus is the reference's paragraph on conctl's exit codes (Run).
const exitStatus = `Exit status: one of three codes, so a script can tell a bad invocation from a
refusal. The error always goes to stderr.

- 0: success (a watch ended with Ctrl+C too).
- 1: any failure that is no usage error. The server refused: ` + "`Error: CODE: message`" + `, where
  CODE is the GraphQL error's ` + "`extensions.code`" + ` (BAD_USER_INPUT, NOT_FOUND, CONFLICT,
  UNAUTHENTICATED, FORBIDDEN, INTERNAL); the server could not be reached; a file could not be
  read; a --wait failed or timed out; or Ctrl+C (or SIGTERM) cut a wait or a request short
  (` + "`Error: interrupted`" + `; what was already requested continues on the server).
- 2: a usage error: an unknown command, flag or help topic, a missing or extra argument, a bad
  flag value or a refused combination of flags. ` + "`Error: …`" + ` is followed by
  ` + "`Run 'conctl … --help' for usage.`" + `, and nothing was written.

conctl uses no other exit code.`

// walk visits every available command below root, depth first, in cobra's
// (sorted) order.
func walk(root *cobra.Command, f func(*cobra.Command)) {
	for _, c := range root.Commands() {
		if !c.IsAvailableCommand() && c.Name() != "help" {
			continue
		}
		f(c)
		walk(c, f)
	}
}

func anchor(path string) string { return strings.ReplaceAll(strings.ToLower(path), " ", "-") }

func writeCommand(b *strings.Builder, c *cobra.Command) {
	fmt.Fprintf(b, "## %s\n\n%s\n\n", c.CommandPath(), c.Short)
	if c.Long != "" && c.Long != c.Short {
		b.WriteString(c.Long + "\n\n")
	}
	fmt.Fprintf(b, "```\n%s\n```\n\n", c.UseLine())
	if len(c.Aliases) > 0 {
		fmt.Fprintf(b, "Aliases: `%s`\n\n", strings.Join(c.Aliases, "`, `"))
	}
	if c.Example != "" {
		fmt.Fprintf(b, "Examples:\n\n```sh\n%s\n```\n\n", c.Example)
	}
	if fl := c.LocalNonPersistentFlags(); fl.HasAvailableFlags() {
		fmt.Fprintf(b, "Flags:\n\n```\n%s```\n\n", fl.FlagUsagesWrapped(100))
	}
}
