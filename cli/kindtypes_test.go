package cli_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestKindTypes generates Go and TypeScript from a stored kind's schemas
// through a real converge: deterministic (golden) output, the Go compiling
// and round-tripping a document, and bad input refused.
func TestKindTypes(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{noWorker: true})
	must(t, s.conctl("apply", "-f", filepath.Join("testdata", "kindtypes", "rich.kind.json")))
	must(t, s.conctl("apply", "-f", filepath.Join(classicFixtures, "vpc.kind.json")))

	goSrc := must(t, s.conctl("kind", "types", "web-app", "--lang", "go")).stdout
	golden(t, "kindtypes-web-app.go.txt", goSrc)
	again := must(t, s.conctl("kind", "types", "web-app", "--lang", "go")).stdout
	require.Equal(t, goSrc, again, "the output is deterministic")
	ts := must(t, s.conctl("kind", "types", "web-app", "--lang", "ts")).stdout
	golden(t, "kindtypes-web-app.ts.txt", ts)
	golden(t, "kindtypes-vpc.go.txt", must(t, s.conctl("kind", "types", "vpc", "--lang", "go", "--package", "network")).stdout)
	golden(t, "kindtypes-vpc.ts.txt", must(t, s.conctl("kind", "types", "vpc", "--lang", "ts")).stdout)

	t.Run("the generated Go compiles and round-trips a spec", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		out := filepath.Join(dir, "webapp", "types.go")
		require.NoError(t, os.MkdirAll(filepath.Dir(out), 0o755))
		must(t, s.conctl("kind", "types", "web-app", "--lang", "go", "--out", out))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module gentest\n\ngo 1.22\n"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(roundTrip), 0o644))
		cmd := exec.Command("go", "run", ".")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		got, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", got)
		var in, back map[string]any
		require.NoError(t, json.Unmarshal([]byte(sampleSpec), &in))
		require.NoError(t, json.Unmarshal(got, &back), "%s", got)
		require.Equal(t, in, back, "a spec decodes into the generated struct and encodes back unchanged")
	})

	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no lang":       {[]string{"kind", "types", "vpc"}, "--lang is required: go or ts"},
		"bad lang":      {[]string{"kind", "types", "vpc", "--lang", "rust"}, `--lang "rust": want go or ts`},
		"bad package":   {[]string{"kind", "types", "vpc", "--lang", "go", "--package", "My-Pkg"}, `--package "My-Pkg": want a Go package name`},
		"package w/ ts": {[]string{"kind", "types", "vpc", "--lang", "ts", "--package", "x"}, "with --lang go"},
		"unknown kind":  {[]string{"kind", "types", "nosuch", "--lang", "go"}, "nosuch"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := s.conctl(tc.args...)
			require.NotEqual(t, 0, r.code)
			require.Contains(t, r.stderr, tc.want)
			require.Empty(t, r.stdout)
		})
	}
}

const sampleSpec = `{"image":"nginx:1.27","replicas":3,"tier":"pro","cpu_limit":0.5,"public":true,
 "tags":{"team":"red"},"annotations":{"a":{"b":[1,2]}},"ports":[{"number":443,"protocol":"tcp"},{"number":53}],
 "dns":{"zone":"example.com","ttl":300},"vpcId":"v1","vpc_id":"v2","3rd-party":["x",null],"extra":7,
 "nested_list":[{"name":"n"}]}`

var roundTrip = strings.ReplaceAll(`package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"gentest/webapp"
)

func main() {
	dec := json.NewDecoder(bytes.NewReader([]byte(SAMPLE)))
	dec.DisallowUnknownFields()
	var spec webapp.WebAppSpec
	if err := dec.Decode(&spec); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if spec.Tier != webapp.WebAppSpecTierPro || *spec.Ports[0].Protocol != webapp.PortProtocolTCP || spec.Ports[1].Protocol != nil ||
		spec.X3rdParty[1] != nil || *spec.DNS.TTL != 300 {
		fmt.Fprintln(os.Stderr, "unexpected values")
		os.Exit(1)
	}
	var status webapp.WebAppStatus
	_ = status
	out, err := json.Marshal(spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(string(out))
}
`, "SAMPLE", "`"+sampleSpec+"`")
