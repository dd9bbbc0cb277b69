package resolvers

import (
	"encoding/json"

	"github.com/99designs/gqlgen/graphql"

	"github.com/converge-run/converge/core/api"
	"github.com/converge-run/converge/graph"
	"github.com/converge-run/converge/graph/model"
)

// NewSchema is the served GraphQL schema over core: gqlgen's executor with
// these resolvers, list fields weighted by their page size, and the
// extension that gives each response its own dataloaders. core/api's
// handler executes it.
func NewSchema(d Deps) api.Schema {
	root := New(d)
	cfg := graph.Config{Resolvers: root}
	setComplexity(&cfg.Complexity)
	return api.Schema{
		Executable: graph.NewExecutableSchema(cfg),
		Extensions: []graphql.HandlerExtension{root.Extension()},
	}
}

// setComplexity makes list fields cost their page size times their
// children, so a nested page cannot multiply unnoticed.
func setComplexity(c *graph.ComplexityRoot) {
	size := func(first *int, def int) int {
		if first == nil || *first <= 0 {
			return def
		}
		return *first
	}
	c.Query.Resources = func(child int, _ *string, _ []model.Phase, _ json.RawMessage, _ *string, first *int, _ *string) int {
		return 1 + size(first, 50)*child
	}
	c.Query.ProviderConfigs = func(child int, _ *string, _ *string, _ *bool, first *int, _ *string) int {
		return 1 + size(first, 50)*child
	}
	c.Resource.Children = func(child int, _ []model.Phase, first *int, _ *string) int {
		return 1 + size(first, 50)*child
	}
	c.Resource.Dependencies = func(child int, first *int) int { return 1 + size(first, 100)*child }
	c.Resource.Dependents = func(child int, first *int) int { return 1 + size(first, 100)*child }
	c.Resource.Operations = func(child int, first *int) int { return 1 + size(first, 20)*child }
	c.Resource.History = func(child int, first *int, _ *string) int { return 10 + size(first, 50)*child }
	// Explain and undo, a resource each: its kept generations (full specs),
	// and its explanation — a few statements (explain_resource, the blockers'
	// rows) and a handful of gates of up to 20 blockers each.
	c.Resource.SpecHistory = func(child int, first *int) int { return 1 + size(first, 20)*child }
	c.Resource.SpecDiff = func(child int, _ int, _ *int) int { return 10 + child }
	c.Resource.WaitingOn = func(child int) int { return 50 + 4*child }
	c.Wait.Blockers = func(child int) int { return 1 + 20*child }
}
