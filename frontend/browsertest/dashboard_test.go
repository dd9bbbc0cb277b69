package browsertest

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/resource"
)

// TestDashboard drives the dashboard in Chromium against a real converge,
// worker and Postgres. The steps share one stack and one browser and run in
// order (each builds on the data the previous ones made).
func TestDashboard(t *testing.T) {
	chromiumPath(t) // skip early without a browser
	s := startStack(t)
	b := newBrowser(t, s.base)

	// Data: one leaf that fails terminally (the oldest), then 30 that reconcile.
	s.applyResource("leaf", "failing", map[string]any{"fail": true}, map[string]string{"team": "b"})
	for i := range 30 {
		s.applyResource("leaf", fmt.Sprintf("ready-%02d", i), map[string]any{"n": i}, map[string]string{"team": []string{"a", "b"}[i%2]})
	}
	s.WaitPhase("leaf", "failing", resource.PhaseFailed, 90*time.Second)
	s.WaitPhase("leaf", "ready-29", resource.PhaseReady, 90*time.Second)

	t.Run("SummaryShowsLivePhaseCounts", func(t *testing.T) {
		b.t = t
		b.open("/")
		b.waitFor(`document.querySelector('[data-testid=total-READY]')?.textContent === '30'`, 20*time.Second)
		// First paint: from the one summary read, real numbers, never a placeholder.
		paint := eval[map[string]any](b, `window.__probe.summaryPaint`)
		t.Logf("Summary first paint: READY total %v shown %.0f ms after navigation start", paint["text"], paint["at"])
		require.Equal(t, "30", paint["text"], "the first paint shows the count")
		require.False(t, eval[bool](b, `!!window.__probe.placeholder`), "a count showed a placeholder")
		require.Equal(t, "1", b.text(`document.querySelector('[data-testid=total-FAILED]').textContent`))
		b.waitFor(`document.querySelector('[data-testid=by-kind] tr[data-kind=leaf]') !== null`, 10*time.Second)
		require.Contains(t, b.text(`document.querySelector('[data-testid=failing-kinds]').textContent`), "leaf")
		b.waitFor(`+document.querySelector('[data-testid=chart-phases]')?.dataset.points >= 1 && document.querySelector('[data-testid=chart-phases] canvas') !== null`, 20*time.Second)
		// Live: a new resource moves the counts with no reload.
		s.applyResource("leaf", "ready-30", map[string]any{"n": 30}, nil)
		b.waitFor(`document.querySelector('[data-testid=total-READY]')?.textContent === '31'`, 30*time.Second)
		b.waitFor(`+document.querySelector('[data-testid=chart-phases]').dataset.points >= 2`, 10*time.Second)
		b.requireLabelled()
		b.shot("summary")
	})

	t.Run("ListShowsResources", func(t *testing.T) {
		b.t = t
		b.open("/resources")
		b.waitFor(`document.querySelectorAll('[data-testid=resource-table] tbody tr').length === 32`, 20*time.Second)
		require.Contains(t, b.text(`document.querySelector('.pager-count').textContent`), "32 resources · page 1")
		b.waitFor(`document.querySelector('[data-testid=live-indicator]')?.dataset.state === 'live'`, 10*time.Second)
		b.requireLabelled()
		b.shot("resources")
	})

	t.Run("CompositeChildrenAppearAndTurnReadyWithoutReload", func(t *testing.T) {
		b.t = t
		b.open("/resources")
		b.waitFor(`document.querySelectorAll('[data-testid=resource-table] tbody tr').length >= 32`, 20*time.Second)
		eval[bool](b, `(window.__sameDocument = true)`)
		s.applyResource("net", "mesh", map[string]any{"spokes": 3}, nil)
		names := `['mesh', 'mesh-hub', 'mesh-spoke-0', 'mesh-spoke-1', 'mesh-spoke-2']`
		b.waitFor(names+`.every(n => document.querySelector('tr[data-name="' + n + '"]')?.dataset.phase === 'READY')`, 90*time.Second)
		require.True(t, eval[bool](b, `window.__sameDocument === true`), "the page was reloaded")
		b.shot("composite-live")
	})

	t.Run("PhaseChipsFilterServerSide", func(t *testing.T) {
		b.t = t
		// 25 a page: the failing leaf, the oldest, is not on page 1 unfiltered…
		b.open("/resources?size=25")
		b.waitFor(`document.querySelectorAll('[data-testid=resource-table] tbody tr').length === 25`, 20*time.Second)
		require.False(t, eval[bool](b, `document.querySelector('tr[data-name=failing]') !== null`))
		// …but the FAILED chip asks the server, which finds it.
		b.click(`button[data-phase-chip=FAILED]`)
		b.waitFor(`location.search.includes('phase=FAILED') && document.querySelectorAll('[data-testid=resource-table] tbody tr').length === 1 && document.querySelector('tr[data-name=failing]') !== null`, 20*time.Second)
		require.Equal(t, "true", b.text(`document.querySelector('button[data-phase-chip=FAILED]').getAttribute('aria-pressed')`))
		b.shot("phase-filter")
		// A second chip unions: 32 ready and the failing leaf, the oldest, on page 2.
		b.click(`button[data-phase-chip=READY]`)
		b.waitFor(`location.search.includes('phase=READY&phase=FAILED') && document.querySelectorAll('[data-testid=resource-table] tbody tr').length === 25 && document.querySelector('tr[data-name=failing]') === null`, 20*time.Second)
		b.clickText(`nav.pager`, "Next →")
		b.waitFor(`location.search.includes('cursors=') && document.querySelector('.pager-count')?.textContent.includes('page 2') && document.querySelector('tr[data-name=failing]') !== null`, 20*time.Second)
		require.Equal(t, 0, eval[int](b, `[...document.querySelectorAll('[data-testid=resource-table] tbody tr')].filter(r => !['READY', 'FAILED'].includes(r.dataset.phase)).length`))
		b.clickText(`nav.pager`, "← Prev")
		b.waitFor(`!location.search.includes('cursors=') && document.querySelector('.pager-count')?.textContent.includes('page 1')`, 20*time.Second)
	})

	t.Run("DetailShowsConditionsAndEvents", func(t *testing.T) {
		b.t = t
		b.open("/resources?phase=FAILED")
		b.waitFor(`document.querySelector('tr[data-name=failing] th a') !== null`, 20*time.Second)
		b.click(`tr[data-name=failing] th a`)
		b.waitFor(`location.search.includes('sel=leaf%2Ffailing') && document.querySelector('[data-testid=detail-panel] [data-testid=conditions]') !== null`, 20*time.Second)
		b.waitFor(`[...document.querySelectorAll('[data-testid=conditions] tr[data-condition]')].some(r => r.textContent.includes('FALSE'))`, 20*time.Second)
		b.waitFor(`document.querySelectorAll('[data-testid=events] li').length >= 1`, 20*time.Second)
		require.Contains(t, b.text(`document.querySelector('[data-testid=failure]').textContent`), "terminal")
		b.requireLabelled()
		b.shot("detail")
	})

	t.Run("QuarantineChangesThePhaseLive", func(t *testing.T) {
		b.t = t
		// The detail panel of the failing leaf is open from the previous step.
		b.waitFor(`document.querySelector('[data-testid=detail-panel] .detail-head [data-phase]')?.dataset.phase === 'FAILED'`, 20*time.Second)
		b.clickText(`[data-testid=detail-panel] [role=toolbar]`, "Quarantine")
		b.waitFor(`document.querySelector('[data-testid=detail-panel] .detail-head [data-phase]')?.dataset.phase === 'QUARANTINED'`, 20*time.Second)
		// The list row (filtered to FAILED) updates in place, marked as moved.
		b.waitFor(`document.querySelector('tr[data-name=failing]')?.dataset.phase === 'QUARANTINED'`, 20*time.Second)
		b.shot("quarantine")
		// Lift it again through the UI.
		b.clickText(`[data-testid=detail-panel] [role=toolbar]`, "Unquarantine")
		b.waitFor(`document.querySelector('[data-testid=detail-panel] .detail-head [data-phase]')?.dataset.phase === 'FAILED'`, 30*time.Second)
	})

	t.Run("SchemaViolatingSpecEditShowsTheFieldError", func(t *testing.T) {
		b.t = t
		b.open("/resources?sel=net%2Fmesh")
		b.waitFor(`document.querySelector('[data-testid=detail-panel] [role=toolbar]') !== null`, 20*time.Second)
		b.clickText(`[data-testid=detail-panel] [role=toolbar]`, "Edit spec")
		b.waitFor(`document.querySelector('[data-testid=spec-editor] textarea[name=spec]') !== null`, 10*time.Second)
		b.setField(`[data-testid=spec-editor] textarea[name=spec]`, "{\n  \"spokes\": -1\n}")
		b.clickText(`[data-testid=spec-editor]`, "Apply")
		b.waitFor(`document.querySelector('[data-testid=spec-editor] li[data-pointer="/spokes"]') !== null`, 20*time.Second)
		require.Contains(t, b.text(`document.querySelector('[data-testid=spec-editor] li[data-pointer="/spokes"]').textContent`), "line 2")
		require.Equal(t, "2", b.text(`document.querySelector('[data-testid=spec-editor] .json-gutter .err').textContent.trim()`))
		// Nothing was written.
		var out struct{ Resource struct{ Spec map[string]any } }
		require.NoError(t, json.Unmarshal(s.apply(`{ resource(kind: "net", name: "mesh") { spec } }`, nil), &out))
		require.Equal(t, float64(3), out.Resource.Spec["spokes"])
		b.shot("spec-field-error")
	})

	t.Run("RunAnOperationVerbLive", func(t *testing.T) {
		b.t = t
		b.open("/resources?sel=leaf%2Fmesh-hub")
		b.clickText(`[data-testid=detail-panel] [role=toolbar]`, "Run operation")
		b.waitFor(`document.querySelector('#op-verb')?.value === 'ping'`, 10*time.Second)
		b.clickText(`[data-testid=detail-panel] form[aria-label="Run an operation"]`, "Run")
		b.waitFor(`document.querySelector('[data-testid=operation-state]')?.textContent.includes('SUCCEEDED')`, 30*time.Second)
		require.Contains(t, b.text(`document.querySelector('[data-testid=operation-state]').textContent`), "pong")
		b.shot("operation")
	})

	t.Run("DeleteAsksFirstThenTheRowGoesLive", func(t *testing.T) {
		b.t = t
		b.open("/resources?sel=leaf%2Fready-00")
		b.waitFor(`document.querySelector('tr[data-name="ready-00"]') !== null`, 20*time.Second)
		b.clickText(`[data-testid=detail-panel] [role=toolbar]`, "Delete")
		b.waitFor(`document.querySelector('[role=dialog]')?.textContent.includes('leaf/ready-00')`, 10*time.Second)
		b.shot("delete-confirm")
		b.clickText(`[role=dialog]`, "Delete")
		b.waitFor(`document.querySelector('tr[data-name="ready-00"]')?.classList.contains('gone')`, 30*time.Second)
		b.waitFor(`document.querySelector('[data-testid=detail-panel]')?.textContent.includes('does not exist')`, 30*time.Second)
	})

	t.Run("GraphShowsTheSubtreeLive", func(t *testing.T) {
		b.t = t
		s.applyResource("net", "broken", map[string]any{"spokes": 2, "failSpoke": 1}, nil)
		s.WaitPhase("leaf", "broken-spoke-1", resource.PhaseFailed, 90*time.Second)
		b.open("/graph?root=net%2Fbroken")
		b.waitFor(`document.querySelectorAll('[data-testid=graph] .gnode').length === 4`, 20*time.Second)
		b.waitFor(`document.querySelector('[data-testid=graph] .gnode[data-name="broken-spoke-1"]')?.dataset.phase === 'FAILED'`, 20*time.Second)
		require.True(t, eval[bool](b, `document.querySelector('.gnode[data-name="broken-spoke-1"]').classList.contains('hot')`), "the failure is highlighted")
		require.True(t, eval[bool](b, `document.querySelectorAll('[data-testid=graph] .react-flow__edge.hot').length >= 1`), "the path to it is highlighted")
		require.Contains(t, b.text(`document.querySelector('[data-testid=failures]').textContent`), "broken-spoke-1")
		b.shot("graph")

		// Live: a recompose adds a spoke to the open graph.
		b.open("/graph?root=net%2Fmesh")
		b.waitFor(`document.querySelectorAll('[data-testid=graph] .gnode').length === 5`, 20*time.Second)
		s.applyResource("net", "mesh", map[string]any{"spokes": 4}, nil)
		b.waitFor(`document.querySelector('[data-testid=graph] .gnode[data-name="mesh-spoke-3"]')?.dataset.phase === 'READY'`, 60*time.Second)
		// Keyboard: the canvas takes focus, Tab reaches a node and Enter opens it.
		b.click(`[data-testid=graph]`)
		b.waitFor(`document.querySelector('[data-testid=graph]').contains(document.activeElement)`, 5*time.Second)
		require.NoError(t, chromedp.Do(b.ctx, chromedp.Focus(chromedp.CSS(`.react-flow__node[data-id]`))))
		require.NoError(t, pressKey(b, kb.Enter))
		b.waitFor(`location.search.includes('sel=')`, 5*time.Second)
		// Shift+arrows pan the picture, as the canvas's label says.
		viewport := `document.querySelector('[data-testid=graph] .react-flow__viewport').style.transform`
		before := b.text(viewport)
		require.NoError(t, chromedp.Do(b.ctx, chromedp.Focus(chromedp.CSS(`[data-testid=graph]`))))
		require.NoError(t, chromedp.Do(b.ctx, chromedp.KeyEvent(kb.ArrowRight, chromedp.KeyModifiers(chromedp.ModifierShift))))
		b.waitFor(viewport+` !== `+strconv.Quote(before), 5*time.Second)
		b.shot("graph-live")
	})

	t.Run("ClusterListsTheRunningMember", func(t *testing.T) {
		b.t = t
		b.open("/cluster")
		b.waitFor(`document.querySelectorAll('[data-testid=members] tbody tr[data-status=READY]').length === 1`, 20*time.Second)
		require.Contains(t, b.text(`document.querySelector('[data-testid=members] tbody tr[data-status=READY]').textContent`), "all")
		require.Contains(t, b.text(`document.querySelector('[data-testid=members] thead').textContent`), "Workers")
		b.clickText(`[data-testid=members]`, "Config")
		b.waitFor(`document.querySelector('[data-testid=members] tr.expanded pre') !== null`, 10*time.Second)
		// The runtime config spans the whole row, whatever the columns.
		b.waitFor(`document.querySelector('[data-testid=members] tr.expanded td').colSpan ===
		  document.querySelectorAll('[data-testid=members] thead th').length`, 5*time.Second)
		b.requireLabelled()
		b.shot("cluster")
	})

	t.Run("KindsConfigsAndBindingsPages", func(t *testing.T) {
		b.t = t
		b.open("/kinds?sel=net")
		b.waitFor(`document.querySelector('[data-testid=kind-detail]')?.textContent.includes('composer')`, 20*time.Second)
		b.setField(`#p-maxInflight`, "7")
		b.clickText(`[data-testid=kind-detail]`, "Save policy")
		var out struct {
			Kind struct{ Config struct{ MaxInflight int } }
		}
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) && out.Kind.Config.MaxInflight != 7 {
			require.NoError(t, json.Unmarshal(s.apply(`{ kind(name: "net") { config { maxInflight } } }`, nil), &out))
			time.Sleep(50 * time.Millisecond)
		}
		require.Equal(t, 7, out.Kind.Config.MaxInflight, "the policy edit reached the server")
		b.requireLabelled()
		b.shot("kinds")

		// A provider config whose spec breaks the kind's config_schema.
		b.open("/configs?new=1")
		b.waitFor(`document.querySelector('[data-testid=config-detail] #pc-kind') !== null`, 20*time.Second)
		b.setSelect(`#pc-kind`, "leaf")
		b.setField(`#pc-name`, "primary")
		b.setField(`[data-testid=config-detail] textarea`, `{"endpoint": 5}`)
		b.clickText(`[data-testid=config-detail]`, "Create")
		b.waitFor(`document.querySelector('[data-testid=config-detail] li[data-pointer="/endpoint"]') !== null`, 20*time.Second)
		b.requireLabelled()
		b.shot("configs-schema-error")
		b.setField(`[data-testid=config-detail] textarea`, `{"endpoint": "http://objects.local"}`)
		b.clickText(`[data-testid=config-detail]`, "Create")
		b.waitFor(`document.querySelector('[data-testid=configs] tbody th a')?.textContent === 'primary'`, 20*time.Second)
		b.shot("configs")

		b.open("/bindings?new=1")
		b.waitFor(`document.querySelector('[data-testid=binding-detail] #bf-name') !== null`, 20*time.Second)
		b.requireLabelled()
		b.shot("bindings")
	})

	t.Run("AFiftyRowPageRendersWithin100ms", func(t *testing.T) {
		b.t = t
		for i := range 10 {
			s.applyResource("leaf", fmt.Sprintf("extra-%02d", i), map[string]any{"n": i}, nil)
		}
		// Three fresh loads; the best one counts, so a CPU shared with other
		// work on the CI machine does not decide the result (all are logged).
		best := 1e9
		for range 3 {
			b.open("/resources?size=50")
			b.waitFor(`document.querySelectorAll('[data-testid=resource-table] tbody tr').length === 50`, 20*time.Second)
			b.waitFor(`performance.getEntriesByName('converge:resources-render').length > 0`, 10*time.Second)
			ms := eval[float64](b, `performance.getEntriesByName('converge:resources-render')[0].duration`)
			t.Logf("50-row page: response → rendered rows in %.1f ms", ms)
			best = min(best, ms)
		}
		require.LessOrEqual(t, best, 100.0)
	})

	t.Run("NoPollingWhileIdle", func(t *testing.T) {
		b.t = t
		b.open("/resources")
		b.waitFor(`document.querySelectorAll('[data-testid=resource-table] tbody tr').length > 0 && document.querySelector('[data-testid=live-indicator]').dataset.state === 'live'`, 20*time.Second)
		// Reset the probe: the test's own waits set timers in the page.
		before := eval[int](b, `(window.__probe.longTimeouts = [], window.__probe.intervals = 0, performance.getEntriesByType('resource').filter(e => e.name.includes('/graphql')).length)`)
		time.Sleep(3 * time.Second)
		after := eval[int](b, `performance.getEntriesByType('resource').filter(e => e.name.includes('/graphql')).length`)
		require.Equal(t, before, after, "the idle page made requests")
		require.Equal(t, 0, eval[int](b, `window.__probe.intervals`), "setInterval was used")
		require.Empty(t, eval[[]int](b, `window.__probe.longTimeouts`), "long timers were set while connected")
		// Since the page loaded, not only in the window: a poller started
		// when the page mounted, with a period longer than the window, is
		// caught here.
		require.Equal(t, 0, eval[int](b, `window.__probe.pageIntervals`), "the page used setInterval")
		require.Empty(t, eval[[]int](b, `window.__probe.pageLongTimeouts`), "the page set long timers")
	})

	t.Run("KeyboardReachesTheSkipLinkAndChips", func(t *testing.T) {
		b.t = t
		b.open("/resources")
		b.waitFor(`document.querySelector('button[data-phase-chip=READY]') !== null`, 20*time.Second)
		require.NoError(t, pressTab(b))
		require.True(t, eval[bool](b, `document.activeElement.classList.contains('skip-link')`), "Tab reaches the skip link first")
		eval[bool](b, `(document.querySelector('button[data-phase-chip=DEGRADED]').focus(), true)`)
		require.NoError(t, pressKey(b, " "))
		b.waitFor(`location.search.includes('phase=DEGRADED')`, 10*time.Second)
	})

	t.Run("GraphiQLRunsAQuery", func(t *testing.T) {
		b.t = t
		b.openPage("/graphiql", `document.querySelector('#graphiql > *') !== null`)
		b.waitFor(`document.querySelector('.graphiql-container') !== null && document.querySelector('.graphiql-execute-button') !== null`, 60*time.Second)
		// The editors start asynchronously (Monaco and its workers): click Run
		// until a response shows.
		b.waitFor(`(() => {
		  const out = document.querySelector('.graphiql-response .result-window');
		  if (out && out.textContent.includes('phaseCounts')) return true;
		  const now = Date.now();
		  if (!window.__ranAt || now - window.__ranAt > 1500) {
		    window.__ranAt = now;
		    document.querySelector('.graphiql-execute-button')?.click();
		  }
		  return false;
		})()`, 45*time.Second)
		require.Contains(t, b.text(`document.querySelector('.graphiql-response .result-window').textContent`), "READY")
		b.shot("graphiql")
	})

	b.t = t
	b.noExceptions()
}
