package frontend

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

func testHandler() http.Handler {
	big := strings.Repeat("console.log('converge');\n", 200)
	return &handler{fsys: fstest.MapFS{
		"index.html":          {Data: []byte("<!doctype html><title>dash</title>")},
		"graphiql.html":       {Data: []byte("<!doctype html><title>graphiql</title>")},
		"favicon.svg":         {Data: []byte("<svg/>")},
		"assets/app-abc12.js": {Data: []byte(big)},
		"assets/tiny-x1.css":  {Data: []byte("a{}")},
	}}
}

// response is what a test reads of an answer: its status, headers and body.
type response struct {
	StatusCode int
	Header     http.Header
	Body       string
}

func get(t *testing.T, h http.Handler, method, target string, hdr ...string) response {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), method, target, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	res := rec.Result()
	defer func() { _ = res.Body.Close() }()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return response{StatusCode: res.StatusCode, Header: res.Header, Body: string(b)}
}

func TestHandler_Routes(t *testing.T) {
	t.Parallel()
	h := testHandler()
	cases := map[string]struct {
		reason string
		target string
		status int
		body   string
		cache  string
	}{
		"Root":          {"the dashboard", "/", 200, "dash", "no-cache"},
		"SPARoute":      {"a dashboard route falls back to index.html", "/resources?kind=vpc&sel=vpc/a", 200, "dash", "no-cache"},
		"DeepSPARoute":  {"nested routes too", "/kinds/extra/segments", 200, "dash", "no-cache"},
		"GraphiQL":      {"the GraphiQL page", "/graphiql", 200, "graphiql", "no-cache"},
		"GraphiQLSlash": {"with a trailing slash", "/graphiql/", 200, "graphiql", "no-cache"},
		"HashedAsset":   {"hashed assets are immutable", "/assets/tiny-x1.css", 200, "a{}", immutable},
		"StaticFile":    {"other built files are served as they are", "/favicon.svg", 200, "<svg/>", "no-cache"},
		"MissingAsset":  {"a missing asset is a 404, not the SPA", "/assets/gone-123.js", 404, "", ""},
		"MissingFile":   {"a missing file with an extension is a 404", "/robots.txt", 404, "", ""},
		"GraphQL":       {"API paths never fall back to the SPA", "/graphql", 404, "", ""},
		"GraphQLSub":    {"nor their subpaths", "/graphql/schema.graphql", 404, "", ""},
		"Traversal":     {"dot-dot cannot leave the build", "/assets/../../go.mod", 404, "", ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := get(t, h, http.MethodGet, tc.target)
			require.Equal(t, tc.status, r.StatusCode, tc.reason)
			if tc.status != 200 {
				return
			}
			require.Contains(t, r.Body, tc.body, tc.reason)
			require.Equal(t, tc.cache, r.Header.Get("Cache-Control"), tc.reason)
			require.Equal(t, "nosniff", r.Header.Get("X-Content-Type-Options"))
		})
	}
}

func TestHandler_HeadersAndMethods(t *testing.T) {
	t.Parallel()
	h := testHandler()

	r := get(t, h, http.MethodGet, "/")
	require.Equal(t, "text/html; charset=utf-8", r.Header.Get("Content-Type"))
	// Same-origin requests and websockets only: CSP Level 3's 'self' also
	// matches ws: and wss: on the page's own host and port (the browser test
	// connects the dashboard's websocket under this policy).
	csp := r.Header.Get("Content-Security-Policy")
	require.Contains(t, csp, "connect-src 'self';")
	require.NotContains(t, csp, "ws:")
	require.NotContains(t, csp, "wss:")

	r = get(t, h, http.MethodPost, "/")
	require.Equal(t, http.StatusMethodNotAllowed, r.StatusCode)
	require.Equal(t, "GET, HEAD", r.Header.Get("Allow"))

	r = get(t, h, http.MethodHead, "/assets/tiny-x1.css")
	require.Equal(t, 200, r.StatusCode)
	require.Equal(t, "3", r.Header.Get("Content-Length"))
	require.Empty(t, r.Body)
}

func TestHandler_GzipAndETags(t *testing.T) {
	t.Parallel()
	h := testHandler()

	plain := get(t, h, http.MethodGet, "/assets/app-abc12.js")
	require.Empty(t, plain.Header.Get("Content-Encoding"))
	require.Equal(t, "Accept-Encoding", plain.Header.Get("Vary"))
	want := plain.Body

	gz := get(t, h, http.MethodGet, "/assets/app-abc12.js", "Accept-Encoding", "br, gzip;q=0.8")
	require.Equal(t, "gzip", gz.Header.Get("Content-Encoding"))
	zr, err := gzip.NewReader(bytes.NewReader([]byte(gz.Body)))
	require.NoError(t, err)
	got, err := io.ReadAll(zr)
	require.NoError(t, err)
	require.Equal(t, want, string(got))

	refused := get(t, h, http.MethodGet, "/assets/app-abc12.js", "Accept-Encoding", "gzip;q=0")
	require.Empty(t, refused.Header.Get("Content-Encoding"))

	small := get(t, h, http.MethodGet, "/assets/tiny-x1.css", "Accept-Encoding", "gzip")
	require.Empty(t, small.Header.Get("Content-Encoding"), "small files are not worth compressing")

	etag := plain.Header.Get("ETag")
	require.NotEmpty(t, etag)
	nm := get(t, h, http.MethodGet, "/assets/app-abc12.js", "If-None-Match", etag)
	require.Equal(t, http.StatusNotModified, nm.StatusCode)
	require.Empty(t, nm.Body)

	// The two encodings are two representations, each with its own strong
	// ETag: a cache holding one must not have it confirmed as the other.
	gzTag := gz.Header.Get("ETag")
	require.NotEmpty(t, gzTag)
	require.NotEqual(t, etag, gzTag, "the gzipped body has the plain body's ETag")
	nm = get(t, h, http.MethodGet, "/assets/app-abc12.js", "Accept-Encoding", "gzip", "If-None-Match", gzTag)
	require.Equal(t, http.StatusNotModified, nm.StatusCode)
	require.Equal(t, gzTag, nm.Header.Get("ETag"))
	stale := get(t, h, http.MethodGet, "/assets/app-abc12.js", "If-None-Match", gzTag)
	require.Equal(t, http.StatusOK, stale.StatusCode, "the gzip ETag confirmed the plain body")
	require.Equal(t, want, stale.Body)
	stale = get(t, h, http.MethodGet, "/assets/app-abc12.js", "Accept-Encoding", "gzip", "If-None-Match", etag)
	require.Equal(t, http.StatusOK, stale.StatusCode, "the plain ETag confirmed the gzipped body")
}

func TestHandler_DevDirReadsEveryRequest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := HandlerFromEnv(func(k string) string {
		if k == "CONVERGE_UI_DIR" {
			return dir
		}
		return ""
	})
	r := get(t, h, http.MethodGet, "/")
	require.Equal(t, http.StatusServiceUnavailable, r.StatusCode)
	require.Contains(t, r.Body, "npm run build")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "index.html"), []byte("v1"), 0o644))
	require.Equal(t, "v1", get(t, h, http.MethodGet, "/cluster").Body)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "index.html"), []byte("v2"), 0o644))
	require.Equal(t, "v2", get(t, h, http.MethodGet, "/cluster").Body)
}

// TestEmbeddedBuild checks the committed dist/: both pages exist and every
// asset they reference is embedded and served immutable.
func TestEmbeddedBuild(t *testing.T) {
	t.Parallel()
	h := Handler("")
	ref := regexp.MustCompile(`(?:src|href)="(/assets/[^"]+)"`)
	for _, page := range []string{"/", "/graphiql"} {
		r := get(t, h, http.MethodGet, page)
		require.Equal(t, 200, r.StatusCode, page)
		html := r.Body
		refs := ref.FindAllStringSubmatch(html, -1)
		require.NotEmpty(t, refs, "%s references no assets", page)
		for _, m := range refs {
			a := get(t, h, http.MethodGet, m[1])
			require.Equal(t, 200, a.StatusCode, m[1])
			require.Equal(t, immutable, a.Header.Get("Cache-Control"), m[1])
		}
	}
}
