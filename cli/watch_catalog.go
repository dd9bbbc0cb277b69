package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// A catalog watch (kinds, providerconfigs, reactorbindings): the server
// pushes the whole list at once and on every change; conctl prints the
// difference, one line per object ADDED, MODIFIED or DELETED.

// catalogView is how one catalog's objects print.
type catalogView[T any] struct {
	what   string
	header []string
	key    func(T) string
	cells  func(T) []string
}

// watchCatalog prints the differences between successive pushes.
func watchCatalog[R any, T any](ctx context.Context, a *app, ws *WSClient, errs <-chan error, updates <-chan R,
	extract func(R) ([]T, error), v catalogView[T], watchOnly bool) error {
	t := newStreamTable(a.stdout(), append([]string{"EVENT"}, v.header...))
	var seen map[string]T
	for {
		select {
		case <-ctx.Done():
			return nil
		case werr, ok := <-errs:
			if ok {
				fmt.Fprintf(a.stderr(), "warning: %v\n", werr)
			}
		case <-ws.Reconnected():
			// the server pushes the whole list on (re)subscribe
		case u, ok := <-updates:
			if !ok {
				if cerr := ctx.Err(); cerr != nil {
					return nil //nolint:nilerr // interrupted: a watch ends cleanly
				}
				return fmt.Errorf("watch %s: the subscription ended", v.what)
			}
			items, err := extract(u)
			if err != nil {
				return fmt.Errorf("watch %s: %w", v.what, err)
			}
			now := make(map[string]T, len(items))
			for _, it := range items {
				now[v.key(it)] = it
			}
			if seen == nil && watchOnly {
				seen = now
				continue
			}
			if err := diffCatalog(a, t, v, seen, now); err != nil {
				return err
			}
			seen = now
		}
	}
}

func diffCatalog[T any](a *app, t *streamTable, v catalogView[T], before, now map[string]T) error {
	keys := make([]string, 0, len(now)+len(before))
	for k := range now {
		keys = append(keys, k)
	}
	for k := range before {
		if _, ok := now[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		cur, isNow := now[k]
		old, wasBefore := before[k]
		var event string
		switch {
		case !wasBefore:
			event = evAdded
		case !isNow:
			event, cur = evDeleted, old
		case !sameJSON(old, cur):
			event = evModified
		default:
			continue
		}
		if err := a.emit(t, watchEvent{Event: event, Object: &cur}, v.cells(cur)); err != nil {
			return err
		}
	}
	return nil
}

func sameJSON(x, y any) bool {
	a, err1 := json.Marshal(x)
	b, err2 := json.Marshal(y)
	return err1 == nil && err2 == nil && string(a) == string(b)
}

// watchCatalogType follows kinds, providerconfigs or reactorbindings.
func (a *app) watchCatalogType(ctx context.Context, c *Conn, tg target, lf listFlags, watchOnly bool) error {
	if tg.t == typeProviderConfig {
		// KIND/NAME, or NAME with --kind, as get pc takes them.
		keys := make([]string, len(tg.names))
		for i, n := range tg.names {
			r, err := parseRef(n, lf.kind)
			if err != nil {
				return err
			}
			keys[i] = r.kind + "/" + r.name
		}
		tg.names = keys
	}
	ws := c.NewWS()
	errs, err := ws.Start(ctx)
	if err != nil {
		return fmt.Errorf("watch %s: %w", tg.t, err)
	}
	defer func() { _ = ws.Close() }()
	var kind, reactor *string
	if lf.kind != "" {
		kind = &lf.kind
	}
	if lf.reactor != "" {
		reactor = &lf.reactor
	}
	switch tg.t {
	case typeKind:
		updates, _, err := WatchKinds(ctx, ws)
		if err != nil {
			return fmt.Errorf("watch kinds: %w", err)
		}
		return watchCatalog(ctx, a, ws, errs, updates, func(u WatchKindsWsResponse) ([]KindRow, error) {
			if len(u.Errors) > 0 || u.Data == nil {
				return nil, apiError(u.Errors)
			}
			out := make([]KindRow, len(u.Data.Kinds))
			for i, k := range u.Data.Kinds {
				out[i] = k.KindRow
			}
			return pickNames(out, tg.names, func(k KindRow) string { return k.Name }), nil
		}, a.kindView(), watchOnly)
	case typeProviderConfig:
		updates, _, err := WatchProviderConfigs(ctx, ws, kind)
		if err != nil {
			return fmt.Errorf("watch providerconfigs: %w", err)
		}
		return watchCatalog(ctx, a, ws, errs, updates, func(u WatchProviderConfigsWsResponse) ([]ProviderConfigRow, error) {
			if len(u.Errors) > 0 || u.Data == nil {
				return nil, apiError(u.Errors)
			}
			out := make([]ProviderConfigRow, len(u.Data.ProviderConfigs))
			for i, p := range u.Data.ProviderConfigs {
				out[i] = p.ProviderConfigRow
			}
			return pickNames(out, tg.names, func(p ProviderConfigRow) string { return p.Kind + "/" + p.Name }), nil
		}, a.providerConfigView(), watchOnly)
	default:
		updates, _, err := WatchReactorBindings(ctx, ws, kind, reactor)
		if err != nil {
			return fmt.Errorf("watch reactorbindings: %w", err)
		}
		return watchCatalog(ctx, a, ws, errs, updates, func(u WatchReactorBindingsWsResponse) ([]ReactorBindingRow, error) {
			if len(u.Errors) > 0 || u.Data == nil {
				return nil, apiError(u.Errors)
			}
			out := make([]ReactorBindingRow, len(u.Data.ReactorBindings))
			for i, b := range u.Data.ReactorBindings {
				out[i] = b.ReactorBindingRow
			}
			return pickNames(out, tg.names, func(b ReactorBindingRow) string { return b.Name }), nil
		}, a.reactorBindingView(), watchOnly)
	}
}

// pickNames keeps the items named (all when names is empty).
func pickNames[T any](items []T, names []string, key func(T) string) []T {
	if len(names) == 0 {
		return items
	}
	out := items[:0:0]
	for _, it := range items {
		if contains(names, key(it)) {
			out = append(out, it)
		}
	}
	return out
}

func (a *app) kindView() catalogView[KindRow] {
	return catalogView[KindRow]{what: "kinds",
		header: []string{"NAME", "VERSION", "MAX-INFLIGHT", "DEADLINE", "RESYNC", "GENERATION"},
		key:    func(k KindRow) string { return k.Name + "/" + k.Version },
		cells: func(k KindRow) []string {
			return []string{k.Name, k.Version, unlimited(k.Config.MaxInflight), secs(k.Config.TaskDeadlineSecs),
				secs(k.Config.ResyncIntervalSecs), itoa(k.ManifestGeneration)}
		}}
}

func (a *app) providerConfigView() catalogView[ProviderConfigRow] {
	return catalogView[ProviderConfigRow]{what: "providerconfigs",
		header: []string{"KIND", "NAME", "DEFAULT", "OWNER", "AGE"},
		key:    func(p ProviderConfigRow) string { return p.Kind + "/" + p.Name },
		cells: func(p ProviderConfigRow) []string {
			owner := "<none>"
			if p.Owner != nil {
				owner = p.Owner.Kind + "/" + p.Owner.Name
			}
			return []string{p.Kind, p.Name, yesNo(p.IsDefault), owner, a.age(p.CreatedAt)}
		}}
}

func (a *app) reactorBindingView() catalogView[ReactorBindingRow] {
	return catalogView[ReactorBindingRow]{what: "reactorbindings",
		header: []string{"NAME", "WATCH-KIND", "TRANSITION", "REACTOR", "ENABLED", "AGE"},
		key:    func(b ReactorBindingRow) string { return b.Name },
		cells: func(b ReactorBindingRow) []string {
			return []string{b.Name, b.WatchKind, strings.ToLower(string(b.Transition)), b.Reactor, yesNo(b.Enabled),
				a.age(b.CreatedAt)}
		}}
}
