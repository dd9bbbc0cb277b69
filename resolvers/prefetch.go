package resolvers

import (
	"context"
	"encoding/json"

	"github.com/99designs/gqlgen/graphql"
	"github.com/google/uuid"
	"github.com/vektah/gqlparser/v2/ast"
	"golang.org/x/sync/errgroup"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/graph/model"
)

// prefetch makes a page's nested fields cost one statement each, whatever
// the scheduling: before a list resolver returns its rows, it looks ahead at
// the selection on them, loads every nested field it asks for for all rows
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
	oc := graphql.GetOperationContext(ctx)
	ids := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	st := l.store
	var g errgroup.Group
	for _, f := range graphql.CollectFields(oc, sel, []string{"Resource"}) {
		args := f.ArgumentMap(oc.Variables)
		switch f.Name {
		case "owner", "root":
			g.Go(func() error {
				var want []uuid.UUID
				for _, r := range rows {
					if p := r.OwnerID; f.Name == "root" {
						p = r.RootID
						if p != nil {
							want = append(want, *p)
						}
					} else if p != nil {
						want = append(want, *p)
					}
				}
				got, err := st.ResourcesByIDs(ctx, want)
				if err != nil {
					return err
				}
				list := make([]resource.Resource, 0, len(got))
				for id, r := range got {
					l.resources.Prime(id, r)
					list = append(list, r)
				}
				return prefetch(ctx, f.Selections, list)
			})
		case "conditions":
			g.Go(func() error {
				got, err := st.StoredConditionsFor(ctx, ids)
				if err != nil {
					return err
				}
				for _, id := range ids {
					l.conditions.Prime(id, got[id])
				}
				return nil
			})
		case "dependencies":
			g.Go(func() error {
				got, err := st.DependenciesFor(ctx, ids)
				if err != nil {
					return err
				}
				var ups []resource.Resource
				for _, id := range ids {
					l.deps.Prime(id, got[id])
					for _, d := range got[id] {
						ups = append(ups, d.Upstream)
					}
				}
				return prefetch(ctx, subSelection(oc, f.Selections, "Dependency", "upstream"), ups)
			})
		case "dependents":
			n := intArg(args, "first", 100)
			g.Go(func() error {
				keys := make([]store.DependentsKey, len(ids))
				for i, id := range ids {
					keys[i] = store.DependentsKey{ID: id, Limit: n}
				}
				got, err := st.DependentsFor(ctx, keys)
				if err != nil {
					return err
				}
				var all []resource.Resource
				for _, k := range keys {
					l.dependents.Prime(k, got[k])
					all = append(all, got[k]...)
				}
				return prefetch(ctx, f.Selections, all)
			})
		case "children":
			phases, _ := args["phases"].([]any)
			var ps []resource.Phase
			for _, p := range phases {
				if s, ok := p.(string); ok {
					ps = append(ps, fromPhases([]modelPhase{modelPhase(s)})...)
				}
			}
			n, after := intArg(args, "first", 50), stringArg(args, "after")
			g.Go(func() error {
				keys := make([]store.ChildrenKey, len(ids))
				for i, id := range ids {
					keys[i] = store.ChildrenKey{OwnerID: id, Phases: store.PhaseKey(ps), Limit: n, After: after}
				}
				got, err := st.ChildrenPages(ctx, keys)
				if err != nil {
					return err
				}
				var all []resource.Resource
				for _, k := range keys {
					l.children.Prime(k, got[k])
					all = append(all, got[k].Items...)
				}
				return prefetch(ctx, subSelection(oc, f.Selections, "ResourcePage", "items"), all)
			})
		case "providerConfig":
			g.Go(func() error {
				keys := make([]store.ConfigKey, len(rows))
				for i, r := range rows {
					keys[i] = store.ConfigKey{Kind: r.Kind, Name: r.ProviderConfigRef}
				}
				got, err := st.ProviderConfigsFor(ctx, keys)
				if err != nil {
					return err
				}
				var owners []uuid.UUID
				for _, k := range keys {
					pc, ok := got[k]
					if !ok {
						l.configs.Prime(k, nil)
						continue
					}
					l.configs.Prime(k, &pc)
					if pc.OwnerID != nil {
						owners = append(owners, *pc.OwnerID)
					}
				}
				if len(owners) == 0 || subSelection(oc, f.Selections, "ProviderConfig", "owner") == nil {
					return nil
				}
				res, err := st.ResourcesByIDs(ctx, owners)
				for id, r := range res {
					l.resources.Prime(id, r)
				}
				return err
			})
		case "definition":
			g.Go(func() error {
				keys := make([]manifest.KindVersion, len(rows))
				for i, r := range rows {
					keys[i] = manifest.KindVersion{Kind: r.Kind, Version: r.Version}
				}
				got, err := st.KindsFor(ctx, keys)
				if err != nil {
					return err
				}
				for _, k := range keys {
					if v, ok := got[k]; ok {
						l.kinds.Prime(k, &v)
					} else {
						l.kinds.Prime(k, nil)
					}
				}
				return nil
			})
		case "operations":
			n := intArg(args, "first", 20)
			g.Go(func() error {
				keys := make([]store.OperationsKey, len(ids))
				for i, id := range ids {
					keys[i] = store.OperationsKey{ResourceID: id, Limit: n}
				}
				got, err := st.OperationsFor(ctx, keys)
				if err != nil {
					return err
				}
				for _, k := range keys {
					l.operations.Prime(k, got[k])
				}
				return nil
			})
		}
	}
	return g.Wait()
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
