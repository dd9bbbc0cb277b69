// Package browsertest drives the dashboard in a real browser: Debian's
// Chromium (headless, through chromedp) against a real converge process
// (GraphQL API, subscription hub and the embedded dashboard) with a worker
// and a private Postgres. The tests skip, naming the `chromium` package,
// when no Chromium is installed — unless CONVERGE_REQUIRE_BROWSER=1, which
// CI sets after installing it. Screenshots go to .artifacts/screenshots/.
package browsertest
