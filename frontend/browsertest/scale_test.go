package browsertest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/examples/classic"
)

// TestGraph_ThousandNodesReadAtFit: a bom of 250 teams (1,001 resources)
// opens as four tiers — the bom, then its accounts, vpcs and routes each
// folded into one aggregate with a phase bar — whose labels are readable at
// the default fit; a click expands an aggregate. Screenshots: graph-1001,
// graph-1001-expanded.
func TestGraph_ThousandNodesReadAtFit(t *testing.T) {
	s := startStack(t)
	for _, f := range []string{"account.kind.json", "vpc.kind.json", "route.kind.json", "bom.kind.json"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "examples", "classic", "testfixtures", f))
		require.NoError(t, err)
		s.apply(`mutation($m: JSON!) { applyKindManifest(manifest: $m) { name } }`, map[string]any{"m": json.RawMessage(b)})
	}
	s.StartWorker(apptest.Worker{Options: worker.Options{MaxParallel: 64}, Providers: classic.Providers(apptest.Logger(t))})
	s.applyResource("bom", "big", map[string]any{"teams": 250, "routes_per_team": 2, "leaf_sim": map[string]any{"latency_ms": 0, "failure_rate": 0}}, nil)
	s.WaitSubtree("bom", "big", 180*time.Second, func(_ resource.Resource, below []resource.Resource) bool { return len(below) == 1000 })

	b := newBrowser(t, s.base)
	b.open("/graph?root=bom%2Fbig")
	b.waitFor(`document.querySelector('[data-testid=graph-size]')?.textContent.startsWith('1,001 nodes loaded')`, 60*time.Second)
	b.waitFor(`document.querySelectorAll('[data-testid=graph] g.node').length === 4`, 20*time.Second)
	require.ElementsMatch(t, []int{250, 250, 500}, eval[[]int](b, `[...document.querySelectorAll('[data-testid=graph] g.node.aggregate')].map(e => +e.dataset.aggregate)`))
	// Readable at the fit: every label at least 10 CSS pixels tall, every node at least 120 wide.
	minText := eval[float64](b, `Math.min(...[...document.querySelectorAll('[data-testid=graph] g.node text.node-name')].map(e => e.getBoundingClientRect().height))`)
	minWidth := eval[float64](b, `Math.min(...[...document.querySelectorAll('[data-testid=graph] g.node > rect')].map(e => e.getBoundingClientRect().width))`)
	require.GreaterOrEqual(t, minText, 10.0, "labels readable at fit")
	require.GreaterOrEqual(t, minWidth, 120.0, "nodes wide enough to read at fit")
	require.Contains(t, b.text(`document.querySelector('[data-testid=graph] g.node.aggregate[data-aggregate="500"] text.node-name').textContent`), "route ×500")
	b.shot("graph-1001")

	// Expand the routes: 500 nodes, laid out and drawn.
	eval[float64](b, `(() => { window.__t0 = performance.now(); document.querySelector('[data-testid=graph] g.node.aggregate[data-aggregate="500"]').dispatchEvent(new MouseEvent('click', {bubbles: true})); return 0; })()`)
	b.waitFor(`document.querySelectorAll('[data-testid=graph] g.node').length === 503`, 20*time.Second)
	took := eval[float64](b, `performance.now() - window.__t0`)
	t.Logf("expanding 500 routes took %.0f ms (click to the nodes drawn, polled every 50 ms)", took)
	b.shot("graph-1001-expanded")
	b.noExceptions()
}
