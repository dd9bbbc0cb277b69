package config_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/api"
	"github.com/converge-run/converge/core/config"
)

// TestFloors_HelmcheckKeepsConvergesFloors: tools/helmcheck (a module of its
// own, which cannot import this one; see its floors.go) refuses chart values
// below converge's floors from a copy of them. The copy must be these
// constants, and each must be where converge starts refusing: the floor is
// taken, a nanosecond less is refused, naming the variable.
func TestFloors_HelmcheckKeepsConvergesFloors(t *testing.T) {
	t.Parallel()
	want := map[string]time.Duration{
		"MEMBER_HEARTBEAT_EVERY":         config.MinHeartbeatEvery,
		"TLS_RELOAD_INTERVAL":            config.MinTLSReload,
		"WORKER_SILENCE_TIMEOUT":         config.MinWorkerSilence,
		"SWEEPER_UNCLAIMED_DELETE_AFTER": config.MinUnclaimedAfter,
		"WORKER_SESSION_MAX_AGE":         config.MinWorkerSessionMaxAge,
		"API_WS_KEEPALIVE":               api.MinWSKeepAlive,
	}
	got := helmcheckFloors(t, "../../tools/helmcheck/floors.go")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("tools/helmcheck/floors.go's convergeFloors differ from converge's floors (-converge +helmcheck):\n%s", diff)
	}
	base := map[string]string{"DATABASE_URL": "postgres://db/converge", "API_AUTH": "none", "WORKER_AUTH": "none"}
	start := func(name string, d time.Duration) error {
		env := map[string]string{name: d.String()}
		for k, v := range base {
			env[k] = v
		}
		if name == "API_WS_KEEPALIVE" {
			_, err := api.LimitsFromEnv(func(k string) string { return env[k] })
			return err
		}
		_, err := config.Parse(func(k string) string { return env[k] }, "test")
		return err
	}
	for name, floor := range want {
		require.NoError(t, start(name, floor), "%s at its floor", name)
		err := start(name, floor-time.Nanosecond)
		require.ErrorContains(t, err, name, "%s below its floor", name)
	}
}

// helmcheckFloors reads the convergeFloors literal of path.
func helmcheckFloors(t *testing.T, path string) map[string]time.Duration {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	require.NoError(t, err)
	floors := map[string]time.Duration{}
	found := false
	ast.Inspect(f, func(n ast.Node) bool {
		spec, ok := n.(*ast.ValueSpec)
		if !ok || len(spec.Names) != 1 || spec.Names[0].Name != "convergeFloors" || len(spec.Values) != 1 {
			return true
		}
		lit, ok := spec.Values[0].(*ast.CompositeLit)
		require.True(t, ok, "convergeFloors is a map literal")
		found = true
		for _, el := range lit.Elts {
			kv, ok := el.(*ast.KeyValueExpr)
			require.True(t, ok)
			k, v := stringLit(t, kv.Key), stringLit(t, kv.Value)
			d, err := time.ParseDuration(v)
			require.NoError(t, err, "the floor of %s", k)
			floors[k] = d
		}
		return false
	})
	require.True(t, found, "%s declares convergeFloors", path)
	return floors
}

func stringLit(t *testing.T, e ast.Expr) string {
	t.Helper()
	lit, ok := e.(*ast.BasicLit)
	require.True(t, ok && lit.Kind == token.STRING, "a string literal")
	s, err := strconv.Unquote(lit.Value)
	require.NoError(t, err)
	return s
}
