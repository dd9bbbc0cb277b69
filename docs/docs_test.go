// Package docs_test checks the documentation against the repository: what
// README.md, CONTRIBUTING.md, docs/*.md and the examples' and commands'
// READMEs link to, and the recipes, packages, flags, conctl commands, tests,
// paths and upper-case names they print, exist; the layout tables, the
// README's devstack flags, graphql.md's tables and operations.md's worker
// variables are whole. A rename or a removal fails CI instead of leaving a
// reader with a dead link or a command that does not run.
package docs_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// root is the repository root, relative to this package.
const root = ".."

// markdownFiles are the documentation files a reader meets: the README, the
// contributing guide, docs/, and the READMEs of the examples, the commands,
// the TypeScript SDK and the chart.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "CONTRIBUTING.md"}
	for _, pattern := range []string{"docs/*.md", "examples/*/README*.md", "cmd/*/README*.md",
		"workerproto/ts/README*.md", "deploy/helm/*/README*.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		require.NoError(t, err)
		for _, f := range m {
			rel, err := filepath.Rel(root, f)
			require.NoError(t, err)
			files = append(files, filepath.ToSlash(rel))
		}
	}
	sort.Strings(files)
	require.Contains(t, files, "docs/operations.md", "the documentation is found")
	return files
}

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	require.NoError(t, err)
	return string(b)
}

var fence = regexp.MustCompile("(?ms)^[ \t]*(```|~~~).*?^[ \t]*(```|~~~)[ \t]*$")

var codeSpan = regexp.MustCompile("`[^`\n]+`")

// prose is a document without its fenced blocks.
func prose(doc string) string { return fence.ReplaceAllString(doc, "") }

// text is a document's prose without its code spans: what renders as
// links and headings.
func text(doc string) string { return codeSpan.ReplaceAllString(prose(doc), "``") }

// fencedBlocks returns the bodies of a document's fenced blocks whose info
// string is one of langs.
func fencedBlocks(doc string, langs ...string) []string {
	var blocks, cur []string
	in, keep := false, false
	for _, l := range strings.Split(doc, "\n") {
		trimmed := strings.TrimSpace(l)
		switch {
		case !in && strings.HasPrefix(trimmed, "```"):
			in, keep, cur = true, slices.Contains(langs, strings.TrimPrefix(trimmed, "```")), nil
		case in && trimmed == "```":
			in = false
			if keep {
				blocks = append(blocks, strings.Join(cur, "\n"))
			}
		case in:
			cur = append(cur, l)
		}
	}
	return blocks
}

// anchors are the fragment ids GitHub gives a document's headings: the
// heading's text lower-cased, markup and punctuation dropped, spaces as
// hyphens, a repeated id suffixed -1, -2, ….
func anchors(doc string) map[string]bool {
	heading := regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$`)
	link := regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	ids := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(prose(doc), -1) {
		text := link.ReplaceAllString(m[1], "$1")
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127 && isLetter(r):
				b.WriteRune(r)
			}
		}
		id := b.String()
		if n, ok := seen[id]; ok {
			seen[id] = n + 1
			id += "-" + strconv.Itoa(n+1)
		} else {
			seen[id] = 0
		}
		ids[id] = true
	}
	return ids
}

func isLetter(r rune) bool { return strings.ToLower(string(r)) != strings.ToUpper(string(r)) }

// TestDocs_LinksStayInTheRepositoryAndResolve: every Markdown link in the
// documentation points inside the repository (the docs stand alone and link
// only to themselves and the code), to a file or folder that exists, and,
// with a #fragment into a Markdown file, to one of its headings.
func TestDocs_LinksStayInTheRepositoryAndResolve(t *testing.T) {
	t.Parallel()
	link := regexp.MustCompile(`!?\[[^\]]*\]\(<?([^)\s>]+)>?(?:\s+"[^"]*")?\)`)
	var problems []string
	for _, f := range markdownFiles(t) {
		doc := read(t, f)
		for _, m := range link.FindAllStringSubmatch(text(doc), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || strings.HasPrefix(target, "//") {
				problems = append(problems, f+": links outside the repository: "+target)
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			resolved := f
			if path != "" {
				if strings.HasPrefix(path, "/") {
					problems = append(problems, f+": an absolute path does not resolve in a clone: "+target)
					continue
				}
				resolved = filepath.ToSlash(filepath.Join(filepath.Dir(f), path))
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(resolved))); err != nil {
					problems = append(problems, f+": links to a file that does not exist: "+target)
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(resolved, ".md") {
				continue
			}
			if !anchors(read(t, resolved))[frag] {
				problems = append(problems, f+": links to a heading "+resolved+" does not have: "+target)
			}
		}
	}
	if len(problems) > 0 {
		t.Errorf("dead or outside links:\n%s", strings.Join(problems, "\n"))
	}
}

// recipes are the justfile's recipe names.
func recipes(t *testing.T) map[string]bool {
	t.Helper()
	recipe := regexp.MustCompile(`(?m)^([a-z][a-z0-9_-]*)(?:[ \t][^:\n]*)?:(?:[ \t]|$)`)
	names := map[string]bool{}
	for _, m := range recipe.FindAllStringSubmatch(read(t, "justfile"), -1) {
		names[m[1]] = true
	}
	require.True(t, names["test"] && names["dev"], "the justfile's recipes are found: %v", names)
	return names
}

// commands are the command lines the documentation prints: every line of
// its sh blocks (continuation lines joined) and every inline code span.
func commands(t *testing.T, f string) []string {
	t.Helper()
	doc := read(t, f)
	var lines []string
	for _, b := range fencedBlocks(doc, "sh", "bash", "shell", "console") {
		b = strings.ReplaceAll(b, "\\\n", " ")
		lines = append(lines, strings.Split(b, "\n")...)
	}
	span := regexp.MustCompile("`([^`\n]+)`")
	for _, m := range span.FindAllStringSubmatch(prose(doc), -1) {
		lines = append(lines, m[1])
	}
	return lines
}

// TestDocs_JustRecipesExist: every `just RECIPE` the documentation prints is
// a recipe of the justfile.
func TestDocs_JustRecipesExist(t *testing.T) {
	t.Parallel()
	have := recipes(t)
	just := regexp.MustCompile(`(?:^|[\s;&|(])just ([a-z][a-z0-9-]*)`)
	var missing []string
	for _, f := range markdownFiles(t) {
		for _, l := range commands(t, f) {
			for _, m := range just.FindAllStringSubmatch(l, -1) {
				if !have[m[1]] {
					missing = append(missing, f+": just "+m[1])
				}
			}
		}
	}
	if len(missing) > 0 {
		t.Errorf("the documentation prints recipes the justfile does not have:\n%s", strings.Join(missing, "\n"))
	}
}

// TestDocs_GoCommandsNameExistingPackagesAndTests: every `go run`, `go test`,
// `go generate`, `go vet` or `go build` the documentation prints names
// package directories that exist (run from the repository root), and every
// test or benchmark it selects with -run or -bench exists (in the package
// named, when it names one).
func TestDocs_GoCommandsNameExistingPackagesAndTests(t *testing.T) {
	t.Parallel()
	goCmd := regexp.MustCompile(`\bgo (?:run|test|generate|vet|build)\b([^;&|#]*)`)
	pkg := regexp.MustCompile(`(?:^|\s)(\./[A-Za-z0-9_./-]*)`)
	sel := regexp.MustCompile(`\s-(run|bench)[ =]('[^']*'|"[^"]*"|[^\s'"]+)`)
	funcs := testFuncs(t)
	var problems []string
	for _, f := range markdownFiles(t) {
		for _, l := range commands(t, f) {
			if strings.Contains(l, "cd ") { // relative to another directory
				continue
			}
			for _, m := range goCmd.FindAllStringSubmatch(l, -1) {
				for _, p := range pkg.FindAllStringSubmatch(m[1], -1) {
					dir := strings.TrimSuffix(strings.TrimSuffix(p[1], "..."), "/")
					if st, err := os.Stat(filepath.Join(root, dir)); err != nil || !st.IsDir() {
						problems = append(problems, f+": no package directory "+p[1]+" ("+strings.TrimSpace(l)+")")
					}
				}
				in := funcs // the package's own tests when one package is named
				if ps := pkg.FindAllStringSubmatch(m[1], -1); len(ps) == 1 && !strings.HasSuffix(ps[0][1], "...") {
					in = packageTests(t, ps[0][1])
				}
				for _, s := range sel.FindAllStringSubmatch(m[1], -1) {
					if p := selects(in, s[1], strings.Trim(s[2], `'"`)); p != "" {
						problems = append(problems, f+": "+p+" ("+strings.TrimSpace(l)+")")
					}
				}
			}
		}
	}
	if len(problems) > 0 {
		t.Errorf("the documentation prints go commands that cannot run as printed:\n%s", strings.Join(problems, "\n"))
	}
}

// TestDocs_NamedTestsExist: a test the documentation names (`TestX`, as the
// proof of a behaviour or the way to measure one) exists. The benchmarks'
// history is a record, which may name tests since renamed or removed.
func TestDocs_NamedTestsExist(t *testing.T) {
	t.Parallel()
	funcs := testFuncs(t)
	named := regexp.MustCompile("`(?:go test [^`]*-run '?)?((?:Test|Benchmark|Fuzz|Example)[A-Z][A-Za-z0-9_]*)")
	var missing []string
	for _, f := range markdownFiles(t) {
		if f == "docs/benchmarks-history.md" {
			continue
		}
		for _, m := range named.FindAllStringSubmatch(read(t, f), -1) {
			if len(m[1]) > len("Benchmark") && !funcs.matches(m[1]) && !placeholder.MatchString(m[1]) {
				missing = append(missing, f+": "+m[1])
			}
		}
	}
	if len(missing) > 0 {
		t.Errorf("the documentation names tests that do not exist:\n%s", strings.Join(missing, "\n"))
	}
}

// selects says what is wrong with a -run or -bench pattern (flag is "run"
// or "bench"), as go test reads it: a regular expression over the top-level
// names (before the first /) that must select a test or benchmark, unless it
// is meant to select none ('^$').
func selects(funcs testNames, flag, pattern string) string {
	top, _, _ := strings.Cut(pattern, "/")
	re, err := regexp.Compile(top)
	if err != nil {
		return "-" + flag + " " + pattern + " is not a regular expression: " + err.Error()
	}
	if re.MatchString("") {
		return "" // '^$': nothing on purpose
	}
	for _, name := range funcs {
		if strings.HasPrefix(name, "Benchmark") == (flag == "bench") && re.MatchString(name) {
			return ""
		}
	}
	return "-" + flag + " " + pattern + " selects no " + map[string]string{"run": "test", "bench": "benchmark"}[flag]
}

// placeholder is a name that stands for any: FuzzX, TestX.
var placeholder = regexp.MustCompile(`^(Test|Benchmark|Fuzz|Example)X$`)

type testNames []string

// matches reports whether a -run prefix (or a whole name) selects a test.
func (n testNames) matches(prefix string) bool {
	for _, name := range n {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// testFuncs are the names of every test, benchmark, fuzz target and
// example in the module's test files.
func testFuncs(t *testing.T) testNames {
	t.Helper()
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz|Example)[A-Za-z0-9_]*)\(`)
	var names testNames
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "node_modules", ".git", "dist", ".artifacts":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllStringSubmatch(string(b), -1) {
			names = append(names, m[1])
		}
		return nil
	})
	require.NoError(t, err)
	require.True(t, names.matches("TestDocs_NamedTestsExist"), "the tests are found")
	return names
}

// packageTests are the tests, benchmarks, fuzz targets and examples of one
// package directory (./core/app).
func packageTests(t *testing.T, dir string) testNames {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(dir), "*_test.go"))
	require.NoError(t, err)
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz|Example)[A-Za-z0-9_]*)\(`)
	var names testNames
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range decl.FindAllStringSubmatch(string(b), -1) {
			names = append(names, m[1])
		}
	}
	return names
}

// TestDocs_OperationsNamesEveryWorkerVariable: every variable the Go worker
// SDK reads (core/worker's OptionsFrom) is named in docs/operations.md,
// where an operator looks for what a worker reads.
func TestDocs_OperationsNamesEveryWorkerVariable(t *testing.T) {
	t.Parallel()
	src := read(t, "core/worker/env.go")
	doc := read(t, "docs/operations.md")
	names := regexp.MustCompile(`getenv\("([A-Z][A-Z0-9_]+)"\)`).FindAllStringSubmatch(src, -1)
	require.NotEmpty(t, names, "the variables are found in core/worker/env.go")
	var missing []string
	for _, n := range names {
		if !strings.Contains(doc, "`"+n[1]+"`") {
			missing = append(missing, n[1])
		}
	}
	if len(missing) > 0 {
		t.Errorf("workers read %v, which docs/operations.md does not name", missing)
	}
}

// section is the part of a document under a "## title" heading, up to the
// next heading of that level.
func section(t *testing.T, doc, title string) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, "\n## "+title+"\n")
	require.True(t, ok, "the document has a ## %s section", title)
	rest, _, _ = strings.Cut(rest, "\n## ")
	return rest
}

// TestDocs_LayoutNamesEveryPackage: the layout tables of the README and
// CONTRIBUTING name every package under core/, workerproto/ and tools/, so
// a package added without a word in them fails here.
func TestDocs_LayoutNamesEveryPackage(t *testing.T) {
	t.Parallel()
	readme := section(t, read(t, "README.md"), "Layout")
	contributing := section(t, read(t, "CONTRIBUTING.md"), "Layout")
	var missing []string
	for _, parent := range []string{"core", "workerproto", "tools"} {
		entries, err := os.ReadDir(filepath.Join(root, parent))
		require.NoError(t, err)
		for _, e := range entries {
			if !e.IsDir() || e.Name() == "gen" || e.Name() == "converge" {
				continue // generated code; the .proto sources
			}
			if !strings.Contains(readme, "`"+e.Name()+"`") && !strings.Contains(readme, "`"+e.Name()+"/`") {
				missing = append(missing, "README.md: "+parent+"/"+e.Name())
			}
			if parent == "core" && !strings.Contains(contributing, "`core/"+e.Name()+"`") && !strings.Contains(contributing, "`core/"+e.Name()+"/") {
				missing = append(missing, "CONTRIBUTING.md: "+parent+"/"+e.Name())
			}
		}
	}
	if len(missing) > 0 {
		t.Errorf("the layout tables do not name:\n%s", strings.Join(missing, "\n"))
	}
}

// TestDocs_ReadmeNamesEveryDevstackFlag: the README's quick start names
// every flag devstack takes.
func TestDocs_ReadmeNamesEveryDevstackFlag(t *testing.T) {
	t.Parallel()
	readme := section(t, read(t, "README.md"), "Quick start")
	files, err := filepath.Glob(filepath.Join(root, "cmd", "devstack", "*.go"))
	require.NoError(t, err)
	flagDecl := regexp.MustCompile(`flag\.[A-Za-z]+\((?:&[A-Za-z.]+, )?"([a-z][a-z0-9-]*)"`) // flag.X("name" or flag.XVar(&v, "name"
	var flags, missing []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range flagDecl.FindAllStringSubmatch(string(b), -1) {
			flags = append(flags, m[1])
			if !strings.Contains(readme, "`--"+m[1]) {
				missing = append(missing, "--"+m[1])
			}
		}
	}
	require.Contains(t, flags, "addr", "devstack's flags are found")
	if len(missing) > 0 {
		t.Errorf("devstack takes %v, which the README's quick start does not name", missing)
	}
}

// TestDocs_NamedPathsExist: every repository path the documentation names
// in code (`core/api/limits.go`, `db/functions/`, `graph/schema/*.graphqls`)
// exists, read from the repository root or from the document's folder (an
// example's README names its own files); a path with a placeholder
// (`<name>`, `000NN`) stands for any and is not checked.
func TestDocs_NamedPathsExist(t *testing.T) {
	t.Parallel()
	span := regexp.MustCompile("`([^`\\s]+)`")
	top := regexp.MustCompile(`^\.?/?(\.ci|cli|cmd|core|db|deploy|docs|examples|frontend|graph|resolvers|tools|workerproto)/`)
	var missing []string
	for _, f := range markdownFiles(t) {
		for _, m := range span.FindAllStringSubmatch(prose(read(t, f)), -1) {
			p := strings.TrimPrefix(m[1], "./")
			if !top.MatchString(p) || strings.ContainsAny(p, "<>{}$|…") || strings.Contains(p, "NN") {
				continue
			}
			p = strings.TrimSuffix(strings.TrimSuffix(p, "..."), "/")
			p, _, _ = strings.Cut(p, ":") // a line, or a tag
			matches, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(p)))
			require.NoError(t, err, "%s: %s", f, m[1])
			if len(matches) == 0 {
				matches, _ = filepath.Glob(filepath.Join(root, filepath.Dir(f), filepath.FromSlash(p)))
			}
			if len(matches) == 0 {
				missing = append(missing, f+": "+m[1])
			}
		}
	}
	if len(missing) > 0 {
		t.Errorf("the documentation names paths that do not exist:\n%s", strings.Join(missing, "\n"))
	}
}

// flagNames are the command-line flags a main package declares with the
// flag package (flag.X or a FlagSet's fs.X).
func flagNames(t *testing.T, dir string) map[string]bool {
	t.Helper()
	decl := regexp.MustCompile(`\.(?:Bool|Int|Int64|Uint|String|Duration|Float64|Func|BoolFunc|TextVar|Var|BoolVar|IntVar|Int64Var|UintVar|StringVar|DurationVar|Float64Var)\((?:[^,()"]+, )?"([a-z][a-z0-9-]*)"`)
	files, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(dir), "*.go"))
	require.NoError(t, err)
	names := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range decl.FindAllStringSubmatch(string(b), -1) {
			names[m[1]] = true
		}
	}
	return names
}

// TestDocs_CommandFlagsExist: every flag the documentation passes to one
// of the repository's flag-package commands — `go run ./DIR -flag …`, or
// the `just` recipes that run one (bench, bench-river, chaos, images,
// helm-check) — is a flag that command declares. (conctl's flags are
// checked by its own tests.)
func TestDocs_CommandFlagsExist(t *testing.T) {
	t.Parallel()
	recipeDir := map[string]string{"bench": "examples/classic/cmd/bench", "bench-river": "examples/classic/cmd/bench",
		"chaos": "examples/chaos", "images": "tools/images", "helm-check": "tools/helmcheck", "dev": "cmd/devstack"}
	run := regexp.MustCompile(`(?:\bgo run (\./[A-Za-z0-9_./-]+)|(?:^|[\s;&|(])just (` +
		"bench|bench-river|chaos|images|helm-check|dev" + `)(?:\s|$))([^;&|#]*)`)
	flagUse := regexp.MustCompile(`(?:^|\s)--?([a-z][a-z0-9-]*)`)
	var problems []string
	checked := 0
	for _, f := range markdownFiles(t) {
		for _, l := range commands(t, f) {
			for _, m := range run.FindAllStringSubmatch(l, -1) {
				dir := strings.TrimPrefix(m[1], "./")
				if m[2] != "" {
					dir = recipeDir[m[2]]
				}
				if dir == "cmd/conctl" || strings.HasPrefix(dir, "tools/") && m[2] == "" {
					continue // cobra flags; the tools module runs from tools/
				}
				declared := flagNames(t, dir)
				if len(declared) == 0 {
					continue // a command without flags of the flag package
				}
				for _, u := range flagUse.FindAllStringSubmatch(m[3], -1) {
					checked++
					if !declared[u[1]] {
						problems = append(problems, f+": "+dir+" has no flag -"+u[1]+" ("+strings.TrimSpace(l)+")")
					}
				}
			}
		}
	}
	require.Greater(t, checked, 20, "the documented commands' flags are found")
	if len(problems) > 0 {
		t.Errorf("the documentation passes flags the commands do not declare:\n%s", strings.Join(problems, "\n"))
	}
}

// TestDocs_ReadmeRecipeDefaultsAreTheJustfiles: a default the README's
// recipe table gives a recipe's parameter ("(default 10000)", "at 1M rows")
// is the justfile's.
func TestDocs_ReadmeRecipeDefaultsAreTheJustfiles(t *testing.T) {
	t.Parallel()
	param := regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*) [A-Z]+="([0-9]+)"`)
	defaults := map[string]string{}
	for _, m := range param.FindAllStringSubmatch(read(t, "justfile"), -1) {
		defaults[m[1]] = m[2]
	}
	require.Equal(t, "10000", defaults["bench"], "the justfile's defaults are found")
	row := regexp.MustCompile("(?m)^\\| `just ([a-z][a-z0-9-]*) \\[[A-Z]+\\]` \\| (.*) \\|$")
	stated := regexp.MustCompile(`\(default ([0-9]+)\)|at (1M) rows`)
	checked := 0
	for _, m := range row.FindAllStringSubmatch(section(t, read(t, "README.md"), "Everyday commands"), -1) {
		s := stated.FindStringSubmatch(m[2])
		if s == nil {
			continue
		}
		want := s[1]
		if s[2] == "1M" {
			want = "1000000"
		}
		checked++
		require.Equalf(t, defaults[m[1]], want, "the README gives just %s the default %s", m[1], want)
	}
	require.GreaterOrEqual(t, checked, 3, "the README's stated defaults are found")
}

// external are upper-case names the documentation uses that belong to
// others: gqlgen's error codes, Connect's, Go's build switch, terraform's
// CLI configuration, and a value the reader fills in.
var external = map[string]bool{"GRAPHQL_PARSE_FAILED": true, "GRAPHQL_VALIDATION_FAILED": true,
	"PERMISSION_DENIED": true, "CGO_ENABLED": true, "TF_CLI_CONFIG_FILE": true, "CLUSTER_ID": true}

// TestDocs_NamedVariablesExist: every upper-case name the documentation
// shows in code (`WORKER_TOKEN`, `API_MAX_DEPTH`, `BENCH_ROWS`,
// `NO_WORKER`) occurs in the sources — Go, TypeScript, SQL, the schema, the
// protocol, the justfile, CI's scripts or the chart — so a variable, code or
// gate renamed in the code and not in the docs fails here.
func TestDocs_NamedVariablesExist(t *testing.T) {
	t.Parallel()
	var corpus strings.Builder
	exts := []string{".go", ".ts", ".tsx", ".sql", ".graphqls", ".proto", ".tpl", ".yaml"}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "node_modules", ".git", "dist", ".artifacts", "docs", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !slices.Contains(exts, filepath.Ext(path)) && d.Name() != "justfile" && filepath.Base(filepath.Dir(path)) != ".ci" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		corpus.Write(b)
		return nil
	})
	require.NoError(t, err)
	src := corpus.String()
	require.Contains(t, src, "WORKER_TOKEN_FILE", "the sources are read")
	name := regexp.MustCompile("`([A-Z][A-Z0-9]*_[A-Z0-9_]*[A-Z0-9])(?:=[^`]*)?`")
	var missing []string
	for _, f := range markdownFiles(t) {
		if f == "docs/benchmarks-history.md" {
			continue // a record
		}
		for _, m := range name.FindAllStringSubmatch(read(t, f), -1) {
			if !external[m[1]] && !strings.Contains(src, m[1]) {
				missing = append(missing, f+": "+m[1])
			}
		}
	}
	if len(missing) > 0 {
		t.Errorf("the documentation names what no source holds:\n%s", strings.Join(missing, "\n"))
	}
}

// TestDocs_GraphQLDocumentsEveryMutationAndSubscription: docs/graphql.md's
// tables name every mutation and subscription the schema declares, and
// every one they name is declared.
func TestDocs_GraphQLDocumentsEveryMutationAndSubscription(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(root, "graph", "schema", "*.graphqls"))
	require.NoError(t, err)
	block := regexp.MustCompile(`(?s)(?:extend )?type (Mutation|Subscription) \{(.*?)\n\}`)
	field := regexp.MustCompile(`(?m)^  ([a-z][A-Za-z0-9]*)[(:]`)
	declared := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range block.FindAllStringSubmatch(string(b), -1) {
			body := regexp.MustCompile(`(?s)""".*?"""`).ReplaceAllString(m[2], "")
			for _, fm := range field.FindAllStringSubmatch(body, -1) {
				declared[fm[1]] = true
			}
		}
	}
	require.True(t, declared["applyResource"] && declared["resourceChanged"], "the schema's fields are found: %v", declared)
	doc := read(t, "docs/graphql.md")
	row := regexp.MustCompile("(?m)^\\| `([a-z][A-Za-z0-9]*)(?:\\([^`]*\\))?`(?: / `([a-z][A-Za-z0-9]*)`)? \\|")
	documented := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(doc, -1) {
		documented[m[1]] = true
		if m[2] != "" {
			documented[m[2]] = true
		}
	}
	var undocumented, unknown []string
	for n := range declared {
		if !documented[n] {
			undocumented = append(undocumented, n)
		}
	}
	for n := range documented {
		if !declared[n] {
			unknown = append(unknown, n)
		}
	}
	sort.Strings(undocumented)
	sort.Strings(unknown)
	require.Empty(t, undocumented, "declared in graph/schema, and not in docs/graphql.md's tables")
	require.Empty(t, unknown, "in docs/graphql.md's tables, and not declared in graph/schema")
}

// TestDocs_ConctlCommandsExist: every conctl command line the docs print
// (`conctl …` or `go run ./cmd/conctl …`) names a command of the reference
// docs/cli.md (generated from the command tree) and only flags that
// command, or every command, takes.
func TestDocs_ConctlCommandsExist(t *testing.T) {
	t.Parallel()
	ref := read(t, "docs/cli.md")
	sections := map[string]string{}
	for _, part := range strings.Split(ref, "\n## ")[1:] {
		title, body, _ := strings.Cut(part, "\n")
		sections[title] = body
	}
	global, ok := sections["Global flags"]
	require.True(t, ok, "docs/cli.md has its global flags")
	longFlag := regexp.MustCompile(`--([a-z][a-z0-9-]*)`)
	takes := func(section, flag string) bool {
		for _, s := range []string{section, global} {
			for _, m := range longFlag.FindAllStringSubmatch(s, -1) {
				if m[1] == flag {
					return true
				}
			}
		}
		return false
	}
	line := regexp.MustCompile(`(?:^|[\s(|;&])(?:go run \./cmd/)?conctl((?: [^\s;&|#<>` + "`" + `]+)+)`)
	var problems []string
	checked := 0
	for _, f := range markdownFiles(t) {
		if f == "docs/cli.md" {
			continue
		}
		for _, l := range commands(t, f) {
			for _, m := range line.FindAllStringSubmatch(l, -1) {
				words := strings.Fields(m[1])
				cmd := "conctl"
				for _, w := range words {
					if _, ok := sections[cmd+" "+w]; !ok {
						break
					}
					cmd += " " + w
				}
				if cmd == "conctl" {
					if len(words) > 0 && !strings.HasPrefix(words[0], "-") && strings.ToLower(words[0]) == words[0] {
						problems = append(problems, f+": no command conctl "+words[0]+" ("+strings.TrimSpace(l)+")")
					}
					continue
				}
				checked++
				for _, w := range words {
					if fm := longFlag.FindStringSubmatch(w); fm != nil && strings.HasPrefix(w, "--") && !takes(sections[cmd], fm[1]) {
						problems = append(problems, f+": "+cmd+" takes no --"+fm[1]+" ("+strings.TrimSpace(l)+")")
					}
				}
			}
		}
	}
	require.Greater(t, checked, 20, "the docs' conctl lines are found")
	if len(problems) > 0 {
		t.Errorf("the documentation prints conctl lines that do not run:\n%s", strings.Join(problems, "\n"))
	}
}

// TestDocs_NpmScriptsExist: every `cd DIR && … npm run SCRIPT` (or `npm
// test`) the docs and the justfile print names a script of DIR's
// package.json.
func TestDocs_NpmScriptsExist(t *testing.T) {
	t.Parallel()
	lines := strings.Split(read(t, "justfile"), "\n")
	for _, f := range markdownFiles(t) {
		lines = append(lines, commands(t, f)...)
	}
	cd := regexp.MustCompile(`cd ([A-Za-z0-9_./-]+) &&([^)]*)`)
	run := regexp.MustCompile(`npm (?:run ([a-z][a-z0-9:-]*)|(test))\b`)
	var missing []string
	checked := 0
	for _, l := range lines {
		for _, m := range cd.FindAllStringSubmatch(l, -1) {
			for _, r := range run.FindAllStringSubmatch(m[2], -1) {
				script := r[1] + r[2]
				var pkg struct {
					Scripts map[string]string `json:"scripts"`
				}
				require.NoError(t, json.Unmarshal([]byte(read(t, m[1]+"/package.json")), &pkg), "%s/package.json", m[1])
				checked++
				if _, ok := pkg.Scripts[script]; !ok {
					missing = append(missing, m[1]+": npm "+script+" ("+strings.TrimSpace(l)+")")
				}
			}
		}
	}
	require.Greater(t, checked, 5, "the npm commands are found")
	if len(missing) > 0 {
		t.Errorf("npm scripts printed that package.json does not have:\n%s", strings.Join(missing, "\n"))
	}
}

// TestDocs_OperationsNamesEveryChaosFault: operations.md's list of fault
// keys for the chaos suite's -faults is the suite's own.
func TestDocs_OperationsNamesEveryChaosFault(t *testing.T) {
	t.Parallel()
	keys := map[string]bool{}
	for _, m := range regexp.MustCompile(`key: "([a-z-]+)"`).FindAllStringSubmatch(read(t, "examples/chaos/main.go"), -1) {
		if m[1] != "warm-up" { // the suite's own first wave, not a fault to name
			keys[m[1]] = true
		}
	}
	require.True(t, keys["worker-kill"] && keys["none"], "the suite's fault keys are found: %v", keys)
	_, list, ok := strings.Cut(read(t, "docs/operations.md"), "Fault keys for `-faults`:")
	require.True(t, ok, "operations.md lists the fault keys")
	list, _, _ = strings.Cut(list, "wave again.")
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z-]+)`").FindAllStringSubmatch(list, -1) {
		documented[m[1]] = true
	}
	require.Equal(t, keys, documented, "operations.md's fault keys against examples/chaos's")
}
