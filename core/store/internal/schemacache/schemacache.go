// Package schemacache is the store's one cache of compiled JSON Schemas: a
// kind version's spec_schema and config_schema, compiled once per manifest
// generation. Compiling is the expensive part of validation; an applied
// manifest bumps manifest_gen, so a lookup with a newer generation misses and
// replaces the entry (the cache holds at most one generation per kind
// version and axis: it never grows past the applied kinds).
package schemacache

import (
	"encoding/json"
	"sync"

	"github.com/converge-run/converge/core/manifest"
)

// The two schema axes of a kind version (the JSON pointer of each in the
// manifest, which also prefixes a schema's error locations).
const (
	Spec   = "/spec_schema"
	Config = "/config_schema"
)

type key struct {
	kind, version, axis string
}

type entry struct {
	gen    int64
	schema *manifest.Schema
}

// Cache is safe for concurrent use. The zero value is not usable; call New.
type Cache struct {
	mu      sync.RWMutex
	entries map[key]entry
}

// New returns an empty cache.
func New() *Cache { return &Cache{entries: map[key]entry{}} }

// Schema returns the compiled axis schema of kind/version at manifest
// generation gen, compiling raw on a miss. A nil schema (an untyped axis)
// validates anything. A lookup with an older generation than the cached one
// (a statement that read the row before a concurrent apply) compiles raw
// without displacing the newer entry.
func (c *Cache) Schema(kind, version, axis string, gen int64, raw json.RawMessage) (*manifest.Schema, error) {
	k := key{kind, version, axis}
	c.mu.RLock()
	e, ok := c.entries[k]
	c.mu.RUnlock()
	if ok && e.gen == gen {
		return e.schema, nil
	}
	sc, err := manifest.CompileSchema(axis, raw)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if cur, ok := c.entries[k]; !ok || cur.gen < gen {
		c.entries[k] = entry{gen: gen, schema: sc}
	}
	c.mu.Unlock()
	return sc, nil
}

// Lookup returns the cached axis schema of kind/version at manifest
// generation gen, if it is cached: a caller that has only the generation
// in hand reads the schema's source on a miss, and calls Schema.
func (c *Cache) Lookup(kind, version, axis string, gen int64) (*manifest.Schema, bool) {
	c.mu.RLock()
	e, ok := c.entries[key{kind, version, axis}]
	c.mu.RUnlock()
	if !ok || e.gen != gen {
		return nil, false
	}
	return e.schema, true
}

// Len is the number of cached schemas.
func (c *Cache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.entries)
}
