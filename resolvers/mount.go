package resolvers

import (
	"net/http"

	"github.com/converge-run/converge/core/api"
	"github.com/converge-run/converge/core/app"
	"github.com/converge-run/converge/core/auth"
	"github.com/converge-run/converge/core/cluster"
	"github.com/converge-run/converge/core/live"
)

// MountOptions shape the GraphQL mount.
type MountOptions struct {
	// Limits bound every request; zero fields take their defaults
	// (cmd/converge reads them with api.LimitsFromEnv).
	Limits api.Limits
	// UI, when set, serves every path the API does not (the dashboard and
	// GraphiQL).
	UI http.Handler
	// Hub tunes the subscription hub (tests shorten its cadences).
	Hub []live.Option
	// OnHub, when set, is handed the hub (tests count its subscribers).
	OnHub func(*live.Hub)
}

// Mount is the GraphQL API as a process serves it: a subscription hub on
// the process's listener (run as one of its duties), bearer tokens from
// API_TOKENS_FILE (re-read every TLS_RELOAD_INTERVAL; none of them also in
// WORKER_TOKENS_FILE or MESH_TOKENS_FILE), the schema over the process's store, and the handler on
// /graphql, /graphql/ and /. cmd/converge and the test stacks mount this
// same function.
func Mount(o MountOptions) app.Mount {
	return func(mux *http.ServeMux, p *app.Process) error {
		hopts := append([]live.Option{live.WithPrimary(p.Primary), live.WithOutage(p.Outage)}, o.Hub...)
		hopts = append(hopts, live.WithDefaultLiveness(3*p.Config.HeartbeatEvery)) // the fleet's window
		hub := live.NewHub(p.Listener, p.Read, p.Log, hopts...)
		p.AddDuty(hub)
		if o.OnHub != nil {
			o.OnHub(hub)
		}
		tokens, err := auth.LoadTokens(p.Config.APITokensFile, p.Config.TLSReload, p.Log,
			auth.TokenFile{Setting: "WORKER_TOKENS_FILE", Path: p.Config.WorkerTokens},
			auth.TokenFile{Setting: "MESH_TOKENS_FILE", Path: p.Config.MeshTokens})
		if err != nil {
			return err
		}
		if tokens != nil {
			p.AddDuty(tokens) // re-read every TLS_RELOAD_INTERVAL
		}
		certs := p.Config.APIIdentities()
		schema := NewSchema(Deps{Store: p.Store, Hub: hub, Version: p.Config.Version,
			AuthRequired: tokens != nil || certs.Set(), LoaderWait: o.Limits.LoaderWait,
			Control: &cluster.Controller{Store: p.Members, Log: p.Log}, Liveness: 3 * p.Config.HeartbeatEvery})
		h := api.NewHandler(api.Deps{Schema: schema, Log: p.Log, Tokens: tokens, Certificates: certs,
			ClientCerts: p.ClientCerts, Limits: o.Limits, UI: o.UI})
		p.OnDrain(h.Drain) // the hub stops with the duties: close its websockets, refuse new ones
		mux.Handle("/graphql", h)
		mux.Handle("/graphql/", h)
		mux.Handle("/", h)
		return nil
	}
}
