package main

import (
	"github.com/converge-run/converge/core/api"
	"github.com/converge-run/converge/core/app"
	"github.com/converge-run/converge/frontend"
	"github.com/converge-run/converge/resolvers"
)

// mounts lists the handlers the API listener serves beyond probes, metrics
// and the broker: GraphQL (with its subscription hub), GraphiQL and the
// dashboard. Here the resolvers and the generated schema are assembled and
// handed down to core.
func mounts(getenv func(string) string) ([]app.Mount, error) {
	limits, err := api.LimitsFromEnv(getenv)
	if err != nil {
		return nil, err
	}
	return []app.Mount{resolvers.Mount(resolvers.MountOptions{Limits: limits, UI: frontend.HandlerFromEnv(getenv)})}, nil
}
