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

// lazyMarkers name the lazy parts of the build, each by a string found only
// in its code: none may be in the dashboard's initial load. A chunk's name is
// not enough: a static import folds the lazy module into the entry chunk,
// and its name is then nowhere to be found.
var lazyMarkers = map[string]string{
	"GraphiQL":                     "graphiql-container",
	"Monaco":                       "monaco-editor",
	"the graph view (React Flow)":  "react-flow__",
	"the graph view (dagre)":       "dagre",
	"the Summary's charts (uPlot)": "u-legend",
}

// TestEmbeddedBuild_InitialJSBudget sums the scripts index.html loads (its
// module entry and every modulepreload), gzipped, against the budget, and
// checks that none of GraphiQL, Monaco, the graph view and the Summary's
// charts is among them.
func TestEmbeddedBuild_InitialJSBudget(t *testing.T) {
	t.Parallel()
	checkInitialJS(t, Dist())
}

func checkInitialJS(t *testing.T, dist fs.FS) {
	t.Helper()
	html, err := fs.ReadFile(dist, "index.html")
	require.NoError(t, err)
	refs := regexp.MustCompile(`<(?:script[^>]*src|link[^>]*rel="modulepreload"[^>]*href)="/([^"]+\.js)"`).FindAllSubmatch(html, -1)
	require.NotEmpty(t, refs)
	total := 0
	for _, m := range refs {
		name := string(m[1])
		data, err := fs.ReadFile(dist, name)
		require.NoError(t, err)
		for what, marker := range lazyMarkers {
			require.False(t, bytes.Contains(data, []byte(marker)), "%s is in the dashboard's initial load (%s holds %q)", what, name, marker)
		}
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

// TestEmbeddedBuild_LazyChunksHoldTheirMarkers keeps lazyMarkers honest: each
// marker is found in the build (in a lazy chunk), so a marker that no longer
// matches the library's code fails here rather than passing the budget test
// unseen.
func TestEmbeddedBuild_LazyChunksHoldTheirMarkers(t *testing.T) {
	t.Parallel()
	dist := Dist()
	found := map[string]bool{}
	require.NoError(t, fs.WalkDir(dist, "assets", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(name, ".js") {
			return err
		}
		data, err := fs.ReadFile(dist, name)
		if err != nil {
			return err
		}
		for what, marker := range lazyMarkers {
			if bytes.Contains(data, []byte(marker)) {
				found[what] = true
			}
		}
		return nil
	}))
	for what := range lazyMarkers {
		require.True(t, found[what], "no script of the build holds the marker of %s (%q)", what, lazyMarkers[what])
	}
}
