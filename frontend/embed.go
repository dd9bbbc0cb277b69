// Package frontend serves the converge dashboard and its GraphiQL page: the
// files `vite build` writes to dist/ (committed, and embedded in the binary
// here), or — for development — the same files read from a folder on disk.
//
// The handler answers only GET and HEAD:
//
//   - /assets/* are content-hashed: served with a year-long immutable cache,
//     and a missing one is a 404 (never the SPA, so a stale page fails loudly);
//   - /graphiql is the GraphiQL page (graphiql.html);
//   - other files of dist/ (favicon.svg) are served as they are;
//   - every other path is the dashboard's index.html (the SPA fallback: the
//     dashboard routes /resources, /kinds, … itself), never cached so a new
//     build is picked up at once. Paths under /graphql are never the SPA.
//
// Text files are served gzip-compressed when the client accepts it
// (compressed once, on first use), with a strong ETag per encoding.
//
// Wiring: the GraphQL handler serves every path it does not own through
// api.Deps.UI, so
//
//	api.NewHandler(api.Deps{…, UI: frontend.Handler(os.Getenv("CONVERGE_UI_DIR"))})
//
// serves the dashboard at / and GraphiQL at /graphiql. Mounted on its own,
// mux.Handle("/", frontend.Handler(dir)) does the same next to the API.
package frontend

import (
	"embed"
	"io/fs"
)

//go:embed all:dist
var dist embed.FS

// Dist is the embedded build (the files of dist/).
func Dist() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // dist is embedded at build time: cannot fail
	}
	return sub
}
