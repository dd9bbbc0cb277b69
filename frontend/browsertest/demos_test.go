package browsertest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/live"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/examples/apply"
	"github.com/converge-run/converge/examples/classic"
	"github.com/converge-run/converge/examples/datadriven"
	"github.com/converge-run/converge/frontend"
	"github.com/converge-run/converge/resolvers"
)

// maxDemoShot is the most bytes one committed demo screenshot may have.
const maxDemoShot = 200 << 10

// demo is one of the examples/ demos as the screenshots show it.
type demo struct {
	name      string // examples/<name>
	docs      func(withSamples bool) ([]apply.Document, error)
	providers func(*apptest.Stack) []worker.Provider
	// fast are the leaf kinds whose default providerconfig is replaced by
	// a quick, failure-free one (the walkthrough's own latencies are for
	// watching, not for a test).
	fast     []string
	extra    func(*testing.T, apply.StoreApplier)
	root     ref // the sample the graph and the detail show
	settled  []ref
	leafSpec string
}

type ref struct{ kind, name string }

func (r ref) String() string { return r.kind + "/" + r.name }

var demos = []demo{
	{
		name:      "classic",
		docs:      classic.Documents,
		providers: func(s *apptest.Stack) []worker.Provider { return classic.Providers(s.Log) },
		fast:      []string{classic.KindAccount, classic.KindVPC, classic.KindTGW, classic.KindRoute},
		leafSpec:  `{"latency_ms":40,"jitter_ms":200,"failure_rate":0}`,
		extra: func(t *testing.T, a apply.StoreApplier) {
			require.NoError(t, a.ApplyProviderConfig(context.Background(), apply.ProviderConfig{Kind: classic.KindStatusSink,
				Name: "default", IsDefault: true,
				Spec: json.RawMessage(`{"endpoint":"file://` + t.TempDir() + `?metadata=skip","prefix":"boms"}`)}))
		},
		root:    ref{classic.KindClassicBOM, "platform"},
		settled: []ref{{classic.KindClassicBOM, "platform"}},
	},
	{
		name:      "datadriven",
		docs:      datadriven.Documents,
		providers: func(s *apptest.Stack) []worker.Provider { return datadriven.Providers(s.Log) },
		fast: []string{datadriven.KindFakeVPC, datadriven.KindFakeDB, datadriven.KindFakeApp,
			datadriven.KindFakeTerraform, datadriven.KindFakeK8sJob},
		leafSpec: `{"latency_ms":40}`,
		root:     ref{datadriven.KindCELBOM, "shop"},
		settled:  []ref{{datadriven.KindCELBOM, "shop"}, {datadriven.KindStarlark, "builds"}},
	},
}

// TestDemoScreenshots opens the dashboard on each demo with its sample
// resources applied and settled — the Summary, the graph of the sample and
// its detail panel — and takes the screenshots the demos' READMEs show.
// With CONVERGE_UPDATE_SCREENSHOTS=1 it writes them to
// examples/<demo>/screenshots/ (each at most maxDemoShot bytes); otherwise
// to .artifacts/screenshots/ like every other screenshot here.
func TestDemoScreenshots(t *testing.T) {
	for _, d := range demos {
		t.Run(d.name, func(t *testing.T) { demoScreenshots(t, d) })
	}
}

func demoScreenshots(t *testing.T, d demo) {
	st := apptest.Start(t, apptest.Options{
		Version: "browsertest",
		GraphQL: resolvers.Mount(resolvers.MountOptions{UI: frontend.HandlerFromEnv(os.Getenv),
			Hub: []live.Option{live.WithOptions(live.Options{CountsInterval: 100 * time.Millisecond, MemberPoll: time.Second,
				SampleEvery: time.Second})}}),
	})
	ctx := context.Background()
	a := apply.StoreApplier{Store: st.Store, Actor: "admin"}
	docs, err := d.docs(false)
	require.NoError(t, err)
	require.NoError(t, apply.All(ctx, a, docs), "the demo's fixtures apply")
	for _, kind := range d.fast {
		require.NoError(t, a.ApplyProviderConfig(ctx, apply.ProviderConfig{Kind: kind, Name: "default", IsDefault: true,
			Spec: json.RawMessage(d.leafSpec)}))
	}
	if d.extra != nil {
		d.extra(t, a)
	}
	st.StartWorker(apptest.Worker{Options: worker.Options{MaxParallel: 32}, Providers: d.providers(st)})
	samples, err := d.docs(true)
	require.NoError(t, err)
	for _, doc := range samples {
		if doc.Type == apply.TypeResource {
			require.NoError(t, apply.One(ctx, a, doc), doc.Path)
		}
	}
	for _, r := range d.settled {
		st.WaitSubtree(r.kind, r.name, 180*time.Second, apptest.AllIn(resource.PhaseReady))
	}

	b := newBrowser(t, st.APIURL())
	b.openPage("/", `document.querySelector('[data-testid=chart-queue] canvas') !== null && document.querySelector('[data-testid=chart-phases] canvas') !== null`)
	b.demoShot(d.name, "summary")
	b.openPage("/graph?root="+url.QueryEscape(d.root.String()), `document.querySelectorAll('[data-testid=graph] .gnode').length > 1`)
	b.waitFor(`document.querySelector('.react-flow__viewport')?.style.transform.includes('scale')`, 10*time.Second)
	b.demoShot(d.name, "graph")
	b.openPage("/resources?sel="+url.QueryEscape(d.root.String()), `document.querySelector('[data-testid=subtree-ready]') !== null`)
	b.waitFor(`(document.querySelector('[data-section=Subtree]').scrollIntoView({block: 'start'}), true)`, 5*time.Second)
	b.demoShot(d.name, "detail")
	b.noExceptions()
}

// demoShot saves the viewport as <name>.png for a demo: into
// examples/<demo>/screenshots/ with CONVERGE_UPDATE_SCREENSHOTS=1 (scaled
// down until it fits maxDemoShot), else into .artifacts/screenshots/.
func (b *browser) demoShot(demoName, name string) {
	b.t.Helper()
	if os.Getenv("CONVERGE_UPDATE_SCREENSHOTS") != "1" {
		b.shot("demo-" + demoName + "-" + name)
		return
	}
	w, h := eval[float64](b, `window.innerWidth`), eval[float64](b, `window.innerHeight`)
	var buf []byte
	for _, scale := range []float64{0.75, 0.6, 0.5} {
		res, err := chromedp.Call(b.ctx, page.CaptureScreenshot, page.CaptureScreenshotParams{Format: page.CaptureScreenshotFormatPng,
			Clip: &page.Viewport{Width: w, Height: h, Scale: scale}})
		require.NoError(b.t, err)
		if buf = res.Data; len(buf) <= maxDemoShot {
			break
		}
	}
	require.LessOrEqual(b.t, len(buf), maxDemoShot, "%s/%s: even at half scale", demoName, name)
	p := filepath.Join(filepath.Dir(b.dir), "..", "examples", demoName, "screenshots", name+".png")
	require.NoError(b.t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(b.t, os.WriteFile(p, buf, 0o644))
	b.t.Logf("screenshot: %s (%s)", filepath.Clean(p), fmt.Sprintf("%d KB", len(buf)>>10))
}
