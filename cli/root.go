package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// Env is what a conctl run reads and writes: tests pass buffers and their
// own environment, cmd/conctl the process's.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Getenv reads CONVERGE_SERVER and CONVERGE_TOKEN; nil reads nothing.
	Getenv func(string) string
	// Version is conctl's build version.
	Version string
	// Now is the clock ages are computed from (default time.Now).
	Now func() time.Time
	// Age renders an age column; nil uses kubectl's short form relative to
	// Now. Golden-file tests pin it.
	Age func(time.Time) string
	// StderrIsTerminal makes apply --wait draw its bar with ANSI codes.
	StderrIsTerminal bool
}

// app is one invocation's state, shared by the commands.
type app struct {
	env    Env
	flags  connFlags
	output string
	conn   *Conn
	// kinds caches the applied kinds' names (kindNames).
	kinds []string
	// results are what apply, diff and delete did, kept for -o json|yaml
	// and printed as one list when the command ends (even on an error).
	results []actionResult
	// named are the names -o name printed (each is printed once: delete
	// --wait reports a resource requested, then deleted).
	named map[string]bool
}

// The exit codes of Run. conctl uses no other non-zero code: a script can
// tell "called wrong" (2) from every other failure (1).
const (
	ExitOK      = 0
	ExitFailure = 1 // the server refused, a wait failed or timed out, a file could not be read, Ctrl+C, ...
	ExitUsage   = 2 // a bad invocation: unknown command or flag, missing or extra argument, bad flag value, refused combination
)

// Run executes conctl with args and returns the process exit code: 0 on
// success, 2 on a usage error (with a --help hint), 1 on any other failure
// (the error, with the GraphQL error code when the server sent one, goes to
// stderr).
func Run(ctx context.Context, env Env, args []string) int {
	a, root := newApp(env)
	defer a.close()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	err = errors.Join(err, a.flushResults())
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
		// Ctrl+C (SIGINT) or SIGTERM: what it cut short was a wait or a
		// request, never a failure of the server's.
		fmt.Fprintln(env.Stderr, "Error: interrupted (what was already requested continues on the server)")
		return ExitFailure
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "Error: %s\n", FormatError(err))
		if isUsageError(err) {
			fmt.Fprintf(env.Stderr, "Run '%s --help' for usage.\n", commandPath(root, args))
			return ExitUsage
		}
		return ExitFailure
	}
	return ExitOK
}

// NewCommand builds the conctl command tree.
func NewCommand(env Env) *cobra.Command {
	_, root := newApp(env)
	return root
}

// withDefaults fills the fields left unset: no input, discarded output, an
// empty environment, the wall clock and version "dev".
func (env Env) withDefaults() Env {
	if env.Stdin == nil {
		env.Stdin = strings.NewReader("")
	}
	if env.Stdout == nil {
		env.Stdout = io.Discard
	}
	if env.Stderr == nil {
		env.Stderr = io.Discard
	}
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	if env.Now == nil {
		env.Now = time.Now
	}
	if env.Version == "" {
		env.Version = "dev"
	}
	return env
}

func newApp(env Env) (*app, *cobra.Command) {
	env = env.withDefaults()
	a := &app{env: env}
	root := &cobra.Command{
		Use:   "conctl",
		Short: "conctl drives a converge control plane over its GraphQL API",
		Long: `conctl drives a converge control plane over its GraphQL API: apply kind manifests,
provider configs, reactor bindings and resources; list, describe and watch them;
run operator verbs. Every call goes through the GraphQL endpoint (<server>/graphql);
watch and --wait follow changes over its websocket subscriptions.

Connection settings come from flags, else from the environment:
CONVERGE_SERVER (default ` + DefaultServer + `) and CONVERGE_TOKEN (a bearer token).
A --server URL carrying credentials (http://user:password@host) is refused:
pass the token with --token or CONVERGE_TOKEN.`,
		Example: `  # Apply the classic demo's kinds, configs, binding and sample BOM, then wait for it
  conctl apply -f examples/classic/testfixtures
  conctl apply -f examples/classic/testfixtures/resource-bom-sample.json --wait

  # What is failing right now?
  conctl get resources --phase failed --phase degraded

  # Talk to a TLS endpoint with a token
  CONVERGE_TOKEN=s3cret conctl --server https://converge.example.com --tls-ca ca.pem cluster`,
		SilenceUsage:      true,
		SilenceErrors:     true,
		DisableAutoGenTag: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return a.resolveFlags(cmd)
		},
	}
	root.SetIn(env.Stdin)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	pf := root.PersistentFlags()
	pf.StringVar(&a.flags.server, "server", DefaultServer, "the converge API base URL (env CONVERGE_SERVER)")
	pf.StringVar(&a.flags.token, "token", "", "bearer token (env CONVERGE_TOKEN)")
	pf.StringVar(&a.flags.tlsCA, "tls-ca", "", "PEM CA bundle to verify the server with")
	pf.StringVar(&a.flags.tlsCert, "tls-cert", "", "PEM client certificate (mutual TLS)")
	pf.StringVar(&a.flags.tlsKey, "tls-key", "", "PEM client key (mutual TLS)")
	pf.BoolVar(&a.flags.insecure, "insecure-skip-verify", false, "do not verify the server's certificate (testing only)")
	pf.StringVarP(&a.output, "output", "o", outTable, "output format: table, wide, json, yaml or name (TYPE/NAME per line: get, list, apply, delete, rollback, quarantine, unquarantine, resync, run)")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(outputFormats, cobra.ShellCompDirectiveNoFileComp))
	for _, f := range []string{"tls-ca", "tls-cert", "tls-key"} {
		_ = root.MarkPersistentFlagFilename(f, "pem", "crt", "key")
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })

	root.AddCommand(
		a.applyCommand(),
		a.getCommand(),
		a.listCommand(),
		a.describeCommand(),
		a.deleteCommand(),
		a.editCommand(),
		a.kindCommand(),
		a.quarantineCommand(),
		a.unquarantineCommand(),
		a.resyncCommand(),
		a.runCommand(),
		a.watchCommand(),
		a.whyCommand(),
		a.historyCommand(),
		a.rollbackCommand(),
		a.diffCommand(),
		a.clusterCommand(),
		a.versionCommand(),
	)
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	exampleCompletion(root)
	for _, c := range root.Commands() {
		if c.Name() == "help" {
			c.Example = "  conctl help apply"
			refuseUnknownHelpTopics(c)
		}
	}
	refuseUnknownSubcommands(root)
	return a, root
}

// refuseUnknownSubcommands makes every group below root (a command that
// only holds others: kind, completion) refuse an unknown subcommand as a
// usage error; cobra printed the group's help and exited 0 for
// "conctl kind confg route". Without arguments a group still prints its
// help.
func refuseUnknownSubcommands(root *cobra.Command) {
	for _, c := range root.Commands() {
		refuseUnknownSubcommands(c)
		if !c.HasSubCommands() || c.Runnable() {
			continue
		}
		c.Args = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())}
			}
			return nil
		}
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	}
}

// refuseUnknownHelpTopics makes "conctl help frob" a usage error; cobra
// printed "Unknown help topic" and the usage, and exited 0.
func refuseUnknownHelpTopics(help *cobra.Command) {
	run := help.Run
	help.Run = nil
	help.RunE = func(cmd *cobra.Command, args []string) error {
		if c, _, err := cmd.Root().Find(args); err != nil || c == nil || (len(args) > 0 && c == cmd.Root()) {
			return usageError{fmt.Errorf("unknown help topic %q", strings.Join(args, " "))}
		}
		run(cmd, args)
		return nil
	}
}

// close releases the connection's idle keep-alive connections.
func (a *app) close() {
	if a.conn != nil {
		a.conn.close()
	}
}

// resolveFlags applies the environment to unset flags and checks -o.
func (a *app) resolveFlags(cmd *cobra.Command) error {
	fl := cmd.Flags()
	if !fl.Changed("server") {
		if v := a.env.Getenv("CONVERGE_SERVER"); v != "" {
			a.flags.server = v
		}
	}
	if !fl.Changed("token") {
		if v := a.env.Getenv("CONVERGE_TOKEN"); v != "" {
			a.flags.token = v
		}
	}
	if !slices.Contains(outputFormats, a.output) {
		return usageError{fmt.Errorf("unknown output format %q (one of %s)", a.output, strings.Join(outputFormats, ", "))}
	}
	if a.output == outName && !slices.Contains(nameOutputCommands, cmd.CommandPath()) && !builtinCommand(cmd) {
		return usageError{fmt.Errorf("%s prints no list of objects: -o name is not supported here (it is by %s)",
			cmd.CommandPath(), strings.Join(nameOutputCommands, ", "))}
	}
	return nil
}

// builtinCommand reports whether cmd is one of cobra's (help, completion).
func builtinCommand(cmd *cobra.Command) bool {
	for c := cmd; c.HasParent(); c = c.Parent() {
		if c.Parent() == c.Root() {
			return c.Name() == "help" || c.Name() == "completion" || strings.HasPrefix(c.Name(), "__")
		}
	}
	return false
}

// client connects lazily (commands that only parse files never dial).
func (a *app) client() (*Conn, error) {
	if a.conn != nil {
		return a.conn, nil
	}
	c, err := a.flags.dial(a.env.Version)
	if err != nil {
		return nil, err
	}
	a.conn = c
	return c, nil
}

// age renders the age of t.
func (a *app) age(t time.Time) string {
	if a.env.Age != nil {
		return a.env.Age(t)
	}
	return humanAge(a.env.Now().Sub(t))
}

func (a *app) stdout() io.Writer { return a.env.Stdout }
func (a *app) stderr() io.Writer { return a.env.Stderr }

// structured reports whether -o asks for JSON or YAML, and writes v in it.
func (a *app) structured(v any) (bool, error) {
	switch a.output {
	case outJSON:
		return true, writeJSON(a.stdout(), v)
	case outYAML:
		return true, writeYAML(a.stdout(), v)
	}
	return false, nil
}

// progressOut is where a wait's closing line goes: stdout, or stderr when
// -o json|yaml keeps stdout for the one structured object (or -o name for
// the names).
func (a *app) progressOut() io.Writer {
	if a.isStructured() || a.output == outName {
		return a.stderr()
	}
	return a.stdout()
}

// isStructured reports whether -o asks for JSON or YAML.
func (a *app) isStructured() bool { return a.output == outJSON || a.output == outYAML }

// actionResult is one thing apply, diff or delete did (or, with dryRun,
// would do) to one object.
type actionResult struct {
	// Object names it as the line prints it: resource/KIND/NAME,
	// providerconfig/KIND/NAME, reactorbinding/NAME, manifest/KIND, kind/KIND.
	Object string `json:"object"`
	// Version is the kind version a kind delete removed.
	Version string `json:"version,omitempty"`
	// Outcome is created, configured, unchanged, migrated (v1 → v2),
	// deleted, deletion requested (DELETING), ...
	Outcome string `json:"outcome"`
	DryRun  bool   `json:"dryRun,omitempty"`
	// Changes are a dry run's spec and labels changes ("- path: before",
	// "+ path: after").
	Changes []string `json:"changes,omitempty"`
}

// report prints one result line ("resource/bom/acme created"), or keeps it
// for the one -o json|yaml list {"items": [...]} printed at the end.
func (a *app) report(r actionResult) {
	if a.output == outName {
		a.printNames(objectName(r.Object))
		return
	}
	if a.isStructured() {
		a.results = append(a.results, r)
		return
	}
	line := r.Object
	if r.Version != "" {
		line += " " + r.Version
	}
	line += " " + r.Outcome
	if r.DryRun {
		line += " (dry run)"
	}
	fmt.Fprintln(a.stdout(), line)
	for _, c := range r.Changes {
		fmt.Fprintf(a.stdout(), "  %s\n", c)
	}
}

// flushResults prints the kept results as one list.
func (a *app) flushResults() error {
	if len(a.results) == 0 {
		return nil
	}
	_, err := a.structured(page[actionResult]{Items: a.results})
	a.results = nil
	return err
}

// noStructuredOutput refuses -o json|yaml for a command that prints no
// object (name is the command, for the message).
func (a *app) noStructuredOutput(name string) error {
	if a.isStructured() {
		return usageError{fmt.Errorf("%s prints no object: -o %s is not supported here", name, a.output)}
	}
	return nil
}

// checkTimeout refuses a --wait whose --timeout is zero or negative: it
// would end the wait before it started, reported as a timeout.
func checkTimeout(wait bool, timeout time.Duration) error {
	if wait && timeout <= 0 {
		return usageError{fmt.Errorf("--timeout %s: want a positive duration (how long --wait waits)", timeout)}
	}
	return nil
}

// usageError marks a bad invocation (Run adds the --help hint).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// Cobra's own refusals (an unknown command, an argument count of its
// validators) are known by their text; an error carrying the server's answer
// never is one, whatever its text.
func isUsageError(err error) bool {
	var u usageError
	if errors.As(err, &u) {
		return true
	}
	var api *APIError
	if errors.As(err, &api) {
		return false
	}
	return strings.HasPrefix(err.Error(), "unknown command") || strings.Contains(err.Error(), "arg(s)")
}

// commandPath is the deepest command args name (for the --help hint).
func commandPath(root *cobra.Command, args []string) string {
	c, _, err := root.Find(args)
	if err != nil || c == nil {
		return root.Name()
	}
	return c.CommandPath()
}

// exactArgs, rangeArgs and minArgs wrap cobra's validators as usage errors.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.ExactArgs(n)(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

func rangeArgs(lo, hi int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.RangeArgs(lo, hi)(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

func minArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.MinimumNArgs(n)(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

// completionExamples are the examples of cobra's generated completion
// commands: each runs as printed in bash (cli/clidocs_test.go runs them),
// writing under ~ where the shell looks for completions.
var completionExamples = map[string]string{
	"completion": `  # Names of kinds, resources and configs complete from the server as you type
  source <(conctl completion bash)`,
	"bash": `  # Load completions into the current bash session
  source <(conctl completion bash)

  # Load them in every new session (bash-completion's per-user directory)
  mkdir -p ~/.local/share/bash-completion/completions
  conctl completion bash > ~/.local/share/bash-completion/completions/conctl`,
	"zsh": `  # Write the script into a directory on $fpath (add fpath=(~/.zsh/completions $fpath)
  # to ~/.zshrc before compinit), then start a new shell
  mkdir -p ~/.zsh/completions
  conctl completion zsh > ~/.zsh/completions/_conctl`,
	"fish": `  # Write the script where fish looks for completions, then start a new shell
  mkdir -p ~/.config/fish/completions
  conctl completion fish > ~/.config/fish/completions/conctl.fish`,
	"powershell": `  # Write the script, then dot-source it from your profile: . ~/conctl.ps1
  conctl completion powershell > ~/conctl.ps1`,
}

// exampleCompletion gives cobra's generated completion commands examples.
func exampleCompletion(root *cobra.Command) {
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		c.Example = completionExamples[c.Name()]
		for _, sh := range c.Commands() {
			sh.Example = completionExamples[sh.Name()]
		}
	}
}

// Main is cmd/conctl's body.
func Main(version string) int {
	ctx, stop := signalContext()
	defer stop()
	return Run(ctx, Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv,
		Version: version, StderrIsTerminal: isTerminal(os.Stderr)}, os.Args[1:])
}
