package api

import (
	"container/list"
	"context"
	"sync"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
)

// queryCache is the parsed-query cache, bounded in bytes and holding only
// queries that passed every limit. gqlgen adds a document as soon as it
// parsed and validated it — before the limits ran — so Add only parks the
// document on its request (a per-request slot, dropped with the request);
// opLimits admits it into the LRU once every limit passed. The cost of an
// entry is its query text times docBytesPerQueryByte (a parsed document is
// about that much larger than its text); a query over a tenth of the
// budget is never cached.
type queryCache struct {
	budget int64

	mu    sync.Mutex
	used  int64
	order *list.List // of *cacheEntry, most recent first
	byKey map[string]*list.Element
}

const docBytesPerQueryByte = 16

type cacheEntry struct {
	key  string
	doc  *ast.QueryDocument
	cost int64
}

var _ graphql.Cache[*ast.QueryDocument] = (*queryCache)(nil)

func newQueryCache(budget int64) *queryCache {
	return &queryCache{budget: budget, order: list.New(), byKey: map[string]*list.Element{}}
}

// parked is the per-request slot Add writes to.
type parked struct {
	mu   sync.Mutex
	docs map[string]*ast.QueryDocument
}

type parkedKey struct{}

// withParking gives a request (or a websocket connection) its slot.
func withParking(ctx context.Context) context.Context {
	return context.WithValue(ctx, parkedKey{}, &parked{docs: map[string]*ast.QueryDocument{}})
}

// Get returns an admitted document.
func (c *queryCache) Get(_ context.Context, key string) (*ast.QueryDocument, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[key]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*cacheEntry).doc, true
}

// Add parks a freshly parsed document on its request until it is admitted.
func (c *queryCache) Add(ctx context.Context, key string, doc *ast.QueryDocument) {
	p, ok := ctx.Value(parkedKey{}).(*parked)
	if !ok || c.cost(key) > c.budget/10 {
		return
	}
	p.mu.Lock()
	if len(p.docs) < 8 { // a connection parks a few at most at once
		p.docs[key] = doc
	}
	p.mu.Unlock()
}

func (c *queryCache) cost(key string) int64 { return int64(len(key)) * docBytesPerQueryByte }

// admit moves the request's parked document for key into the cache when ok
// (it passed every limit), and drops it otherwise.
func (c *queryCache) admit(ctx context.Context, key string, ok bool) {
	p, parkedOK := ctx.Value(parkedKey{}).(*parked)
	if !parkedOK {
		return
	}
	p.mu.Lock()
	doc := p.docs[key]
	delete(p.docs, key)
	p.mu.Unlock()
	if doc == nil || !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, dup := c.byKey[key]; dup {
		return
	}
	e := &cacheEntry{key: key, doc: doc, cost: c.cost(key)}
	c.byKey[key] = c.order.PushFront(e)
	c.used += e.cost
	for c.used > c.budget {
		last := c.order.Back()
		old := last.Value.(*cacheEntry)
		c.order.Remove(last)
		delete(c.byKey, old.key)
		c.used -= old.cost
	}
}

// size is the number of cached documents and their cost (tests).
func (c *queryCache) size() (int, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byKey), c.used
}
