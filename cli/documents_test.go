package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

func TestParseDocuments_TypesAndSplits(t *testing.T) {
	t.Parallel()
	type want struct {
		types []DocType
		err   string
	}
	cases := map[string]struct {
		reason string
		source string
		ext    string
		input  string
		forced DocType
		want   want
	}{
		"Manifest": {reason: "schemas and reactions mark a manifest",
			source: "x.json", ext: ".json", input: `{"kind":"vpc","reactions":[]}`,
			want: want{types: []DocType{DocManifest}}},
		"ProviderConfig": {reason: "is_default marks a providerconfig",
			source: "x.json", ext: ".json", input: `{"kind":"vpc","name":"d","is_default":true,"spec":{}}`,
			want: want{types: []DocType{DocProviderConfig}}},
		"Binding": {reason: "watch_kind marks a reactor binding",
			source: "x.json", ext: ".json", input: `{"name":"b","watch_kind":"bom","transition":"synced","reactor":"s"}`,
			want: want{types: []DocType{DocReactorBinding}}},
		"Resource": {reason: "labels mark a resource",
			source: "x.json", ext: ".json", input: `{"kind":"vpc","name":"v","labels":{},"spec":{}}`,
			want: want{types: []DocType{DocResource}}},
		"KindNameSpecIsAResource": {reason: "kind, name and spec alone: a providerconfig would say is_default, so a resource",
			source: "x.json", ext: ".json", input: `{"kind":"vpc","name":"v","spec":{}}`,
			want: want{types: []DocType{DocResource}}},
		"IsDefaultIsAProviderConfig": {reason: "is_default marks a providerconfig",
			source: "x.json", ext: ".json", input: `{"kind":"vpc","name":"v","is_default":false,"spec":{}}`,
			want: want{types: []DocType{DocProviderConfig}}},
		"ListingIsItsItems": {reason: "a get -o json listing applies as its items (server-set fields ignored)",
			source: "x.json", ext: ".json",
			input: `{"items":[{"id":"1","kind":"vpc","name":"v","version":"v1","phase":"READY","generation":2,"labels":{},"spec":{},"createdAt":"2026-01-01T00:00:00Z"},` +
				`{"kind":"vpc","name":"d","isDefault":true,"spec":{},"data":null,"owner":null,"createdAt":"2026-01-01T00:00:00Z"},` +
				`{"name":"b","watchKind":"vpc","transition":"FAILED","reactor":"sink","labelMatch":{},"enabled":true,"createdAt":"2026-01-01T00:00:00Z"},` +
				`{"name":"vpc","version":"v1","isReactor":false,"manifest":{"kind":"vpc","reactions":[]},"createdAt":"2026-01-01T00:00:00Z"}],"nextCursor":null}`,
			want: want{types: []DocType{DocResource, DocProviderConfig, DocReactorBinding, DocManifest}}},
		"PrintedResourceWithoutSpec": {reason: "a printed resource without its spec cannot be applied",
			source: "x.json", ext: ".json", input: `{"id":"1","kind":"vpc","name":"v","phase":"READY","createdAt":"2026-01-01T00:00:00Z"}`,
			want: want{err: "has no spec here"}},
		"PrintedOperation": {reason: "an operation is not applicable",
			source: "x.json", ext: ".json", input: `{"id":"1","verb":"snapshot","state":"SUCCEEDED","createdAt":"2026-01-01T00:00:00Z"}`,
			want: want{err: "an operation cannot be applied"}},
		"FileNameHintResource": {reason: "the fixture naming convention settles the ambiguity",
			source: "dir/resource-v.json", ext: ".json", input: `{"kind":"vpc","name":"v","spec":{}}`,
			want: want{types: []DocType{DocResource}}},
		"FileNameHintProviderConfig": {reason: "providerconfig-* names a providerconfig",
			source: "providerconfig-v.yaml", ext: ".yaml", input: "kind: vpc\nname: v\nspec: {}\n",
			want: want{types: []DocType{DocProviderConfig}}},
		"Forced": {reason: "--type wins over the keys",
			source: "stdin", input: `{"kind":"vpc","name":"v","spec":{}}`, forced: DocProviderConfig,
			want: want{types: []DocType{DocProviderConfig}}},
		"UnknownKeys": {reason: "keys of no type are refused",
			source: "x.json", ext: ".json", input: `{"apiVersion":"v1","kind":"Pod"}`,
			want: want{err: "cannot tell what this document is"}},
		"MixedMarkers": {reason: "markers of two types are refused",
			source: "x.json", ext: ".json", input: `{"kind":"vpc","name":"v","is_default":true,"labels":{},"spec":{}}`,
			want: want{err: "cannot tell"}},
		"NotAnObject": {reason: "a document must be an object",
			source: "x.json", ext: ".json", input: `[1, 2]`,
			want: want{err: "must be a JSON object"}},
		"JSONStream": {reason: "concatenated JSON values are several documents",
			source: "x.json", ext: ".json", input: `{"kind":"a","reactions":[]}` + "\n" + `{"kind":"a","name":"n","labels":{},"spec":{}}`,
			want: want{types: []DocType{DocManifest, DocResource}}},
		"JSONArray": {reason: "a top-level array is a list of documents",
			source: "x.json", ext: ".json", input: `[{"kind":"a","reactions":[]},{"kind":"a","name":"n","labels":{},"spec":{}}]`,
			want: want{types: []DocType{DocManifest, DocResource}}},
		"YAMLStream": {reason: "--- separates YAML documents; empty ones are skipped",
			source: "x.yaml", ext: ".yaml", input: "---\nkind: a\nreactions: []\n---\n# nothing\n---\nkind: a\nname: n\nlabels: {}\nspec: {}\n---\n",
			want: want{types: []DocType{DocManifest, DocResource}}},
		"SniffJSON": {reason: "stdin starting with { is JSON",
			source: "stdin", input: "  {\"kind\":\"a\",\"reactions\":[]}",
			want: want{types: []DocType{DocManifest}}},
		"SniffYAML": {reason: "other stdin is YAML",
			source: "stdin", input: "kind: a\nreactions: []\n",
			want: want{types: []DocType{DocManifest}}},
		"BadJSON": {reason: "a syntax error names its line and column",
			source: "x.json", ext: ".json", input: "{\"kind\": \"a\",\n \"reactions\": ]}",
			want: want{err: "invalid JSON at line 2, column 16"}},
		"TruncatedJSON": {reason: "a truncated file is an error too",
			source: "x.json", ext: ".json", input: `{"kind": "a"`,
			want: want{err: "invalid JSON at line 1"}},
		"BadYAML": {reason: "a YAML error names its line",
			source: "x.yaml", ext: ".yaml", input: "kind: a\nreactions: [\n",
			want: want{err: "invalid YAML"}},
		"NonStringKey": {reason: "JSON needs string keys",
			source: "x.yaml", ext: ".yaml", input: "kind: a\nspec:\n  1: x\n",
			want: want{err: "mapping key 1 is not a string"}},
		"Empty": {reason: "an empty input holds no documents",
			source: "x.yaml", ext: ".yaml", input: "\n",
			want: want{err: "no documents"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			docs, err := parseDocuments(tc.source, tc.ext, []byte(tc.input), tc.forced)
			if tc.want.err != "" {
				require.Error(t, err, tc.reason)
				require.Contains(t, err.Error(), tc.want.err, tc.reason)
				return
			}
			require.NoError(t, err, tc.reason)
			var got []DocType
			for _, d := range docs {
				got = append(got, d.Type)
			}
			if diff := cmp.Diff(tc.want.types, got); diff != "" {
				t.Errorf("%s: -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestReadDocuments_ApplyOrderAndDirectories(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(p, content string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, p), []byte(content), 0o644))
	}
	write("a-resource.yaml", "kind: k\nname: r\nlabels: {}\nspec: {}\n")
	write("b-binding.json", `{"name":"b","watch_kind":"k","transition":"synced","reactor":"s"}`)
	write("c.kind.json", `{"kind":"k","reactions":[]}`)
	write("notes.txt", "ignored")
	write("sub/d.yml", "kind: k\nname: d\nis_default: true\nspec: {}\n")
	cases := []struct {
		reason    string
		recursive bool
		want      []string
	}{
		{"a directory's documents apply manifests, configs, bindings, resources; other files are skipped", false,
			[]string{"c.kind.json:manifest", "b-binding.json:reactorbinding", "a-resource.yaml:resource"}},
		{"-R descends into subdirectories", true,
			[]string{"c.kind.json:manifest", "d.yml:providerconfig", "b-binding.json:reactorbinding", "a-resource.yaml:resource"}},
	}
	for _, tc := range cases {
		docs, err := ReadDocuments([]string{dir}, strings.NewReader(""), "", tc.recursive)
		require.NoError(t, err, tc.reason)
		var got []string
		for _, d := range docs {
			got = append(got, filepath.Base(d.Source)+":"+string(d.Type))
		}
		require.Equal(t, tc.want, got, tc.reason)
	}
	_, err := ReadDocuments([]string{"-", "-"}, strings.NewReader(`{"kind":"k","reactions":[]}`), "", false)
	require.ErrorContains(t, err, "stdin")
}

func TestDecodeDocument_RequiredFields(t *testing.T) {
	t.Parallel()
	cases := []struct {
		reason string
		doc    Document
		err    string
	}{
		{"a binding's transition must be one of the five", Document{Source: "s", Type: DocReactorBinding,
			Raw: []byte(`{"name":"b","watch_kind":"k","transition":"sinked","reactor":"r"}`)}, `unknown transition "sinked"`},
		{"a resource needs a spec", Document{Source: "s", Type: DocResource, Raw: []byte(`{"kind":"k","name":"n"}`)},
			"needs kind, name, spec"},
		{"a providerconfig rejects unknown keys", Document{Source: "s", Type: DocProviderConfig,
			Raw: []byte(`{"kind":"k","name":"n","spec":{},"default":true}`)}, `unknown field "default"`},
		{"a manifest needs a kind", Document{Source: "s", Type: DocManifest, Raw: []byte(`{"reactions":[]}`)}, "needs kind"},
		{"a good binding passes", Document{Source: "s", Type: DocReactorBinding,
			Raw: []byte(`{"name":"b","watch_kind":"k","transition":"Synced","reactor":"r"}`)}, ""},
	}
	for _, tc := range cases {
		_, err := decodeDocument(tc.doc)
		if tc.err == "" {
			require.NoError(t, err, tc.reason)
			continue
		}
		require.ErrorContains(t, err, tc.err, tc.reason)
	}
}

func TestEndpoints(t *testing.T) {
	t.Parallel()
	cases := []struct {
		reason, server, http, ws, err string
	}{
		{reason: "a base URL gets /graphql", server: "http://localhost:8080", http: "http://localhost:8080/graphql",
			ws: "ws://localhost:8080/graphql"},
		{reason: "https maps to wss", server: "https://c.example.com/", http: "https://c.example.com/graphql",
			ws: "wss://c.example.com/graphql"},
		{reason: "a URL ending in /graphql is kept", server: "https://c.example.com/api/graphql",
			http: "https://c.example.com/api/graphql", ws: "wss://c.example.com/api/graphql"},
		{reason: "a scheme is required", server: "localhost:8080", err: "scheme"},
		{reason: "only http and https", server: "ftp://x", err: "not http or https"},
		{reason: "credentials in the URL are refused (conctl sends a bearer token), the password not repeated",
			server: "http://admin:s3cret@c.example.com", err: `"http://admin:xxxxx@c.example.com": credentials in the URL are not supported`},
		{reason: "a URL that does not parse is not repeated with its password",
			server: "http://admin:s3cret@c.example.com:port", err: `"http://xxxxx@c.example.com:port"`},
		{reason: "nor one without a scheme", server: "admin:s3cret@c.example.com", err: `"xxxxx@c.example.com"`},
	}
	for _, tc := range cases {
		h, w, err := endpoints(tc.server)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.reason)
			require.NotContains(t, err.Error(), "s3cret", tc.reason)
			continue
		}
		require.NoError(t, err, tc.reason)
		require.Equal(t, tc.http, h, tc.reason)
		require.Equal(t, tc.ws, w, tc.reason)
	}
}

func TestHumanAge(t *testing.T) {
	t.Parallel()
	cases := []struct {
		reason string
		d      time.Duration
		want   string
	}{
		{"seconds under two minutes", 42 * time.Second, "42s"},
		{"minutes and seconds under ten minutes", 5*time.Minute + 12*time.Second, "5m12s"},
		{"minutes under three hours", 17 * time.Minute, "17m"},
		{"hours and minutes under eight hours", 3*time.Hour + 4*time.Minute, "3h4m"},
		{"hours under two days", 26 * time.Hour, "26h"},
		{"days and hours under eight days", 76 * time.Hour, "3d4h"},
		{"days under two years", 120 * 24 * time.Hour, "120d"},
		{"years", 3 * 365 * 24 * time.Hour, "3y"},
		{"a clock skew is zero", -time.Second, "0s"},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, humanAge(tc.d), tc.reason)
	}
}

func TestParseRefAndTypes(t *testing.T) {
	t.Parallel()
	r, err := parseRef("vpc/a", "")
	require.NoError(t, err)
	require.Equal(t, ref{"vpc", "a"}, r)
	r, err = parseRef("a", "vpc")
	require.NoError(t, err)
	require.Equal(t, ref{"vpc", "a"}, r)
	_, err = parseRef("vpc/a", "bom")
	require.ErrorContains(t, err, "--kind is bom")
	_, err = parseRef("a/b/c", "")
	require.ErrorContains(t, err, "KIND/NAME")
	for alias, want := range map[string]objType{"res": typeResource, "CRDs": typeKind, "pc": typeProviderConfig,
		"rb": typeReactorBinding, "nodes": typeClusterMember, "ops": typeOperation} {
		got, err := parseObjType(alias)
		require.NoError(t, err, alias)
		require.Equal(t, want, got, alias)
	}
	_, err = parseObjType("pods")
	require.ErrorContains(t, err, `unknown type "pods"`)
}

// get -o yaml prints numbers as JSON wrote them, and apply reads them back
// from the YAML text: an integer past int64 and a decimal past a float64's
// digits survive the round trip exactly.
func TestYAMLNumbers_RoundTripExactly(t *testing.T) {
	t.Parallel()
	spec := `{"big":12345678901234567890,"ratio":0.12345678901234567890123,"exp":1.5e300,"neg":-7,"small":3,` +
		`"str":"12345678901234567890","list":[1.50,2]}`
	y, err := toYAML(json.RawMessage(spec))
	require.NoError(t, err)
	for _, want := range []string{"big: 12345678901234567890\n", "ratio: 0.12345678901234567890123\n", "exp: 1.5e300\n",
		"neg: -7\n", `str: "12345678901234567890"`, "- 1.50\n"} {
		require.Contains(t, string(y), want)
	}
	raws, err := splitYAML(y)
	require.NoError(t, err)
	require.Len(t, raws, 1)
	require.JSONEq(t, spec, string(raws[0]))
	require.Contains(t, string(raws[0]), `"ratio":0.12345678901234567890123`, "the digits, not a float64's")
	require.Contains(t, string(raws[0]), `"big":12345678901234567890`)

	// YAML written by hand: other number spellings, anchors and merge keys.
	raws, err = splitYAML([]byte("base: &b {x: 1, y: 0x10}\nobj:\n  <<: *b\n  x: 2\n  z: 1_000\n  t: 2001-12-14\n"))
	require.NoError(t, err)
	require.JSONEq(t, `{"base":{"x":1,"y":16},"obj":{"x":2,"y":16,"z":1000,"t":"2001-12-14"}}`, string(raws[0]))
	_, err = splitYAML([]byte("1: one\n"))
	require.ErrorContains(t, err, "mapping key 1 is not a string")
}

// A UTF-8 byte order mark (as Windows editors write) before JSON, on stdin
// and in a file.
func TestReadDocuments_ByteOrderMarkBeforeJSON(t *testing.T) {
	t.Parallel()
	doc := "\ufeff" + `{"kind":"bom","name":"small","spec":{"teams":1}}`
	docs, err := ReadDocuments([]string{"-"}, strings.NewReader(doc), "", false)
	require.NoError(t, err)
	require.Len(t, docs, 1)
	require.Equal(t, DocResource, docs[0].Type)
	p := filepath.Join(t.TempDir(), "r.json")
	require.NoError(t, os.WriteFile(p, []byte(doc), 0o644))
	docs, err = ReadDocuments([]string{p}, nil, "", false)
	require.NoError(t, err)
	require.Len(t, docs, 1)
}

// -f on a symlink to a directory reads the directory's documents, named
// under the path given.
func TestReadDocuments_SymlinkedDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	target := filepath.Join(dir, "real")
	require.NoError(t, os.Mkdir(target, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(target, "r.json"), []byte(`{"kind":"bom","name":"small","spec":{"teams":1}}`), 0o644))
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(target, link))
	docs, err := ReadDocuments([]string{link}, nil, "", false)
	require.NoError(t, err)
	require.Len(t, docs, 1)
	require.Equal(t, filepath.Join(link, "r.json"), docs[0].Source)
}
