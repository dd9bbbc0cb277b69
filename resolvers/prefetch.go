package resolvers

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/99designs/gqlgen/graphql"
	"github.com/google/uuid"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vikstrous/dataloadgen"
	"golang.org/x/sync/errgroup"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/graph/model"
)

// prefetch makes a page's nested fields cost one statement each, whatever
// the scheduling: before a list resolver returns its rows, it looks ahead at
// the selection on them, loads every nested field it asks for, for all rows
// at once (one store call per field, concurrently, level by level) and
// primes the response's loaders, so the field resolvers find their values
// in the cache instead of racing a batch window. Rows reached without a
// prefetch (a single resource, a subscription payload) still batch through
// the loaders.
func prefetch(ctx context.Context, sel ast.SelectionSet, rows []resource.Resource) error {
	l := loadersFrom(ctx)
	if l == nil || len(rows) == 0 || len(sel) == 0 || !graphql.HasOperationContext(ctx) {
		return nil
	}
	p := &prefetchPage{ctx: ctx, l: l, st: l.store, oc: graphql.GetOperationContext(ctx), rows: rows, ids: make([]uuid.UUID, len(rows))}
	for i, r := range rows {
		p.ids[i] = r.ID
	}
	var g errgroup.Group
	fields := graphql.CollectFields(p.oc, sel, []string{"Resource"})
	conditions := slices.ContainsFunc(fields, func(f graphql.CollectedField) bool { return f.Name == "conditions" })
	for _, f := range fields {
		if f.Name == "deadLetter" && conditions {
			continue // the conditions' prefetch holds what deadLetter reads
		}
		if job := p.job(f); job != nil {
			g.Go(job)
		}
	}
	return g.Wait()
}

// prefetchPage is one level of a prefetch: the rows and what loads them.
type prefetchPage struct {
	ctx  context.Context
	l    *loaders
	st   *store.Store
	oc   *graphql.OperationContext
	rows []resource.Resource
	ids  []uuid.UUID
}

// job is the load for one selected field, or nil for a field with none.
func (p *prefetchPage) job(f graphql.CollectedField) func() error {
	args := f.ArgumentMap(p.oc.Variables)
	switch f.Name {
	case "owner", "root":
		return p.related(f, args)
	case "conditions":
		return p.conditions(f, args)
	case "deadLetter":
		return p.deadLetters(f, args)
	case "dependencies":
		return p.dependencies(f, args)
	case "dependents":
		return p.dependents(f, args)
	case "children":
		return p.children(f, args)
	case "providerConfig":
		return p.providerConfigs(f, args)
	case "definition":
		return p.definitions(f, args)
	case "operations":
		return p.operations(f, args)
	case "waitingOn":
		return p.waitingOn(f, args)
	case "specHistory":
		return p.specHistory(f, args)
	case "history":
		return p.history(f, args)
	}
	return nil
}

func (p *prefetchPage) related(f graphql.CollectedField, _ map[string]any) func() error {
	return func() error {
		var want []uuid.UUID
		for _, r := range p.rows {
			if up := r.OwnerID; f.Name == "root" {
				up = r.RootID
				if up != nil {
					want = append(want, *up)
				}
			} else if up != nil {
				want = append(want, *up)
			}
		}
		got, err := p.st.ResourcesByIDs(p.ctx, want)
		if err != nil {
			return err
		}
		list := make([]resource.Resource, 0, len(got))
		for id, r := range got {
			p.l.resources.Prime(id, r)
			list = append(list, r)
		}
		return prefetch(p.ctx, f.Selections, list)
	}
}

func (p *prefetchPage) conditions(_ graphql.CollectedField, _ map[string]any) func() error {
	return func() error {
		_, err := fetchAndPrime(p.ctx, p.l.conditions, p.ids, p.st.StoredConditionsFor)
		return err
	}
}

// deadLetters reads the conditions of the rows that may be a dead letter
// (terminally failed for their live generation), which is all
// Resource.deadLetter reads.
func (p *prefetchPage) deadLetters(_ graphql.CollectedField, _ map[string]any) func() error {
	var ids []uuid.UUID
	for _, r := range p.rows {
		if r.FailureTerminal && r.FailureGen == r.Generation {
			ids = append(ids, r.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	return func() error {
		_, err := fetchAndPrime(p.ctx, p.l.conditions, ids, p.st.StoredConditionsFor)
		return err
	}
}

func (p *prefetchPage) dependencies(f graphql.CollectedField, args map[string]any) func() error {
	n := intArg(args, "first", 100)
	if n < 1 || n > maxNestedPage {
		return nil // the field's resolver refuses it
	}
	return func() error {
		keys := make([]store.DependenciesKey, len(p.ids))
		for i, id := range p.ids {
			keys[i] = store.DependenciesKey{ID: id, Limit: n}
		}
		got, err := fetchAndPrime(p.ctx, p.l.deps, keys, p.st.DependenciesFor)
		if err != nil {
			return err
		}
		var ups []resource.Resource
		for _, k := range keys {
			for _, d := range got[k] {
				ups = append(ups, d.Upstream)
			}
		}
		return prefetch(p.ctx, subSelection(p.oc, f.Selections, "Dependency", "upstream"), ups)
	}
}

func (p *prefetchPage) dependents(f graphql.CollectedField, args map[string]any) func() error {
	n := intArg(args, "first", 100)
	if n < 1 || n > maxNestedPage {
		return nil // the field's resolver refuses it
	}
	return func() error {
		keys := make([]store.DependentsKey, len(p.ids))
		for i, id := range p.ids {
			keys[i] = store.DependentsKey{ID: id, Limit: n}
		}
		got, err := fetchAndPrime(p.ctx, p.l.dependents, keys, p.st.DependentsFor)
		if err != nil {
			return err
		}
		var all []resource.Resource
		for _, k := range keys {
			all = append(all, got[k]...)
		}
		return prefetch(p.ctx, f.Selections, all)
	}
}

func (p *prefetchPage) children(f graphql.CollectedField, args map[string]any) func() error {
	phases, _ := args["phases"].([]any)
	var ps []resource.Phase
	for _, p := range phases {
		if s, ok := p.(string); ok {
			ps = append(ps, fromPhases([]modelPhase{modelPhase(s)})...)
		}
	}
	n, after := intArg(args, "first", 50), stringArg(args, "after")
	if n < 1 || n > maxNestedPage {
		return nil // the field's resolver refuses it
	}
	return func() error {
		keys := make([]store.ChildrenKey, len(p.ids))
		for i, id := range p.ids {
			keys[i] = store.ChildrenKey{OwnerID: id, Phases: store.PhaseKey(ps), Limit: n, After: after}
		}
		got, err := fetchAndPrime(p.ctx, p.l.children, keys, p.st.ChildrenPages)
		if err != nil {
			return err
		}
		var all []resource.Resource
		for _, k := range keys {
			all = append(all, got[k].Items...)
		}
		return prefetch(p.ctx, subSelection(p.oc, f.Selections, "ResourcePage", "items"), all)
	}
}

func (p *prefetchPage) providerConfigs(f graphql.CollectedField, _ map[string]any) func() error {
	return func() error {
		keys := make([]store.ConfigKey, len(p.rows))
		for i, r := range p.rows {
			keys[i] = store.ConfigKey{Kind: r.Kind, Name: r.ProviderConfigRef}
		}
		got, err := p.st.ProviderConfigsFor(p.ctx, keys)
		if err != nil {
			return err
		}
		var owners []uuid.UUID
		for _, k := range keys {
			pc, ok := got[k]
			if !ok {
				p.l.configs.Prime(k, nil)
				continue
			}
			p.l.configs.Prime(k, &pc)
			if pc.OwnerID != nil {
				owners = append(owners, *pc.OwnerID)
			}
		}
		if len(owners) == 0 || subSelection(p.oc, f.Selections, "ProviderConfig", "owner") == nil {
			return nil
		}
		res, err := p.st.ResourcesByIDs(p.ctx, owners)
		for id, r := range res {
			p.l.resources.Prime(id, r)
		}
		return err
	}
}

func (p *prefetchPage) definitions(_ graphql.CollectedField, _ map[string]any) func() error {
	return func() error {
		keys := make([]manifest.KindVersion, len(p.rows))
		for i, r := range p.rows {
			keys[i] = manifest.KindVersion{Kind: r.Kind, Version: r.Version}
		}
		got, err := p.st.KindsFor(p.ctx, keys)
		if err != nil {
			return err
		}
		for _, k := range keys {
			if v, ok := got[k]; ok {
				p.l.kinds.Prime(k, &v)
			} else {
				p.l.kinds.Prime(k, nil)
			}
		}
		return nil
	}
}

func (p *prefetchPage) operations(_ graphql.CollectedField, args map[string]any) func() error {
	n := intArg(args, "first", 20)
	if n < 1 || n > maxOperationsPage {
		return nil // the field's resolver refuses it
	}
	return func() error {
		keys := make([]store.OperationsKey, len(p.ids))
		for i, id := range p.ids {
			keys[i] = store.OperationsKey{ResourceID: id, Limit: n}
		}
		_, err := fetchAndPrime(p.ctx, p.l.operations, keys, p.st.OperationsFor)
		return err
	}
}

// waitingOn reads the rows' explanations, then their blockers, from the
// primary (as the loaders behind Resource.waitingOn do): two statements for
// the page, however long it is and however slowly its resolvers run.
func (p *prefetchPage) waitingOn(f graphql.CollectedField, _ map[string]any) func() error {
	return func() error {
		// a row without an explanation (deleted since) is primed with none:
		// nothing holds it, as the resolver answers a miss
		got, err := fetchAndPrime(p.ctx, p.l.explains, p.ids, p.l.explainMany)
		if err != nil {
			return err
		}
		var blockers []uuid.UUID
		for _, id := range p.ids {
			for _, w := range got[id] {
				blockers = append(blockers, w.Blockers...)
			}
		}
		sel := subSelection(p.oc, f.Selections, "Wait", "blockers")
		if len(blockers) == 0 || sel == nil {
			return nil
		}
		res, err := p.l.primary.ResourcesByIDs(p.ctx, blockers)
		if err != nil {
			return err
		}
		list := make([]resource.Resource, 0, len(res))
		for id, r := range res {
			p.l.blockers.Prime(id, r)
			list = append(list, r)
		}
		return prefetch(p.ctx, sel, list)
	}
}

func (p *prefetchPage) specHistory(_ graphql.CollectedField, args map[string]any) func() error {
	n := intArg(args, "first", 20)
	if n < 1 || n > store.MaxHistoryLimit {
		return nil // the field's resolver refuses it
	}
	return func() error {
		keys := make([]store.SpecHistoryKey, len(p.ids))
		for i, id := range p.ids {
			keys[i] = store.SpecHistoryKey{ID: id, Limit: n}
		}
		_, err := fetchAndPrime(p.ctx, p.l.specs, keys, p.l.primary.SpecHistoriesFor)
		return err
	}
}

// prefetchUsage reads the usage of every kind version of a kinds list in
// one statement when the list's selection asks for it, and primes the
// response's loader (the batch window alone split on a slow machine).
func prefetchUsage(ctx context.Context, kvs []manifest.KindVersion) error {
	l := loadersFrom(ctx)
	if l == nil || len(kvs) == 0 || !graphql.HasOperationContext(ctx) {
		return nil
	}
	fc := graphql.GetFieldContext(ctx)
	if fc == nil || fc.Field.Field == nil {
		return nil
	}
	oc := graphql.GetOperationContext(ctx)
	if subSelection(oc, fc.Field.Selections, "Kind", "usage") == nil {
		return nil
	}
	_, err := fetchAndPrime(ctx, l.usages, kvs, l.usagesOf) // a miss reads as no usage either way
	return err
}

func (p *prefetchPage) history(_ graphql.CollectedField, args map[string]any) func() error {
	n, after := intArg(args, "first", 50), stringArg(args, "after")
	if n < 1 || n > maxNestedPage || store.CheckEventsCursor(after) != nil {
		return nil // the field's resolver refuses it
	}
	return func() error {
		keys := make([]store.EventsKey, len(p.ids))
		for i, id := range p.ids {
			keys[i] = store.EventsKey{ResourceID: id, Limit: n, After: after}
		}
		_, err := fetchAndPrime(p.ctx, p.l.events, keys, p.st.EventsFor)
		return err
	}
}

// fetchAndPrime reads keys in one store call and primes l with each key's
// value (its zero value when the read has none: the resolver's answer for
// a key without rows).
func fetchAndPrime[K comparable, V any](ctx context.Context, l *dataloadgen.Loader[K, V], keys []K,
	fetch func(context.Context, []K) (map[K]V, error)) (map[K]V, error) {
	got, err := fetch(ctx, keys)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		l.Prime(k, got[k])
	}
	return got, nil
}

// subSelection is the selection of field name inside sel (on typ); nil when
// it is not selected. Several aliases of the field merge.
func subSelection(oc *graphql.OperationContext, sel ast.SelectionSet, typ, name string) ast.SelectionSet {
	var out ast.SelectionSet
	for _, f := range graphql.CollectFields(oc, sel, []string{typ}) {
		if f.Name == name {
			out = append(out, f.Selections...)
		}
	}
	return out
}

// itemsSelection is the selection on the items of the resolver's own page
// field.
func itemsSelection(ctx context.Context, pageType string) ast.SelectionSet {
	if !graphql.HasOperationContext(ctx) {
		return nil
	}
	fc := graphql.GetFieldContext(ctx)
	if fc == nil || fc.Field.Field == nil {
		return nil
	}
	return subSelection(graphql.GetOperationContext(ctx), fc.Field.Selections, pageType, "items")
}

func intArg(args map[string]any, name string, def int) int {
	switch v := args[name].(type) {
	case int:
		return v
	case int64:
		return int(v)
	case float64:
		return int(v)
	case json.Number:
		if n, err := v.Int64(); err == nil {
			return int(n)
		}
	}
	return def
}

func stringArg(args map[string]any, name string) string {
	s, _ := args[name].(string)
	return s
}

type modelPhase = model.Phase
