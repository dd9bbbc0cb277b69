// Package resolvers implements the GraphQL schema (graph/) over core: each
// resolver parses its arguments, makes one call into core (the store, the
// membership store or the subscription hub) and maps the result. Nested
// fields load through per-response dataloaders (loaders.go), so a page of
// resources with its nested fields costs a constant number of statements.
//
// NewSchema assembles these resolvers and the generated executor (graph/)
// into the api.Schema that core/api's handler executes; Mount is the whole
// GraphQL wiring of a process (hub, tokens, schema, handler), mounted by
// cmd/converge and by the test stacks alike. core never imports this
// package or graph/.
package resolvers

import (
	"time"

	"github.com/99designs/gqlgen/graphql"

	"github.com/converge-run/converge/core/cluster"
	"github.com/converge-run/converge/core/live"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/graph"
)

// Deps are the resolvers' collaborators.
type Deps struct {
	// Store is the API's store (reads from the read pool, writes to the
	// primary).
	Store *store.Store
	// Hub serves the subscriptions and the cluster member list.
	Hub *live.Hub
	// Version is the build version the version query reports.
	Version string
	// AuthRequired says whether the API checks bearer tokens.
	AuthRequired bool
	// LoaderWait is how long a dataloader collects keys before it fetches
	// (default 2ms).
	LoaderWait time.Duration
	// Control records the drain and kill mutations (nil: they fail).
	Control *cluster.Controller
	// Liveness is the fleet's liveness window (3 × MEMBER_HEARTBEAT_EVERY):
	// a broker whose heartbeat is older serves no kind, for
	// Resource.waitingOn's NO_WORKER and Kind.usage.servedBy. 0: the store's
	// default (store.DefaultLiveness).
	Liveness time.Duration
}

// Resolver is the root resolver.
type Resolver struct {
	store        *store.Store
	primary      *store.Store
	hub          *live.Hub
	version      string
	authRequired bool
	loaderWait   time.Duration
	control      *cluster.Controller
	liveness     time.Duration
}

// New returns the root resolver.
func New(d Deps) *Resolver {
	r := &Resolver{store: d.Store, primary: d.Store.PrimaryReads(), hub: d.Hub, version: d.Version,
		authRequired: d.AuthRequired, loaderWait: d.LoaderWait, control: d.Control, liveness: d.Liveness}
	if r.loaderWait <= 0 {
		r.loaderWait = 2 * time.Millisecond
	}
	return r
}

// Extension is the gqlgen handler extension that gives each response its
// own dataloaders; add it to the server.
func (r *Resolver) Extension() graphql.HandlerExtension { return loaderExtension{r: r} }

// Query returns the query resolver.
func (r *Resolver) Query() graph.QueryResolver { return queryResolver{r} }

// Mutation returns the mutation resolver.
func (r *Resolver) Mutation() graph.MutationResolver { return mutationResolver{r} }

// Subscription returns the subscription resolver.
func (r *Resolver) Subscription() graph.SubscriptionResolver { return subscriptionResolver{r} }

// Resource returns the resource field resolver.
func (r *Resolver) Resource() graph.ResourceResolver { return resourceResolver{r} }

// Operation returns the operation field resolver.
func (r *Resolver) Operation() graph.OperationResolver { return operationResolver{r} }

// ProviderConfig returns the provider config field resolver.
func (r *Resolver) ProviderConfig() graph.ProviderConfigResolver { return providerConfigResolver{r} }

// Kind returns the Kind field resolvers.
func (r *Resolver) Kind() graph.KindResolver { return kindResolver{r} }

type (
	queryResolver          struct{ *Resolver }
	mutationResolver       struct{ *Resolver }
	subscriptionResolver   struct{ *Resolver }
	resourceResolver       struct{ *Resolver }
	operationResolver      struct{ *Resolver }
	providerConfigResolver struct{ *Resolver }
	kindResolver           struct{ *Resolver }
)
