package stdstarlark_test

import (
	"cmp"
	"context"
	"encoding/json"
	"runtime"
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
		{"time limit", map[string]string{"main.star": "def compose(resource):\n    l = list(range(100000))\n    for i in range(1000000000):\n        sorted(l, reverse = True)\n    return {}\n"}, // a slow step: no machine meets the cap first
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

// TestStarlark_NoStepBuildsPastTheLimits: one step (a built-in, an
// operator, a method) cannot build a value larger than MaxLen elements or
// bytes, an int wider than MaxIntBits, or render one deeper than MaxDepth;
// each refusal names the limit (before any time limit is reached) and
// allocates little.
func TestStarlark_NoStepBuildsPastTheLimits(t *testing.T) {
	t.Parallel()
	compose := func(body string) map[string]string {
		return map[string]string{"main.star": "def compose(resource):\n" + body + "    return {'children': []}\n"}
	}
	cases := []struct{ name, body, errHas string }{
		{"list of a huge range", "    b = list(range(1 << 25))\n", "(MaxLen)"},
		{"sorted of a huge range", "    b = sorted(range(1 << 25))\n", "(MaxLen)"},
		{"list repetition", "    b = [0] * (1 << 25)\n", "(MaxLen)"},
		{"string repetition", "    b = 'x' * (1 << 25)\n", "(MaxLen)"},
		{"repetition with the count first", "    b = (1 << 25) * 'x'\n", "(MaxLen)"},
		{"doubling by +", "    x = [0]\n    for i in range(40):\n        x = x + x\n", "(MaxLen)"},
		{"doubling by +=", "    x = ['a']\n    for i in range(40):\n        x += x\n", "(MaxLen)"},
		{"doubling by *=", "    x = 'ab'\n    for i in range(40):\n        x *= 2\n", "(MaxLen)"},
		{"extend by a huge range", "    x = []\n    x.extend(range(1 << 25))\n", "(MaxLen)"},
		{"+= a huge range", "    x = []\n    x += range(1 << 25)\n", "(MaxLen)"},
		{"replace squaring", "    s = 'aa'\n    for i in range(40):\n        s = s.replace('a', s)\n", "(MaxLen)"},
		{"join", "    s = 'x' * 700000\n    t = ''.join([s, s])\n", "(MaxLen)"},
		{"format", "    s = 'x' * 700000\n    t = '{0}{0}'.format(s)\n", "(MaxLen)"},
		{"interpolation", "    s = 'x' * 700000\n    t = '%s%s' % (s, s)\n", "(MaxLen)"},
		{"str of a shared list", "    big = [12345] * 500000\n    t = str([big] * 100)\n", "(MaxLen)"},
		{"print with a long separator", "    print(sep='x' * 1000000, *([1] * 200))\n", "(MaxLen)"},
		{"fail with a long separator", "    fail(sep='x' * 1000000, *([1] * 200))\n", "(MaxLen)"},
		{"json.indent with a long indent", "    t = json.indent(json.encode([1] * 1000), indent='x' * 100000)\n", "(MaxLen)"},
		{"json.encode_indent with a long prefix", "    t = json.encode_indent([1] * 1000, prefix='x' * 100000)\n", "(MaxLen)"},
		{"fail of a shared list", "    s = 'x' * 1000000\n    fail([s] * 60)\n", "(MaxLen)"},
		{"int of a long string", "    x = int('9' * 1000000)\n", "(MaxIntBits)"},
		{"int of a wide literal", "    x = int('9' * 30000)\n", "(MaxIntBits)"},
		{"int squaring", "    x = 3\n    for i in range(40):\n        x = x * x\n", "(MaxIntBits)"},
		{"int shifting", "    x = 1\n    for i in range(200):\n        x = x << 500\n", "(MaxIntBits)"},
		{"int shifting by <<=", "    x = 1\n    for i in range(200):\n        x <<= 500\n", "(MaxIntBits)"},
		{"json.encode of a deep value", "    x = []\n    for i in range(300000):\n        x = [x]\n    t = json.encode(x)\n", "(MaxDepth)"},
		{"json.decode of a deep text", "    x = json.decode('[' * 1000000)\n", "(MaxDepth)"},
		{"a deep result", "    x = []\n    for i in range(300000):\n        x = [x]\n    return {'children': [], 'status': {'x': x}}\n", "(MaxDepth)"},
	}
	// Growing one element a step (a comprehension, append, a key set by
	// index) built values of millions of elements within the step budget.
	// The comprehensions run a million steps to the limit; the others start
	// from a value of MaxLen elements, built in one step.
	const full = "    d = dict(zip(range(1 << 20), range(1 << 20)))\n" // MaxLen keys
	grow := []struct{ name, body, errHas string }{
		{"a list comprehension", "    x = [0 for i in range(2000000)]\n", "the comprehension would hold more than 1048576 elements"},
		{"a dict comprehension", "    x = {i: 0 for i in range(2000000)}\n", "the comprehension would hold more than 1048576 elements"},
		{"a nested comprehension", "    x = [(a, b) for a in range(2000) for b in range(2000)]\n", "the comprehension would hold"},
		{"append", "    x = list(range(1 << 20))\n    x.append(0)\n", "the list would hold 1048577"},
		{"insert", "    x = list(range(1 << 20))\n    x.insert(0, 0)\n", "the list would hold 1048577"},
		{"a key set by index", full + "    d[-1] = 0\n", "the dict would hold 1048577"},
		{"a key set in a tuple target", full + "    d[-1], y = 0, 0\n", "the dict would hold 1048577"},
		{"setdefault", full + "    d.setdefault(-1, 0)\n", "the dict would hold 1048577"},
		{"dict update", full + "    d.update({-1: 0})\n", "dict.update() would hold 1048577"},
		{"dict |", full + "    e = d | {-1: 0}\n", "dict | dict would hold 1048577"},
		{"dict |=", full + "    d |= {-1: 0}\n", "dict | dict would hold 1048577"},
		{"set add", "    s = set(range(1 << 20))\n    s.add(-1)\n", "the set would hold 1048577"},
		{"set union", "    s = set(range(1 << 20))\n    t = s.union([-1])\n", "set.union() would hold 1048577"},
	}
	steps := map[string]uint64{}
	for _, tc := range grow {
		cases = append(cases, tc)
		steps[tc.name] = stdstarlark.MaxSteps // the most a config may give: enough for millions of elements
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// A time limit far past what the refusal needs: under the race
			// detector, beside its siblings, a step can take a while (a
			// million of them, for a comprehension), and the refusal
			// asserted is the size limit's, never the clock's.
			_, err := runStarlark(compose(tc.body), cmp.Or(steps[tc.name], 10_000_000), 5*time.Minute)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.errHas)
			require.NotContains(t, err.Error(), "time limit")
			if tc.name != "a deep result" {
				require.Contains(t, err.Error(), "main.star:", "the error names the line")
			}
		})
	}
}

// TestStarlark_ALargeResultIsRefusedBeforeItIsEncoded: a result whose JSON
// would pass MaxResultBytes — a list repeating one long string, small in
// memory — is refused naming the limit, before it is encoded. It was
// encoded whole (100 MB here, unbounded with the count: the worker ran out
// of memory), after the time limit was last checked.
func TestStarlark_ALargeResultIsRefusedBeforeItIsEncoded(t *testing.T) {
	t.Parallel()
	started := time.Now()
	_, err := runStarlark(map[string]string{"main.star": `
def compose(resource):
    s = "x" * (1 << 20)
    return {"children": [{"kind": "k", "name": "a", "spec": {"x": [s] * 100}}]}
`}, 1_000_000, time.Minute)
	require.ErrorContains(t, err, "(MaxResultBytes)")
	require.Contains(t, err.Error(), `result["children"][0]["spec"]["x"]`, "the error names where")
	require.Less(t, time.Since(started), 30*time.Second)

	res, err := runStarlark(map[string]string{"main.star": `
def compose(resource):
    s = "x" * (1 << 20)
    return {"children": [{"kind": "k", "name": "a", "spec": {"x": [s] * 60}}]}
`}, 1_000_000, time.Minute)
	require.NoError(t, err, "60 MiB is within the limit")
	require.Len(t, res.Children[0].Spec["x"], 60)
}

// TestStarlark_GuardsKeepStarlarkSemantics: the guarded operators, methods,
// comprehensions and index assignments behave as Starlark's own within the
// limits: += extends a list in place and |= a dict, *= and %= rebind, a
// value (a comprehension's too) of MaxLen elements is allowed.
func TestStarlark_GuardsKeepStarlarkSemantics(t *testing.T) {
	t.Parallel()
	res, err := runStarlark(map[string]string{"main.star": `
def compose(resource):
    a = [1]
    b = a
    b += [2]
    n = 3
    n *= 2
    s = "%s"
    s %= "x"
    d = {"k": [1]}
    d["k"] *= 2
    sh = 3 << 2
    sh <<= 1
    big = [0] * ` + "1048576" + `
    comp = [i for i in range(` + "1048576" + `)]
    nested = [[j for j in range(i)] for i in range(4) if [k for k in range(i)]]
    dc = {str(i): i for i in range(3)}
    dc["x"] = 1
    dc["x"] += 1
    dc["y"], dd = 2, 0
    alias = dc
    alias |= {"z": 3}
    u = dc | {"w": 4}
    l = [1]
    l.append(2)
    l.insert(0, 0)
    st = set([1])
    st.add(2)
    dc.setdefault("v", 5)
    dc.update({"t": 6}, q = 7)
    for dc["f"] in [8]:
        pass
    return {"children": [], "status": {"a": a, "n": n, "s": s, "k": d["k"], "sh": sh, "big": len(big),
        "comp": len(comp), "nested": nested, "dc": dc, "u": len(u), "l": l, "st": sorted(st.union([3])),
        "join": "-".join(["p", "q"]), "rep": "abab".replace("a", "xy"), "fmt": "{}={}".format("u", 1),
        "big_int": 123456789012345678901234567890,
        "ind": json.encode_indent({"a": [1]}, indent="  "), "ind2": json.indent('{"a":[1]}', prefix="> "),
        "decoded": json.decode('{"a": [[1], "[[[{{"], "b": "\\\\"}')}}
`}, 30_000_000, time.Minute) // million-element values: time for the race detector
	require.NoError(t, err)
	got, err := json.Marshal(res.Status)
	require.NoError(t, err)
	require.JSONEq(t, `{"a":[1,2],"n":6,"s":"x","k":[1,1],"sh":24,"big":1048576,"join":"p-q","rep":"xybxyb","fmt":"u=1",
		"comp":1048576,"nested":[[0],[0,1],[0,1,2]],"dc":{"0":0,"1":1,"2":2,"x":2,"y":2,"z":3,"v":5,"t":6,"q":7,"f":8},"u":7,
		"l":[0,1,2],"st":[1,2,3],
		"big_int":123456789012345678901234567890,"decoded":{"a":[[1],"[[[{{"],"b":"\\"},
		"ind":"{\n  \"a\": [\n    1\n  ]\n}","ind2":"{\n> \t\"a\": [\n> \t\t1\n> \t]\n> }"}`, string(got))
	require.Contains(t, string(got), "123456789012345678901234567890", "an int keeps every digit")
}

// TestStarlark_HugeRangeAllocatesLittle: the refusal comes before the
// list is built.
func TestStarlark_HugeRangeAllocatesLittle(t *testing.T) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := runStarlark(map[string]string{"main.star": "def compose(resource):\n    b = list(range(1 << 25))\n    return {}\n"},
		100, time.Minute) // the refusal is the size limit's, whatever the machine's load
	runtime.ReadMemStats(&after)
	require.ErrorContains(t, err, "(MaxLen)")
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(64<<20), "bytes allocated")
}
