package cli_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// tscPaths are where the TypeScript compiler is installed in this
// repository (npm ci in workerproto/ts, which .ci/run runs before the Go
// tests, or in frontend), relative to this package.
var tscPaths = []string{
	filepath.Join("..", "workerproto", "ts", "node_modules", ".bin", "tsc"),
	filepath.Join("..", "frontend", "node_modules", ".bin", "tsc"),
}

// findTSC returns the TypeScript compiler. Without one it skips, saying how
// to install it — unless CONVERGE_REQUIRE_NODE is set (.ci/run sets it),
// where a missing compiler fails the test instead of hiding it.
func findTSC(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err == nil {
		for _, p := range tscPaths {
			if _, err := os.Stat(p); err == nil {
				abs, err := filepath.Abs(p)
				require.NoError(t, err)
				return abs
			}
		}
	}
	msg := "no TypeScript compiler: install Node 20+ and run `npm ci` in workerproto/ts (looked for " +
		tscPaths[0] + " and " + tscPaths[1] + ")"
	if os.Getenv("CONVERGE_REQUIRE_NODE") != "" {
		t.Fatal(msg + "; CONVERGE_REQUIRE_NODE is set")
	}
	t.Skip(msg)
	return ""
}

// tsUsage uses every generated web-app type the way a provider or client
// would: a typed spec and status, the string unions, optional and nullable
// fields. It compiles only if the generated declarations are what they
// claim.
const tsUsage = `import type { WebAppSpec, WebAppStatus, Port, PortProtocol, WebAppSpecTier } from "./web-app.js";
import type { VpcSpec } from "./vpc.js";

const proto: PortProtocol = "tcp";
const tier: WebAppSpecTier = "enterprise-plus";
const ports: Port[] = [{ number: 443, protocol: proto }, { number: 53 }];
export const spec: WebAppSpec = {
  image: "nginx:1.27", replicas: 3, tier, cpu_limit: 0.5, public: true,
  tags: { team: "red" }, annotations: { a: { b: [1, 2] } }, ports,
  dns: { zone: "example.com", ttl: null }, "3rd-party": ["x", null], extra: 7, nested_list: [{ name: "n" }],
};
export const status: WebAppStatus = { url: "https://x", ready_replicas: 3, endpoints: ["a"] };
export function replicas(s: WebAppSpec): number { return s.replicas + (s.dns?.ttl ?? 0); }
export const vpc: VpcSpec | undefined = undefined;
`

// tsMisuse must not compile: a number where the image string goes, a tier
// outside its union, a required field missing.
const tsMisuse = `import type { WebAppSpec } from "./web-app.js";
export const bad: WebAppSpec = { image: 1, replicas: 3, tier: "gold" };
export const missing: WebAppSpec = { image: "x", tier: "free" };
`

const tsConfig = `{
  "compilerOptions": {
    "target": "es2022", "lib": ["es2022"], "module": "nodenext", "moduleResolution": "nodenext",
    "strict": true, "noEmit": true, "noUnusedLocals": true, "noImplicitAny": true, "types": []
  },
  "include": ["*.ts"]
}
`

// TestKindTypes_TypeScriptTypeChecks generates the TypeScript of two kinds
// through a real converge and type-checks it with the real compiler
// (tsc --noEmit, strict) beside a usage file; a misuse file proves the
// compiler is checking (it must be refused, naming the errors).
func TestKindTypes_TypeScriptTypeChecks(t *testing.T) {
	t.Parallel()
	tsc := findTSC(t)
	s := startStack(t, stackOpts{noWorker: true})
	must(t, s.conctl("apply", "-f", filepath.Join("testdata", "kindtypes", "rich.kind.json")))
	must(t, s.conctl("apply", "-f", filepath.Join(classicFixtures, "vpc.kind.json")))

	dir := t.TempDir()
	must(t, s.conctl("kind", "types", "web-app", "--lang", "ts", "--out", filepath.Join(dir, "web-app.ts")))
	must(t, s.conctl("kind", "types", "vpc", "--lang", "ts", "--out", filepath.Join(dir, "vpc.ts")))
	write := func(name, body string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
	write("package.json", `{"type":"module","private":true}`+"\n")
	write("tsconfig.json", tsConfig)
	write("usage.ts", tsUsage)
	check := func() ([]byte, error) {
		cmd := exec.Command(tsc, "--noEmit", "-p", "tsconfig.json")
		cmd.Dir = dir
		return cmd.CombinedOutput()
	}
	out, err := check()
	require.NoError(t, err, "tsc --noEmit --strict refused the generated TypeScript:\n%s", out)

	write("misuse.ts", tsMisuse)
	out, err = check()
	require.Error(t, err, "tsc accepted a misuse of the generated types: it is not checking them")
	for _, want := range []string{"misuse.ts", "TS2322", "TS2741"} {
		require.Contains(t, string(out), want)
	}
}
