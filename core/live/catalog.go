package live

import (
	"context"
	"encoding/json"
	"hash/fnv"
	"strings"

	"github.com/converge-run/converge/core/store"
)

// The catalog channels: low-rate, whole-list announcements (one NOTIFY per
// statement, no payload) of the objects operators edit by hand.
const (
	ChannelKindManifests   = "kind_manifest_changed"
	ChannelKindConfig      = "kind_config_changed"
	ChannelProviderConfigs = "providerconfig_changed"
	ChannelReactorBindings = "reactor_binding_changed"
)

// CatalogCap is the most provider configs one providerConfigs push carries
// (newest first), as one page of the query.
const CatalogCap = 500

// catalogKind names one of the three catalogs.
type catalogKind int

const (
	catKinds catalogKind = iota
	catConfigs
	catBindings
	catalogCount
)

// catalogSub is one subscriber of a catalog: it is pushed the whole list
// (filtered by key) whenever the list it sees changed.
type catalogSub struct {
	key  string
	last uint64 // fingerprint of the last push; 0 = none yet
	// owed is the latest list, which did not fit the buffer, and owedPrint
	// its fingerprint (0: none owed); the hub retries it until it fits
	// (see owedPush).
	owed      any
	owedPrint uint64
	send      func(any) bool
	close     func()
	closed    bool
}

// retry sends the owed list.
func (s *catalogSub) retry() bool {
	if s.closed || s.owedPrint == 0 {
		return true
	}
	if !s.send(s.owed) {
		return false
	}
	s.last, s.owed, s.owedPrint = s.owedPrint, nil, 0
	return true
}

// listCatalog reads one catalog's list for a filter key (one query per
// distinct key per wake, never per subscriber).
func (h *Hub) listCatalog(ctx context.Context, c catalogKind, key string) (any, error) {
	ctx, cancel := h.bounded(ctx)
	defer cancel()
	st := h.reader(ctx)
	switch c {
	case catKinds:
		return st.ListKinds(ctx)
	case catConfigs:
		page, err := st.ListProviderConfigs(ctx, store.ProviderConfigListOptions{Kind: key, Limit: CatalogCap})
		if err != nil {
			return nil, err
		}
		return page.Items, nil
	default:
		watch, reactor, _ := strings.Cut(key, "|")
		return st.ListReactorBindings(ctx, watch, reactor)
	}
}

// SubscribeKinds pushes every applied kind version (with its live policy)
// at once, then whenever a manifest is applied or a policy edited.
func SubscribeKinds[T any](ctx context.Context, h *Hub, conv func([]store.Kind) T) <-chan T {
	return subscribeCatalog(ctx, h, catKinds, "", conv)
}

// SubscribeProviderConfigs pushes the provider configs of kind ("" = all;
// newest first, at most CatalogCap) at once, then on every change.
func SubscribeProviderConfigs[T any](ctx context.Context, h *Hub, kind string, conv func([]store.ProviderConfig) T) <-chan T {
	return subscribeCatalog(ctx, h, catConfigs, kind, conv)
}

// SubscribeReactorBindings pushes the reactor bindings matching watchKind
// and reactor ("" = any) at once, then on every change.
func SubscribeReactorBindings[T any](ctx context.Context, h *Hub, watchKind, reactor string,
	conv func([]store.ReactorBinding) T) <-chan T {
	return subscribeCatalog(ctx, h, catBindings, watchKind+"|"+reactor, conv)
}

// subscribeCatalog registers a subscriber; the hub's loop makes the first
// push (so pushes never race each other out of order).
func subscribeCatalog[L any, T any](ctx context.Context, h *Hub, c catalogKind, key string, conv func(L) T) <-chan T {
	ch := make(chan T, 4)
	s := &catalogSub{key: key}
	s.send = func(v any) bool {
		l, _ := v.(L)
		select {
		case ch <- conv(l):
			return true
		default:
			return false
		}
	}
	s.close = func() { close(ch) }
	h.mu.Lock()
	h.cats[c][s] = struct{}{}
	h.catsFresh[c] = true
	h.mu.Unlock()
	h.wake()
	context.AfterFunc(ctx, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if !s.closed {
			s.closed = true
			delete(h.cats[c], s)
			s.close()
		}
	})
	return ch
}

// refreshCatalog re-lists a catalog once per distinct subscriber key and
// pushes the list to each subscriber whose last push differs. A subscriber
// whose buffer is full is owed the list: the hub retries it until it fits
// (a newer list replaces it, so nothing is lost).
func (h *Hub) refreshCatalog(ctx context.Context, c catalogKind) {
	h.mu.Lock()
	keys := map[string]bool{}
	for s := range h.cats[c] {
		keys[s.key] = true
	}
	h.mu.Unlock()
	lists := make(map[string]any, len(keys))
	prints := make(map[string]uint64, len(keys))
	for k := range keys {
		l, err := h.listCatalog(ctx, c, k)
		if err != nil {
			if h.failed(ctx, "catalog", err) {
				h.log.Error().Err(err).Int("catalog", int(c)).Str("filter", k).Msg("re-list a catalog for its subscribers; retrying")
			}
			h.mu.Lock()
			h.reread.cats[c] = ctx.Err() == nil
			h.mu.Unlock()
			continue
		}
		h.succeeded("catalog")
		lists[k], prints[k] = l, catalogPrint(l)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.cats[c] {
		l, ok := lists[s.key]
		if s.closed || !ok {
			continue
		}
		if s.last == prints[s.key] {
			s.owed, s.owedPrint = nil, 0 // what it was pushed last is current again
			continue
		}
		s.owed, s.owedPrint = l, prints[s.key]
		if !s.retry() {
			h.owe(s)
		}
	}
}

// catalogPrint fingerprints a list (never 0: 0 means "not pushed yet").
func catalogPrint(l any) uint64 {
	b, _ := json.Marshal(l)
	f := fnv.New64a()
	_, _ = f.Write(b)
	return f.Sum64() | 1
}

// refreshFreshCatalogs makes the first push to new subscribers.
func (h *Hub) refreshFreshCatalogs(ctx context.Context) {
	for c := range catalogCount {
		h.mu.Lock()
		fresh := h.catsFresh[c]
		h.catsFresh[c] = false
		h.mu.Unlock()
		if fresh {
			h.refreshCatalog(ctx, c)
		}
	}
}
