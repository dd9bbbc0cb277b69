package browsertest

import (
	"encoding/json"
	"os"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/profiler"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// startProfile starts the V8 CPU profiler of the tab when
// CONVERGE_BROWSER_PROFILE names a file; the returned stop writes the
// profile there (a .cpuprofile that Chromium's DevTools opens). Without it
// both do nothing.
func (b *browser) startProfile() (stop func()) {
	path := os.Getenv("CONVERGE_BROWSER_PROFILE")
	if path == "" {
		return func() {}
	}
	_, err := chromedp.Call(b.ctx, profiler.Enable, cdp.Empty{})
	require.NoError(b.t, err)
	_, err = chromedp.Call(b.ctx, profiler.SetSamplingInterval, profiler.SetSamplingIntervalParams{Interval: 250})
	require.NoError(b.t, err)
	_, err = chromedp.Call(b.ctx, profiler.Start, cdp.Empty{})
	require.NoError(b.t, err)
	return func() {
		res, err := chromedp.Call(b.ctx, profiler.Stop, cdp.Empty{})
		require.NoError(b.t, err)
		buf, err := json.Marshal(res.Profile)
		require.NoError(b.t, err)
		require.NoError(b.t, os.WriteFile(path, buf, 0o644))
		b.t.Logf("the tab's CPU profile: %s", path)
	}
}
