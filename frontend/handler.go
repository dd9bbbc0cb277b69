package frontend

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
)

// The security headers of the dashboard's HTML. GraphiQL (Monaco) gets
// only the framing rule.
const (
	dashboardCSP = "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'"
	graphiqlCSP  = "frame-ancestors 'none'"
	immutable    = "public, max-age=31536000, immutable"
)

// Handler serves the dashboard and GraphiQL: from the embedded build, or,
// when dir is not empty (CONVERGE_UI_DIR), from that folder on disk, read
// on every request so a `vite build --watch` shows up on reload.
func Handler(dir string) http.Handler {
	if dir != "" {
		return &handler{fsys: os.DirFS(dir), dev: true, dir: dir}
	}
	return &handler{fsys: Dist()}
}

// HandlerFromEnv is Handler(getenv("CONVERGE_UI_DIR")).
func HandlerFromEnv(getenv func(string) string) http.Handler {
	return Handler(getenv("CONVERGE_UI_DIR"))
}

type handler struct {
	fsys  fs.FS
	dev   bool
	dir   string
	files sync.Map // name → *file (embedded build only)
}

// file is one served file, read (and compressed) once.
type file struct {
	data  []byte
	etag  string
	ctype string

	gzOnce sync.Once
	gz     []byte // nil when compression does not pay
	gzEtag string // the gzipped body's ETag
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	p := path.Clean("/" + r.URL.Path)
	switch {
	case p == "/graphql" || strings.HasPrefix(p, "/graphql/"):
		http.NotFound(w, r)
	case p == "/graphiql":
		h.serve(w, r, "graphiql.html", "no-cache")
	case strings.HasPrefix(p, "/assets/"):
		h.serve(w, r, strings.TrimPrefix(p, "/"), immutable)
	case p == "/" || p == "/index.html":
		h.serve(w, r, "index.html", "no-cache")
	default:
		name := strings.TrimPrefix(p, "/")
		if info, err := fs.Stat(h.fsys, name); err == nil && !info.IsDir() {
			h.serve(w, r, name, "no-cache")
			return
		}
		if path.Ext(p) != "" {
			// A missing file, not a dashboard route.
			http.NotFound(w, r)
			return
		}
		h.serve(w, r, "index.html", "no-cache")
	}
}

func (h *handler) serve(w http.ResponseWriter, r *http.Request, name, cache string) {
	f, err := h.load(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if h.dev && (name == "index.html" || name == "graphiql.html") {
				http.Error(w, "CONVERGE_UI_DIR="+h.dir+" has no "+name+": build the dashboard (npm run build in frontend/)", http.StatusServiceUnavailable)
				return
			}
			http.NotFound(w, r)
			return
		}
		http.Error(w, "read "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", f.ctype)
	hd.Set("Cache-Control", cache)
	hd.Set("X-Content-Type-Options", "nosniff")
	switch name {
	case "index.html":
		hd.Set("Content-Security-Policy", dashboardCSP)
		hd.Set("Referrer-Policy", "same-origin")
	case "graphiql.html":
		hd.Set("Content-Security-Policy", graphiqlCSP)
		hd.Set("Referrer-Policy", "same-origin")
	}
	// Each encoding is its own representation with its own strong ETag, so
	// a cache never has a gzipped body confirmed as the plain one.
	body, etag := f.data, f.etag
	if gz := f.gzipped(); gz != nil {
		hd.Add("Vary", "Accept-Encoding")
		if acceptsGzip(r.Header.Get("Accept-Encoding")) {
			hd.Set("Content-Encoding", "gzip")
			body, etag = gz, f.gzEtag
		}
	}
	hd.Set("ETag", etag)
	if match := r.Header.Get("If-None-Match"); match != "" && etagMatches(match, etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(body)
}

// load reads a file: once for the embedded build, every time from disk.
func (h *handler) load(name string) (*file, error) {
	if !h.dev {
		if f, ok := h.files.Load(name); ok {
			return f.(*file), nil
		}
	}
	data, err := fs.ReadFile(h.fsys, name)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	f := &file{data: data, etag: `"` + hex.EncodeToString(sum[:12]) + `"`, ctype: contentType(name)}
	if h.dev {
		return f, nil
	}
	actual, _ := h.files.LoadOrStore(name, f)
	return actual.(*file), nil
}

// gzipped is the compressed body, or nil for small or already-compressed files.
func (f *file) gzipped() []byte {
	f.gzOnce.Do(func() {
		if len(f.data) < 1024 || !compressible(f.ctype) {
			return
		}
		var b bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
		_, _ = zw.Write(f.data)
		_ = zw.Close()
		if b.Len() < len(f.data)*9/10 {
			f.gz = b.Bytes()
			f.gzEtag = strings.TrimSuffix(f.etag, `"`) + `-gz"`
		}
	})
	return f.gz
}

func contentType(name string) string {
	switch path.Ext(name) {
	case ".js", ".mjs":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".html":
		return "text/html; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	case ".json", ".map":
		return "application/json"
	case ".ttf":
		return "font/ttf"
	case ".woff2":
		return "font/woff2"
	}
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		return t
	}
	return "application/octet-stream"
}

func compressible(ctype string) bool {
	return strings.HasPrefix(ctype, "text/") || strings.HasPrefix(ctype, "application/json") ||
		ctype == "image/svg+xml" || ctype == "font/ttf"
}

// acceptsGzip reads an Accept-Encoding header (gzip, not refused with q=0).
func acceptsGzip(header string) bool {
	for _, part := range strings.Split(header, ",") {
		enc, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(enc), "gzip") && strings.TrimSpace(enc) != "*" {
			continue
		}
		q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
		return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
	}
	return false
}

func etagMatches(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == etag {
			return true
		}
	}
	return false
}
