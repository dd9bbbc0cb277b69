package browsertest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/require"
)

// chromiumPath finds the browser: CONVERGE_CHROMIUM, else Debian's chromium.
// Without one the test skips (naming the package to install), unless
// CONVERGE_REQUIRE_BROWSER=1.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CONVERGE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no Chromium found: install the Debian package `chromium` (apt-get install -y chromium) to run the browser tests"
	if os.Getenv("CONVERGE_REQUIRE_BROWSER") == "1" {
		t.Fatal(msg + " (CONVERGE_REQUIRE_BROWSER=1)")
	}
	t.Skip(msg)
	return ""
}

// instrument runs before every page's scripts: it counts setInterval calls
// and long timeouts (the dashboard must not poll), all of them and those the
// dashboard's own scripts (/assets/) set, and marks the document so a reload
// can be detected. (The test's own waits set long timeouts too, from code
// that is not the page's.)
const instrument = `(() => {
  window.__probe = { intervals: 0, longTimeouts: [], pageIntervals: 0, pageLongTimeouts: [] };
  const fromPage = () => (new Error().stack || '').includes(location.origin + '/assets/');
  const si = window.setInterval;
  window.setInterval = function (...a) {
    window.__probe.intervals++;
    if (fromPage()) window.__probe.pageIntervals++;
    return si.apply(this, a);
  };
  const st = window.setTimeout;
  window.setTimeout = function (fn, ms, ...r) {
    if ((ms | 0) >= 1000) {
      window.__probe.longTimeouts.push(ms | 0);
      if (fromPage()) window.__probe.pageLongTimeouts.push(ms | 0);
    }
    return st.call(this, fn, ms, ...r);
  };
  // The Summary's first paint: when its READY total first shows, and
  // whether a placeholder ("…") ever showed in its counts.
  // (Only on the Summary: elsewhere it would add its cost to what the
  // graph's live batches measure.)
  document.addEventListener('DOMContentLoaded', () => new MutationObserver(() => {
    if (location.pathname !== '/') return;
    const t = document.querySelector('[data-testid=total-READY]');
    if (t && !window.__probe.summaryPaint) window.__probe.summaryPaint = { at: performance.now(), text: t.textContent };
    for (const el of document.querySelectorAll('[data-testid=phase-totals], [data-testid=by-kind]')) if (el.textContent.includes('\u2026')) window.__probe.placeholder = true;
  }).observe(document.body, { childList: true, subtree: true, characterData: true }));
})();`

// browser is one headless Chromium tab on the stack's dashboard.
type browser struct {
	t    *testing.T
	ctx  context.Context
	base string
	dir  string // screenshots

	mu         sync.Mutex
	exceptions []string
}

func newBrowser(t *testing.T, base string) *browser {
	t.Helper()
	exe := chromiumPath(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 900),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	b := &browser{t: t, ctx: ctx, base: base, dir: screenshotDir(t)}
	// Start the browser, then install the probe for every document.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate("about:blank")))
	_, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: instrument})
	require.NoError(t, err)
	exceptions := chromedp.Events(ctx, runtime.ExceptionThrown)
	go func() {
		for ev, err := range exceptions {
			if err != nil {
				return
			}
			d := ev.ExceptionDetails
			text := d.Text
			if d.Exception != nil && d.Exception.Description != "" {
				text = d.Exception.Description
			}
			b.mu.Lock()
			b.exceptions = append(b.exceptions, fmt.Sprintf("%s (%s:%d)", text, d.URL, d.LineNumber))
			b.mu.Unlock()
		}
	}()
	return b
}

// screenshotDir is .artifacts/screenshots at the repository root.
func screenshotDir(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, parent, dir, "no go.mod above the test")
		dir = parent
	}
	out := filepath.Join(dir, ".artifacts", "screenshots")
	require.NoError(t, os.MkdirAll(out, 0o755))
	return out
}

// open navigates to a dashboard path and waits until the app has rendered.
func (b *browser) open(path string) {
	b.t.Helper()
	b.openPage(path, `document.querySelector('main') !== null`)
}

// openPage navigates to a path and waits until ready holds.
func (b *browser) openPage(path, ready string) {
	b.t.Helper()
	require.NoError(b.t, chromedp.Do(b.ctx, chromedp.Navigate(b.base+path)))
	b.waitFor(ready, 20*time.Second)
}

// waitFor polls a JavaScript predicate in the page until it holds.
func (b *browser) waitFor(expr string, within time.Duration) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, within+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(within), chromedp.WithPollingInterval(50*time.Millisecond)))
	if err != nil {
		b.shot("FAILED-" + sanitize(b.t.Name()))
		b.t.Fatalf("waiting for %s: %v\npage: %s", expr, err, b.text("document.body.innerText.slice(0, 1500)"))
	}
}

// eval evaluates an expression and decodes its value into T.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr))
	require.NoError(b.t, err, expr)
	return v
}

func (b *browser) text(expr string) string {
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return v
}

// click clicks the first element matching a CSS selector.
func (b *browser) click(css string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	require.NoError(b.t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(css))), css)
}

// clickText clicks the first enabled button or link inside scope whose text
// is label, waiting until there is one (a button rendered before the session
// has loaded is still disabled, and a click on it is lost).
func (b *browser) clickText(scope, label string) {
	b.t.Helper()
	js := fmt.Sprintf(`(() => { const el = [...document.querySelectorAll(%q + ' button, ' + %q + ' a')].find(e => e.textContent.trim() === %q && !e.disabled); if (!el) return false; el.click(); return true; })()`, scope, scope, label)
	b.waitFor(js, 10*time.Second)
}

// setField sets a React-controlled input or textarea and fires its input event.
func (b *browser) setField(css, value string) {
	b.t.Helper()
	v, _ := json.Marshal(value)
	js := fmt.Sprintf(`(() => { const el = document.querySelector(%q); if (!el) return false;
	  const proto = el instanceof HTMLTextAreaElement ? HTMLTextAreaElement.prototype : HTMLInputElement.prototype;
	  Object.getOwnPropertyDescriptor(proto, 'value').set.call(el, %s);
	  el.dispatchEvent(new Event('input', { bubbles: true })); return true; })()`, css, v)
	b.waitFor(js, 10*time.Second)
}

// setSelect chooses an option of a React-controlled select.
func (b *browser) setSelect(css, value string) {
	b.t.Helper()
	v, _ := json.Marshal(value)
	js := fmt.Sprintf(`(() => { const el = document.querySelector(%q); if (!el || ![...el.options].some(o => o.value === %s)) return false;
	  Object.getOwnPropertyDescriptor(HTMLSelectElement.prototype, 'value').set.call(el, %s);
	  el.dispatchEvent(new Event('change', { bubbles: true })); return true; })()`, css, v, v)
	b.waitFor(js, 10*time.Second)
}

// shot saves a PNG of the viewport as .artifacts/screenshots/<name>.png.
func (b *browser) shot(name string) {
	buf, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	p := filepath.Join(b.dir, name+".png")
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	b.t.Logf("screenshot: %s", p)
}

// noExceptions fails when the page threw an uncaught exception.
func (b *browser) noExceptions() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	require.Empty(b.t, b.exceptions, "uncaught exceptions in the page")
}

// unlabelled lists the form controls and buttons of the page that have no
// accessible name.
const unlabelled = `(() => {
  const bad = [];
  for (const el of document.querySelectorAll('input, select, textarea')) {
    if (el.type === 'hidden') continue;
    const named = (el.labels && el.labels.length) || el.getAttribute('aria-label') || el.getAttribute('aria-labelledby') || el.closest('label');
    if (!named) bad.push(el.outerHTML.slice(0, 120));
  }
  for (const el of document.querySelectorAll('button, a[href]')) {
    if (!(el.textContent.trim() || el.getAttribute('aria-label') || el.getAttribute('title'))) bad.push(el.outerHTML.slice(0, 120));
  }
  return bad;
})()`

func (b *browser) requireLabelled() {
	b.t.Helper()
	require.Empty(b.t, eval[[]string](b, unlabelled), "controls without an accessible name")
}

func sanitize(s string) string {
	return strings.NewReplacer("/", "-", " ", "_").Replace(s)
}

func pressTab(b *browser) error {
	return chromedp.Do(b.ctx, chromedp.KeyEvent(kb.Tab))
}

func pressKey(b *browser, k string) error {
	return chromedp.Do(b.ctx, chromedp.KeyEvent(k))
}
