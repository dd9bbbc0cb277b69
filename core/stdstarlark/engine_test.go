package stdstarlark_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/stdstarlark"
)

func runStarlark(files map[string]string, steps uint64, timeout time.Duration) (stdstarlark.Result, error) {
	return stdstarlark.Run(context.Background(), files, map[string]any{"name": "r", "spec": map[string]any{"n": 3}},
		steps, timeout, func(string) {})
}

func TestStarlark_ComposeReturnsChildrenAndEdges(t *testing.T) {
	t.Parallel()
	res, err := runStarlark(map[string]string{
		"main.star": `load("lib.star", "kid")
def compose(resource):
    kids = [kid(resource["name"], i) for i in range(resource["spec"]["n"])]
    return {"children": kids, "edges": [{"dependent": kids[1]["name"], "dependency": kids[0]["name"], "flows": {"/a": "/b"}}],
            "status": {"echo": json.encode(resource["spec"])}}
`,
		"lib.star": `def kid(root, i):
    return {"kind": "fakevpc", "name": "%s-%d" % (root, i), "spec": {"cidr": "10.%d.0.0/16" % i}}
`}, 10_000, time.Second)
	require.NoError(t, err)
	require.Len(t, res.Children, 3)
	require.Equal(t, "r-2", res.Children[2].Name)
	require.Equal(t, "10.2.0.0/16", res.Children[2].Spec["cidr"])
	require.Equal(t, []stdstarlark.Edge{{Dependent: "r-1", Dependency: "r-0", Flows: map[string]string{"/a": "/b"}}}, res.Edges)
	require.Equal(t, `{"n":3}`, res.Status["echo"])
}

// TestStarlark_SandboxLimits: the step budget, the time limit, no I/O, no
// while or recursion, and every failure naming where it happened.
func TestStarlark_SandboxLimits(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		files   map[string]string
		steps   uint64
		timeout time.Duration
		errHas  []string
	}{
		{"step budget", map[string]string{"main.star": "def compose(resource):\n    for i in range(100000000):\n        pass\n    return {}\n"},
			10_000, 10 * time.Second, []string{"too many steps", "main.star:2"}},
		{"time limit", map[string]string{"main.star": "def compose(resource):\n    x = 0\n    for i in range(1000000000):\n        x += i\n    return {}\n"},
			stdstarlark.MaxSteps, 50 * time.Millisecond, []string{"time limit of 50ms", "main.star:"}},
		{"no file I/O", map[string]string{"main.star": "def compose(resource):\n    return open('/etc/passwd')\n"},
			10_000, time.Second, []string{"main.star:2:12", "undefined: open"}},
		{"load only from the bundle", map[string]string{"main.star": "load('/etc/passwd', 'x')\ndef compose(resource):\n    return {}\n"},
			10_000, time.Second, []string{`load("/etc/passwd")`, "no such file in the bundle"}},
		{"no while", map[string]string{"main.star": "def compose(resource):\n    while True:\n        pass\n"},
			10_000, time.Second, []string{"main.star:2:5", "while"}},
		{"no recursion", map[string]string{"main.star": "def f(n):\n    return f(n)\ndef compose(resource):\n    return f(1)\n"},
			10_000, time.Second, []string{"main.star:2", "called recursively"}},
		{"fail names its line", map[string]string{"main.star": "def compose(resource):\n    x = 1\n    fail('no teams for ' + resource['name'])\n"},
			10_000, time.Second, []string{"main.star:3:9", "no teams for r"}},
		{"syntax error names its line", map[string]string{"main.star": "def compose(resource):\n    return {\n"},
			10_000, time.Second, []string{"main.star:3"}},
		{"no compose", map[string]string{"main.star": "x = 1\n"}, 10_000, time.Second, []string{"defines no function compose"}},
		{"result not a dict", map[string]string{"main.star": "def compose(resource):\n    return [1]\n"},
			10_000, time.Second, []string{"returned list, want a dict"}},
		{"unknown result key", map[string]string{"main.star": "def compose(resource):\n    return {'kids': []}\n"},
			10_000, time.Second, []string{`unknown field "kids"`}},
		{"load cycle", map[string]string{"main.star": "load('a.star', 'x')\ndef compose(resource):\n    return {}\n",
			"a.star": "load('main.star', 'compose')\nx = 1\n"}, 10_000, time.Second, []string{"cycle"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			started := time.Now()
			_, err := runStarlark(tc.files, tc.steps, tc.timeout)
			require.Error(t, err)
			for _, want := range tc.errHas {
				require.Contains(t, err.Error(), want)
			}
			require.Less(t, time.Since(started), 20*time.Second, "the sandbox stops the program")
		})
	}
}
