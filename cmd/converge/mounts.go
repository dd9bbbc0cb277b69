package main

import (
	"fmt"
	"net/http"
	"os"

	"github.com/converge-run/converge/core/api"
	"github.com/converge-run/converge/core/app"
	"github.com/converge-run/converge/core/auth"
	"github.com/converge-run/converge/core/live"
	"github.com/converge-run/converge/frontend"
)

// mounts lists the handlers the API listener serves beyond probes, metrics
// and the broker: GraphQL (with its subscription hub), GraphiQL and the
// dashboard.
func mounts() []app.Mount { return []app.Mount{mountAPI} }

func mountAPI(mux *http.ServeMux, p *app.Process) error {
	hub := live.NewHub(p.Listener, p.Read, p.Log, live.WithPrimary(p.Primary))
	p.AddDuty(hub)
	tokens, err := auth.LoadTokens(p.Config.APITokensFile)
	if err != nil {
		return fmt.Errorf("API_TOKENS_FILE: %w", err)
	}
	limits, err := api.LimitsFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	h := api.NewHandler(api.Deps{Store: p.Store, Hub: hub, Log: p.Log, Tokens: tokens, Limits: limits,
		Version: p.Config.Version, UI: frontend.HandlerFromEnv(os.Getenv)})
	mux.Handle("/graphql", h)
	mux.Handle("/graphql/", h)
	mux.Handle("/", h)
	return nil
}
