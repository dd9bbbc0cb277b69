package frontend

import (
	"bytes"
	"compress/gzip"
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// initialJSBudget is the most JavaScript (gzipped) the dashboard's first
// page may load before it renders; GraphiQL and the graph view are lazy.
const initialJSBudget = 300 << 10

// TestEmbeddedBuild_InitialJSBudget sums the scripts index.html loads (its
// module entry and every modulepreload), gzipped, against the budget, and
// checks that neither GraphiQL nor the graph view is among them.
func TestEmbeddedBuild_InitialJSBudget(t *testing.T) {
	t.Parallel()
	dist := Dist()
	html, err := fs.ReadFile(dist, "index.html")
	require.NoError(t, err)
	refs := regexp.MustCompile(`<(?:script[^>]*src|link[^>]*rel="modulepreload"[^>]*href)="/([^"]+\.js)"`).FindAllSubmatch(html, -1)
	require.NotEmpty(t, refs)
	total := 0
	for _, m := range refs {
		name := string(m[1])
		lower := strings.ToLower(name)
		require.False(t, strings.Contains(lower, "graphiql") || strings.Contains(lower, "monaco") || strings.Contains(lower, "graphpage"),
			"%s is in the dashboard's initial load", name)
		data, err := fs.ReadFile(dist, name)
		require.NoError(t, err)
		var b bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
		_, _ = zw.Write(data)
		require.NoError(t, zw.Close())
		t.Logf("%-45s %7d B, %6d B gzipped", name, len(data), b.Len())
		total += b.Len()
	}
	t.Logf("initial JS: %d B gzipped (budget %d B)", total, initialJSBudget)
	require.LessOrEqual(t, total, initialJSBudget)
}
