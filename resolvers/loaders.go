package resolvers

import (
	"context"
	"errors"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/google/uuid"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vikstrous/dataloadgen"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
)

// loaders batch the nested reads of one response: every Load made while a
// response is resolved within Wait of the first is answered by one store
// call. A fresh set is made per response (per event, for subscriptions), so
// nothing is cached across responses.
type loaders struct {
	store *store.Store
	// primary is the store the explains, blockers, specs and usages read
	// from; explainMany and usagesOf are their reads (the loaders' and a
	// prefetch's).
	primary     *store.Store
	explainMany func(context.Context, []uuid.UUID) (map[uuid.UUID][]store.Wait, error)
	usagesOf    func(context.Context, []manifest.KindVersion) (map[manifest.KindVersion]store.KindUsage, error)
	resources   *dataloadgen.Loader[uuid.UUID, resource.Resource]
	children    *dataloadgen.Loader[store.ChildrenKey, store.Page]
	conditions  *dataloadgen.Loader[uuid.UUID, []resource.Condition]
	deps        *dataloadgen.Loader[store.DependenciesKey, []store.Dependency]
	dependents  *dataloadgen.Loader[store.DependentsKey, []resource.Resource]
	configs     *dataloadgen.Loader[store.ConfigKey, *store.ProviderConfig]
	kinds       *dataloadgen.Loader[manifest.KindVersion, *store.Kind]
	operations  *dataloadgen.Loader[store.OperationsKey, []resource.Operation]
	events      *dataloadgen.Loader[store.EventsKey, store.EventPage]
	// explains and blockers read from the primary, as the scheduler's own
	// state: Resource.waitingOn's gates and the resources holding them.
	explains *dataloadgen.Loader[uuid.UUID, []store.Wait]
	blockers *dataloadgen.Loader[uuid.UUID, resource.Resource]
	// specs reads Resource.specHistory from the primary (a rollback's
	// generation is seen at once).
	specs *dataloadgen.Loader[store.SpecHistoryKey, []store.SpecRevision]
	// usages reads Kind.usage from the primary (liveness reads pg_locks).
	usages *dataloadgen.Loader[manifest.KindVersion, store.KindUsage]
}

func newLoaders(st, primary *store.Store, liveness, wait time.Duration) *loaders {
	o := []dataloadgen.Option{dataloadgen.WithWait(wait)}
	explain := func(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID][]store.Wait, error) {
		return primary.ExplainMany(ctx, ids, liveness)
	}
	usage := func(ctx context.Context, kvs []manifest.KindVersion) (map[manifest.KindVersion]store.KindUsage, error) {
		return primary.KindUsages(ctx, kvs, liveness)
	}
	return &loaders{
		store:       st,
		primary:     primary,
		explainMany: explain,
		usagesOf:    usage,
		resources:   dataloadgen.NewMappedLoader(st.ResourcesByIDs, o...),
		children:    dataloadgen.NewMappedLoader(st.ChildrenPages, o...),
		conditions:  dataloadgen.NewMappedLoader(st.StoredConditionsFor, o...),
		deps:        dataloadgen.NewMappedLoader(st.DependenciesFor, o...),
		dependents:  dataloadgen.NewMappedLoader(st.DependentsFor, o...),
		configs:     dataloadgen.NewMappedLoader(pointers(st.ProviderConfigsFor), o...),
		kinds:       dataloadgen.NewMappedLoader(pointers(st.KindsFor), o...),
		operations:  dataloadgen.NewMappedLoader(st.OperationsFor, o...),
		events:      dataloadgen.NewMappedLoader(st.EventsFor, o...),
		explains:    dataloadgen.NewMappedLoader(explain, o...),
		blockers:    dataloadgen.NewMappedLoader(primary.ResourcesByIDs, o...),
		specs:       dataloadgen.NewMappedLoader(primary.SpecHistoriesFor, o...),
		usages:      dataloadgen.NewMappedLoader(usage, o...),
	}
}

// pointers adapts a batch read to pointer values, so a prefetch can prime
// "none" (nil) for a key without a value.
func pointers[K comparable, V any](fetch func(context.Context, []K) (map[K]V, error)) func(context.Context, []K) (map[K]*V, error) {
	return func(ctx context.Context, keys []K) (map[K]*V, error) {
		m, err := fetch(ctx, keys)
		if err != nil {
			return nil, err
		}
		out := make(map[K]*V, len(m))
		for k, v := range m {
			out[k] = &v
		}
		return out, nil
	}
}

type loadersKey struct{}

func loadersFrom(ctx context.Context) *loaders {
	l, _ := ctx.Value(loadersKey{}).(*loaders)
	return l
}

// found maps a loader miss to (zero, false, nil).
func found[T any](v T, err error) (T, bool, error) {
	if errors.Is(err, dataloadgen.ErrNotFound) {
		var zero T
		return zero, false, nil
	}
	return v, err == nil, err
}

// loaderExtension gives each response its own loaders. A mutation's loaders
// read from the primary (read-your-writes); everything else from the read
// pool.
type loaderExtension struct{ r *Resolver }

var (
	_ graphql.HandlerExtension    = loaderExtension{}
	_ graphql.ResponseInterceptor = loaderExtension{}
)

func (loaderExtension) ExtensionName() string                   { return "ConvergeLoaders" }
func (loaderExtension) Validate(graphql.ExecutableSchema) error { return nil }

func (e loaderExtension) InterceptResponse(ctx context.Context, next graphql.ResponseHandler) *graphql.Response {
	st := e.r.store
	if graphql.HasOperationContext(ctx) && isMutation(graphql.GetOperationContext(ctx)) {
		st = e.r.primary
	}
	return next(context.WithValue(ctx, loadersKey{}, newLoaders(st, e.r.primary, e.r.liveness, e.r.loaderWait)))
}

// reads is the store a nested field reads through outside the loaders: the
// primary in a mutation's response (read-your-writes), else the read pool.
func (r *Resolver) reads(ctx context.Context) *store.Store {
	if graphql.HasOperationContext(ctx) && isMutation(graphql.GetOperationContext(ctx)) {
		return r.primary
	}
	return r.store
}

func isMutation(oc *graphql.OperationContext) bool {
	return oc != nil && oc.Operation != nil && oc.Operation.Operation == ast.Mutation
}
