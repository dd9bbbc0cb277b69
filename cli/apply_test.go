package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/converge-run/converge/core/store"
)

// fixtureDirs are every demo's testfixtures directory.
func fixtureDirs(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob("../examples/*/testfixtures")
	require.NoError(t, err)
	require.NotEmpty(t, dirs, "no example fixtures found")
	return dirs
}

// fixtureFiles lists a fixture directory's documents.
func fixtureFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	for _, pat := range []string{"*.json", "*.yaml", "*.yml"} {
		m, err := filepath.Glob(filepath.Join(dir, pat))
		require.NoError(t, err)
		files = append(files, m...)
	}
	sort.Strings(files)
	require.NotEmpty(t, files)
	return files
}

// documentsOf reads a fixture file's documents (JSON values or YAML
// documents).
func documentsOf(t *testing.T, file string) []any {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var out []any
	if ext := filepath.Ext(file); ext == ".yaml" || ext == ".yml" {
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var v any
			err := dec.Decode(&v)
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, file)
			if v != nil {
				out = append(out, v)
			}
		}
		return out
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, file)
		out = append(out, v)
	}
	return out
}

// asYAML writes the documents of files as one multi-document YAML stream.
func asYAML(t *testing.T, files []string) string {
	t.Helper()
	var docs []string
	for _, f := range files {
		for _, v := range documentsOf(t, f) {
			y, err := yaml.Marshal(v)
			require.NoError(t, err)
			docs = append(docs, string(y))
		}
	}
	return "# every fixture, as YAML\n" + strings.Join(docs, "---\n")
}

// concatJSON writes the documents of files as one stream of JSON values.
func concatJSON(t *testing.T, files []string) string {
	t.Helper()
	var b strings.Builder
	for _, f := range files {
		for _, v := range documentsOf(t, f) {
			j, err := json.MarshalIndent(v, "", "  ")
			require.NoError(t, err)
			b.Write(j)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

var outcomeLine = regexp.MustCompile(`^(manifest|providerconfig|reactorbinding|resource)/\S+ (created|configured|unchanged)$`)

// outcomes tallies apply's output lines by outcome.
func outcomes(t *testing.T, stdout string) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		m := outcomeLine.FindStringSubmatch(l)
		require.NotNilf(t, m, "unexpected apply output line %q", l)
		n[m[2]]++
	}
	return n
}

func TestApply_EveryExampleFixture(t *testing.T) {
	t.Parallel()
	for _, dir := range fixtureDirs(t) {
		t.Run(filepath.Base(filepath.Dir(dir)), func(t *testing.T) {
			t.Parallel()
			s := startStack(t, stackOpts{noWorker: true})
			files := fixtureFiles(t, dir)
			tmp := t.TempDir()
			yamlFile := filepath.Join(tmp, "all.yaml")
			require.NoError(t, os.WriteFile(yamlFile, []byte(asYAML(t, files)), 0o644))
			yamlDir := filepath.Join(tmp, "yamldir")
			require.NoError(t, os.Mkdir(yamlDir, 0o755))
			n := 0
			for _, f := range files {
				base := strings.TrimSuffix(filepath.Base(f), filepath.Ext(f))
				require.NoError(t, os.WriteFile(filepath.Join(yamlDir, base+".yaml"), []byte(asYAML(t, []string{f})), 0o644))
				n += len(documentsOf(t, f))
			}
			steps := []struct {
				reason string
				stdin  string
				args   []string
				want   map[string]int
			}{
				{"a fresh database creates every document of the directory",
					"", []string{"apply", "-f", dir}, map[string]int{"created": n}},
				{"re-applying the directory changes nothing",
					"", []string{"apply", "-f", dir}, map[string]int{"unchanged": n}},
				{"the same documents as one multi-document YAML file are unchanged",
					"", []string{"apply", "-f", yamlFile}, map[string]int{"unchanged": n}},
				{"a directory of YAML files (names keep the fixture convention) is unchanged",
					"", []string{"apply", "-f", yamlDir}, map[string]int{"unchanged": n}},
				{"a JSON stream on stdin is unchanged",
					concatJSON(t, files), []string{"apply", "-f", "-"}, map[string]int{"unchanged": n}},
				{"YAML on stdin is unchanged",
					asYAML(t, files), []string{"apply", "-f", "-"}, map[string]int{"unchanged": n}},
			}
			for _, f := range files {
				steps = append(steps, struct {
					reason string
					stdin  string
					args   []string
					want   map[string]int
				}{"the single file " + filepath.Base(f) + " is unchanged", "", []string{"apply", "-f", f},
					map[string]int{"unchanged": len(documentsOf(t, f))}})
			}
			for _, st := range steps {
				r := s.conctlIn(st.stdin, st.args...)
				require.Equalf(t, 0, r.code, "%s\nstdout:\n%s\nstderr:\n%s", st.reason, r.stdout, r.stderr)
				require.Equal(t, st.want, outcomes(t, r.stdout), st.reason)
			}
		})
	}
}

func TestApply_CreatedConfiguredUnchanged(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{noWorker: true})
	must(t, s.conctl("apply", "-f", filepath.Join(classicFixtures, "vpc.kind.json")))
	steps := []struct {
		reason string
		doc    string
		want   string
	}{
		{"a new resource is created",
			`{"kind":"vpc","name":"v1","labels":{"team":"a"},"spec":{"cidr":"10.0.0.0/24"}}`, "resource/vpc/v1 created"},
		{"the same document again is unchanged (key order and spacing do not matter)",
			`{"spec":{"cidr":"10.0.0.0/24"},"name":"v1","kind":"vpc","labels":{"team":"a"}}`, "resource/vpc/v1 unchanged"},
		{"a spec change configures it",
			`{"kind":"vpc","name":"v1","labels":{"team":"a"},"spec":{"cidr":"10.0.1.0/24"}}`, "resource/vpc/v1 configured"},
		{"a labels-only change configures it",
			`{"kind":"vpc","name":"v1","labels":{"team":"b"},"spec":{"cidr":"10.0.1.0/24"}}`, "resource/vpc/v1 configured"},
		{"YAML with the same content is unchanged",
			"kind: vpc\nname: v1\nlabels: {team: b}\nspec:\n  cidr: 10.0.1.0/24\n", "resource/vpc/v1 unchanged"},
		{"a manifest edit configures the kind",
			manifestWithDescription(t, "vpc.kind.json", "edited"), "manifest/vpc configured"},
		{"the edited manifest again is unchanged",
			manifestWithDescription(t, "vpc.kind.json", "edited"), "manifest/vpc unchanged"},
		{"a providerconfig is created",
			`{"kind":"vpc","name":"staging","is_default":false,"spec":{"latency_ms":1}}`, "providerconfig/vpc/staging created"},
		{"its spec changes",
			`{"kind":"vpc","name":"staging","is_default":false,"spec":{"latency_ms":2}}`, "providerconfig/vpc/staging configured"},
	}
	for _, st := range steps {
		r := s.conctlIn(st.doc, "apply", "-f", "-")
		require.Equalf(t, 0, r.code, "%s: %s", st.reason, r.stderr)
		require.Equal(t, st.want+"\n", r.stdout, st.reason)
	}

	// -o json|yaml: the outcomes as one list, the same for apply, its dry
	// run and diff.
	two := `{"kind":"vpc","name":"v1","labels":{"team":"b"},"spec":{"cidr":"10.0.1.0/24"}}` + "\n" +
		`{"kind":"vpc","name":"v2","labels":{},"spec":{"cidr":"10.0.2.0/24"}}`
	type result struct {
		Object, Outcome string
		DryRun          bool
		Changes         []string
	}
	var page struct{ Items []result }
	r := must(t, s.conctlIn(two, "diff", "-f", "-", "-o", "json"))
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &page), r.stdout)
	require.Equal(t, []result{{Object: "resource/vpc/v1", Outcome: "unchanged", DryRun: true},
		{Object: "resource/vpc/v2", Outcome: "created", DryRun: true, Changes: []string{`+ spec: {"cidr":"10.0.2.0/24"}`, "+ labels: {}"}}},
		page.Items)
	r = must(t, s.conctlIn(two, "apply", "-f", "-", "-o", "yaml"))
	page.Items = nil
	require.NoError(t, yaml.Unmarshal([]byte(r.stdout), &page), r.stdout)
	require.Equal(t, []result{{Object: "resource/vpc/v1", Outcome: "unchanged"}, {Object: "resource/vpc/v2", Outcome: "created"}},
		page.Items, "apply -o yaml is one YAML document listing the outcomes")
	r = must(t, s.conctl("delete", "vpc", "v2", "-o", "json"))
	page.Items = nil
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &page), r.stdout)
	require.Len(t, page.Items, 1, r.stdout)
	require.Equal(t, "resource/vpc/v2", page.Items[0].Object)
	require.True(t, strings.HasPrefix(page.Items[0].Outcome, "deletion requested"), page.Items[0].Outcome)
}

func manifestWithDescription(t *testing.T, file, desc string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(classicFixtures, file))
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	m["description"] = desc
	out, err := json.Marshal(m)
	require.NoError(t, err)
	return string(out)
}

func TestApply_RejectsBadInputAndWritesNothing(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{noWorker: true})
	must(t, s.conctl("apply", "-f", filepath.Join(classicFixtures, "vpc.kind.json")))
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		return p
	}
	good := `{"kind":"vpc","name":"ok","spec":{"cidr":"10.0.0.0/24"}}`
	cases := []struct {
		reason  string
		stdin   string
		args    []string
		stderr  []string // substrings of the error
		written []string // resources (vpc names) that must not exist
	}{
		{reason: "a malformed JSON file names the line and column, and its valid documents are not applied either",
			args:    []string{"apply", "-f", write("bad.json", good+"\n{\"kind\": \"vpc\",\n  \"name\": }\n")},
			stderr:  []string{"bad.json", "invalid JSON at line 3"},
			written: []string{"ok"}},
		{reason: "malformed YAML names the line",
			args:    []string{"apply", "-f", write("bad.yaml", "kind: vpc\nname: ok\nspec: {cidr: [\n")},
			stderr:  []string{"bad.yaml", "invalid YAML", "line"},
			written: []string{"ok"}},
		{reason: "an unknown --type is refused before anything is read",
			args:   []string{"apply", "--type", "deployment", "-f", write("ok.json", good)},
			stderr: []string{`unknown type "deployment"`, "manifest, providerconfig, reactorbinding, resource"}, written: []string{"ok"}},
		{reason: "a document of no known type is refused",
			stdin: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x"}}`, args: []string{"apply", "-f", "-"},
			stderr: []string{"cannot tell what this document is", "apiVersion", "--type"}},
		{reason: "a misspelt key under a forced type is refused",
			stdin: `{"kind":"vpc","name":"ok","spce":{}}`, args: []string{"apply", "--type", "resource", "-f", "-"},
			stderr: []string{"not a valid resource document", "spce"}, written: []string{"ok"}},
		{reason: "a schema-violating spec is the server's BAD_USER_INPUT naming the field",
			stdin: `{"kind":"vpc","name":"bad-cidr","labels":{},"spec":{"cidr":"not-a-cidr"}}`, args: []string{"apply", "-f", "-"},
			stderr: []string{"BAD_USER_INPUT", "cidr", "resource/vpc/bad-cidr"}, written: []string{"bad-cidr"}},
		{reason: "an unknown kind is BAD_USER_INPUT",
			stdin: `{"kind":"nosuch","name":"x","labels":{},"spec":{}}`, args: []string{"apply", "-f", "-"},
			stderr: []string{"BAD_USER_INPUT", "nosuch"}},
		{reason: "a missing file is an error",
			args: []string{"apply", "-f", filepath.Join(dir, "missing.json")}, stderr: []string{"missing.json", "no such file"}},
		{reason: "apply without -f is an error",
			args: []string{"apply"}, stderr: []string{"no input"}},
		{reason: "labels that are not an object of strings, in a later document, stop the apply before its first document is written",
			stdin:  good + "\n" + `{"kind":"vpc","name":"second","labels":"team=blue","spec":{"cidr":"10.0.0.0/24"}}`,
			args:   []string{"apply", "-f", "-"},
			stderr: []string{"stdin#2", "labels must be an object of strings (key: value), not a string"}, written: []string{"ok", "second"}},
		{reason: "a label value that is not a string is refused by conctl",
			stdin: good + "\n" + `{"kind":"vpc","name":"second","labels":{"n":1},"spec":{"cidr":"10.0.0.0/24"}}`,
			args:  []string{"apply", "-f", "-"}, stderr: []string{`labels: the value of "n" must be a string, not a number`},
			written: []string{"ok", "second"}},
		{reason: "a spec that is not an object is refused by conctl",
			stdin: good + "\n" + `{"kind":"vpc","name":"second","spec":[1]}`, args: []string{"apply", "-f", "-"},
			stderr: []string{"spec must be an object, not an array"}, written: []string{"ok", "second"}},
		{reason: "a later document only the server can refuse (its kind already applied) is dry-run first: nothing is written",
			stdin: good + "\n" + `{"kind":"vpc","name":"bad-cidr","labels":{},"spec":{"cidr":"not-a-cidr"}}`,
			args:  []string{"apply", "-f", "-"}, stderr: []string{"BAD_USER_INPUT", "resource/vpc/bad-cidr"},
			written: []string{"ok", "bad-cidr"}},
	}
	for _, tc := range cases {
		r := s.conctlIn(tc.stdin, tc.args...)
		require.NotEqualf(t, 0, r.code, "%s: want a failure; stdout %q", tc.reason, r.stdout)
		require.Truef(t, strings.HasPrefix(r.stderr, "Error: "), "%s: stderr %q", tc.reason, r.stderr)
		for _, want := range tc.stderr {
			require.Containsf(t, r.stderr, want, tc.reason)
		}
		for _, name := range tc.written {
			_, err := s.store.GetResource(context.Background(), "vpc", name)
			require.Truef(t, errors.Is(err, store.ErrNotFound), "%s: vpc/%s was written (err %v)", tc.reason, name, err)
		}
	}
}
