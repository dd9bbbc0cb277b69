package browsertest

import (
	"encoding/json"
	"testing"
	"time"
)

// sinkKind is a reactor kind (it owns no resources), for bindings.
const sinkKind = `{"kind":"sink","description":"A reactor.","reactions":[{"name":"r","trigger":"reactor","emits":["sideEffect"]}]}`

// rowText is the text of the row of table testid whose header cell is name.
func rowText(testid, name string) string {
	return `([...document.querySelectorAll('[data-testid=` + testid + `] tbody tr')].find(r => r.querySelector('th')?.textContent === ` +
		jsString(name) + `)?.textContent ?? '')`
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestDashboard_CatalogPagesLiveAcrossBrowsers: the kinds, provider configs
// and reactor bindings pages show what a second browser (or any other
// client) changes, without a reload.
func TestDashboard_CatalogPagesLiveAcrossBrowsers(t *testing.T) {
	s := startStack(t)
	s.apply(`mutation($m: JSON!) { applyKindManifest(manifest: $m) { name } }`, map[string]any{"m": json.RawMessage(sinkKind)})
	s.apply(`mutation { applyReactorBinding(input: {name: "b1", watchKind: "leaf", transition: FAILED, reactor: "sink"}) { name } }`, nil)
	a := newBrowser(t, s.base)
	b := newBrowser(t, s.base)
	const noReload = `window.__live === 1`

	a.open("/bindings")
	a.waitFor(rowText("bindings", "b1")+`.includes('on')`, 20*time.Second)
	eval[int](a, `window.__live = 1`)
	b.open("/bindings")
	b.waitFor(rowText("bindings", "b1")+`.includes('on')`, 20*time.Second)
	b.click(`[data-testid=bindings] tbody tr input[type=checkbox]`)
	a.waitFor(rowText("bindings", "b1")+`.includes('off')`, 20*time.Second)
	s.apply(`mutation { applyReactorBinding(input: {name: "b2", watchKind: "leaf", transition: SYNCED, reactor: "sink"}) { name } }`, nil)
	a.waitFor(rowText("bindings", "b2")+`.includes('on')`, 20*time.Second)
	s.apply(`mutation { deleteReactorBinding(name: "b1") }`, nil)
	a.waitFor(rowText("bindings", "b1")+` === ''`, 20*time.Second)
	a.waitFor(noReload, time.Second)
	a.shot("live-bindings")

	a.open("/kinds")
	a.waitFor(rowText("kinds", "leaf")+` !== ''`, 20*time.Second)
	eval[int](a, `window.__live = 1`)
	s.apply(`mutation { updateKindConfig(kind: "leaf", version: "v1", input: {maxInflight: 9}) { maxInflight } }`, nil)
	a.waitFor(rowText("kinds", "leaf")+`.includes('9')`, 20*time.Second)
	a.waitFor(noReload, time.Second)

	a.open("/configs")
	a.waitFor(`document.querySelector('h1')?.textContent === 'Provider configs'`, 20*time.Second)
	eval[int](a, `window.__live = 1`)
	b.open("/configs")
	s.apply(`mutation { applyProviderConfig(input: {kind: "leaf", name: "from-elsewhere", isDefault: false, spec: {endpoint: "x"}}) { id } }`, nil)
	a.waitFor(`document.body.innerText.includes('from-elsewhere')`, 20*time.Second)
	b.waitFor(`document.body.innerText.includes('from-elsewhere')`, 20*time.Second)
	a.waitFor(noReload, time.Second)
	a.shot("live-configs")
	a.noExceptions()
	b.noExceptions()
}
