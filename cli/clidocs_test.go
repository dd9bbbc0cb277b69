package cli_test

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/cli"
	"github.com/converge-run/converge/core/app/apptest"
)

// cliExample is one command line of an Examples block of docs/cli.md.
type cliExample struct {
	section string // the command whose section prints it: "conctl apply"
	line    string // as printed, without the block's indent
}

func (e cliExample) String() string { return e.section + " example `" + e.line + "`" }

// An example line's trailing comment can say how it runs:
//
//   - "# exits 1 ..." (the README's convention): it must exit 1, as the
//     comment explains (a refusal worth showing);
//   - "# placeholder ...": it names a value no demo can have (a member's
//     id is made per process), so it is not run; exampleSkips says why
//     each one cannot be concrete, and the test only checks that conctl
//     parses it.
var (
	exitsOne    = regexp.MustCompile(`\s#\s*exits 1\b`)
	placeholder = regexp.MustCompile(`\s#\s*placeholder\b`)
)

// exampleSkips are the "# placeholder" lines of docs/cli.md, each with
// why it cannot run as printed. The page and this list must agree.
var exampleSkips = map[string]string{
	"conctl cluster drain broker-host-a-4242-118532 --wait   # placeholder ID: one that conctl get members lists": perProcessID +
		"; and draining the demo's only converge would end the demo",
	"conctl cluster kill broker-host-a-4242-118532 --wait   # placeholder ID: one that conctl get members lists": perProcessID +
		"; and killing the demo's only converge would end the demo",
}

const perProcessID = "a member's id is made per process (role-host-pid-n), so no printed id names a running member"

// examplesLast are the sections whose examples remove what the other
// examples read (bom/acme, the demo's binding, the config the apply
// example creates): they run after every other example, in this order.
// Every other example runs in the page's order.
var examplesLast = []string{"conctl delete"}

// examplesBefore are the orders the examples rely on. The test fails if
// the page (or examplesLast) stops giving one, rather than letting a later
// example fail for a reason its section does not show.
var examplesBefore = []struct{ first, then, why string }{
	{"conctl get bom acme -o yaml > acme.yaml", "conctl apply -f acme.yaml", "apply reads the file get writes"},
	{`echo '{"kind":"vpc","name":"staging","is_default":false,"spec":{"latency_ms":100}}' | conctl apply -f -`,
		"conctl delete pc vpc/staging", "delete removes the config apply creates"},
	{"conctl quarantine vpc/acme-t1-vpc", "conctl unquarantine vpc/acme-t1-vpc", "unquarantine lifts the quarantine set before"},
	{"conctl get bom acme -o yaml | sed 's/teams: 3/teams: 4/' | conctl apply -f -", "conctl rollback bom/acme --to 1",
		"rollback needs a generation 2 to roll back from"},
}

// exampleSays is what an example must print (on stdout or stderr) where
// it could exit 0 without doing what its comment says: a sed that no longer
// matches leaves an edit cancelled or a diff unchanged, and a refusal must
// be the refusal shown.
var exampleSays = map[string]string{
	`EDITOR='sed -i "s/latency_ms: 300/latency_ms: 250/"' conctl edit pc account/default`: "providerconfig/account/default configured",
	"conctl get bom acme -o yaml | sed 's/teams: 3/teams: 4/' | conctl diff -f -":         "- spec/teams: 3\n  + spec/teams: 4",
	"conctl get bom acme -o yaml | sed 's/teams: 3/teams: 4/' | conctl apply -f -":        "resource/bom/acme configured",
	"conctl rollback bom/acme --to 1":                                                     "rolled back to the spec of generation 1: now generation 3",
	"conctl kind delete vpc --version v1   # exits 1: the demo's vpcs run v1":             "CONFLICT: kind vpc/v1 still has",
}

// cliDocExamples returns the command lines of docs/cli.md's Examples
// blocks, in the page's order (comment and blank lines are not commands).
func cliDocExamples(t *testing.T) []cliExample {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "docs", "cli.md"))
	require.NoError(t, err)
	defer f.Close()
	var (
		out               []cliExample
		section           string
		examples, inBlock bool
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "## conctl"):
			section, examples = strings.TrimPrefix(l, "## "), false
		case l == "Examples:":
			examples = true
		case examples && l == "```sh":
			inBlock = true
		case inBlock && l == "```":
			inBlock, examples = false, false
		case inBlock:
			line := strings.TrimSpace(l)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			require.Falsef(t, strings.HasSuffix(line, `\`), "%s: one command per line (the test runs lines)", section)
			out = append(out, cliExample{section: section, line: line})
		}
	}
	require.NoError(t, sc.Err())
	require.Greater(t, len(out), 40, "docs/cli.md has its Examples blocks")
	return out
}

// exampleOrder is the order the examples run in: the page's, with the
// examplesLast sections moved to the end.
func exampleOrder(all []cliExample) []cliExample {
	rank := func(e cliExample) int { return slices.Index(examplesLast, e.section) + 1 }
	order := slices.Clone(all)
	slices.SortStableFunc(order, func(a, b cliExample) int { return rank(a) - rank(b) })
	return order
}

// TestCLIDocs_ExamplesRunAsPrinted runs every example command of
// docs/cli.md exactly as printed against a real converge and worker holding
// the classic demo (the demoShell the README's test uses: bash, since an
// example loads completions with source <(…)), in the page's order with
// the deletes last, and fails naming the example when one does not do what
// it says. An example exits 0 (or 1 where it says "# exits 1"), conctl
// reports no error, and it prints what exampleSays holds for it. One that
// follows changes until interrupted (conctl watch, get -w) must print its
// listing (or, with --watch-only, hold its subscription), still be running,
// and exit 0 on Ctrl+C. The "# placeholder" lines are not run (exampleSkips
// says why); conctl must still parse them.
func TestCLIDocs_ExamplesRunAsPrinted(t *testing.T) {
	t.Parallel()
	all := cliDocExamples(t)
	checkExampleMarkers(t, all)
	order := exampleOrder(all)
	for _, dep := range examplesBefore {
		first := slices.IndexFunc(order, func(e cliExample) bool { return e.line == dep.first })
		then := slices.IndexFunc(order, func(e cliExample) bool { return e.line == dep.then })
		require.NotEqualf(t, -1, first, "docs/cli.md no longer has %q (%s): update examplesBefore", dep.first, dep.why)
		require.NotEqualf(t, -1, then, "docs/cli.md no longer has %q (%s): update examplesBefore", dep.then, dep.why)
		require.Lessf(t, first, then, "%q must run before %q: %s", dep.first, dep.then, dep.why)
	}
	for line := range exampleSays {
		require.Truef(t, slices.ContainsFunc(all, func(e cliExample) bool { return e.line == line }),
			"docs/cli.md no longer has %q: update exampleSays", line)
	}

	d := startDemoShell(t)
	for _, e := range order {
		follower, watchOnly := follows(e.line)
		switch {
		case placeholder.MatchString(e.line):
			t.Logf("not run: %s: %s", e, exampleSkips[e.line])
		case follower:
			d.runFollower(t, e, watchOnly)
		case exitsOne.MatchString(e.line):
			checkExampleRun(t, e, 1, d.run(t, e.line))
		default:
			checkExampleRun(t, e, 0, d.run(t, e.line))
		}
	}
}

// conctlError is how conctl reports a failure on stderr.
var conctlError = regexp.MustCompile(`(?m)^Error: `)

// checkExampleRun fails the test, naming e, unless r exited want and, on
// success, conctl reported no error (one inside <(…) or $(…) does not
// change the line's exit status).
func checkExampleRun(t *testing.T, e cliExample, want int, r shellRun) {
	t.Helper()
	t.Logf("ran %s: exit status %d", e, r.code)
	says, ok := exampleSays[e.line]
	switch {
	case r.code == -1:
		t.Errorf("%s did not finish before its deadline\nstdout:\n%s\nstderr:\n%s", e, r.stdout, r.stderr)
	case r.code != want || (want == 0 && conctlError.MatchString(r.stderr)):
		t.Errorf("%s: exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", e, r.code, want, r.stdout, r.stderr)
	case ok && !strings.Contains(r.stdout+r.stderr, says):
		t.Errorf("%s does not say %q\nstdout:\n%s\nstderr:\n%s", e, says, r.stdout, r.stderr)
	}
}

// checkExampleMarkers checks the placeholder lines against exampleSkips
// and that conctl parses each: the command exists, its flags and its
// number of arguments are valid.
func checkExampleMarkers(t *testing.T, all []cliExample) {
	t.Helper()
	marked := map[string]bool{}
	for _, e := range all {
		if !placeholder.MatchString(e.line) {
			continue
		}
		marked[e.line] = true
		require.Containsf(t, exampleSkips, e.line, "%s is marked placeholder: add it to exampleSkips with why it cannot be concrete", e)
		args := strings.Fields(e.line[:placeholder.FindStringIndex(e.line)[0]])
		require.Equalf(t, "conctl", args[0], "%s: a placeholder line is one conctl command", e)
		root := cli.NewCommand(cli.Env{})
		cmd, rest, err := root.Find(args[1:])
		require.NoErrorf(t, err, "%s", e)
		require.NoErrorf(t, cmd.ParseFlags(rest), "%s", e)
		require.NoErrorf(t, cmd.ValidateArgs(cmd.Flags().Args()), "%s", e)
	}
	for line := range exampleSkips {
		require.Truef(t, marked[line], "exampleSkips lists %q, which docs/cli.md does not print as a placeholder", line)
	}
}

// follows reports whether a line follows changes until interrupted
// (conctl watch, or get/list with -w, --watch or --watch-only), and
// whether it skips the listing (--watch-only).
func follows(line string) (follower, watchOnly bool) {
	f := strings.Fields(line)
	if len(f) < 2 || f[0] != "conctl" {
		return false, false
	}
	watchOnly = slices.Contains(f[2:], "--watch-only")
	switch f[1] {
	case "watch":
		return true, watchOnly
	case "get", "ls", "list":
		return watchOnly || slices.ContainsFunc(f[2:], func(a string) bool { return a == "-w" || a == "--watch" }), watchOnly
	}
	return false, false
}

// runFollower starts a line that follows changes and waits until it
// follows them: it printed its listing (a resource watch subscribes before
// it lists; a cluster member or catalog watch prints what its subscription
// first pushes), or, with --watch-only, the hub counts its subscription.
// It checks the line is still running, interrupts it as Ctrl+C does and
// checks it exits 0 without an error.
func (d *demoShell) runFollower(t *testing.T, e cliExample, watchOnly bool) {
	t.Helper()
	subscriptions := func() int {
		res, counts, mems, ops := d.hub.SubscriberCount()
		return res + counts + mems + ops
	}
	if watchOnly {
		// An earlier example's subscriptions close when its process
		// exits; wait for that, so the one counted below is this one's.
		apptest.WaitFor(t, 30*time.Second, "no live subscription before "+e.String(), func() bool { return subscriptions() == 0 })
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var stdout, stderr syncBuffer
	cmd := d.start(ctx, e.line, &stdout, &stderr)
	require.NoErrorf(t, cmd.Start(), "%s", e)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	ended := false
	apptest.WaitFor(t, time.Minute, e.String()+" follows changes (a watch example prints its listing, or passes --watch-only)", func() bool {
		select {
		case err := <-done:
			done <- err
			ended = true
			return true
		default:
		}
		if watchOnly {
			return subscriptions() > 0
		}
		return strings.TrimSpace(stdout.String()) != ""
	})
	if ended {
		r := shellResult(t, <-done, ctx.Err(), &stdout, &stderr)
		t.Errorf("%s ended on its own (exit status %d) instead of following changes\nstdout:\n%s\nstderr:\n%s",
			e, r.code, r.stdout, r.stderr)
		return
	}
	require.NoErrorf(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGINT), "%s: interrupt", e)
	select {
	case err := <-done:
		checkExampleRun(t, e, 0, shellResult(t, err, ctx.Err(), &stdout, &stderr))
	case <-time.After(30 * time.Second):
		cancel()
		err := <-done
		t.Errorf("%s did not exit within 30s of Ctrl+C (then killed: %v)\nstdout:\n%s\nstderr:\n%s", e, err, stdout.String(), stderr.String())
	}
}
