package store

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store/internal/schemacache"
)

// kindEntry is one applied manifest, decoded. It is immutable once built;
// its compiled schemas live in the store's one schema cache.
type kindEntry struct {
	kind, version string
	gen           int64
	manifest      manifest.KindManifest
	schemas       *schemacache.Cache
}

// spec is the compiled spec_schema of the entry's generation.
func (e *kindEntry) spec() (*manifest.Schema, error) {
	return e.schemas.Schema(e.kind, e.version, schemacache.Spec, e.gen, e.manifest.SpecSchema)
}

// config is the compiled config_schema of the entry's generation.
func (e *kindEntry) config() (*manifest.Schema, error) {
	return e.schemas.Schema(e.kind, e.version, schemacache.Config, e.gen, e.manifest.ConfigSchema)
}

// kindCache holds the decoded manifests keyed by (kind, version), each
// entry tagged with its manifest_gen: a lookup with another generation is a
// miss, so an applied change (on this pod or another) is seen by the next
// statement that reads the row's manifest_gen. The schemas are compiled
// (once per manifest change) into schemas, the store's one schema cache.
type kindCache struct {
	mu      sync.RWMutex
	entries map[manifest.KindVersion]*kindEntry
	schemas *schemacache.Cache
}

func newKindCache() *kindCache {
	return &kindCache{entries: map[manifest.KindVersion]*kindEntry{}, schemas: schemacache.New()}
}

// get returns the entry for (kind, version) at gen, building it from raw (or,
// with raw nil, from the row read through q) on a miss.
func (c *kindCache) get(ctx context.Context, q querier, kind, version string, gen int64, raw []byte) (*kindEntry, error) {
	key := manifest.KindVersion{Kind: kind, Version: version}
	c.mu.RLock()
	e, ok := c.entries[key]
	c.mu.RUnlock()
	if ok && e.gen == gen {
		return e, nil
	}
	if raw == nil {
		err := q.QueryRow(ctx,
			`SELECT manifest FROM kind_manifest WHERE kind = $1 AND version = $2 AND manifest_gen = $3`,
			kind, version, gen).Scan(&raw)
		if err != nil {
			return nil, mapErr(err, fmt.Sprintf("kind %s/%s (manifest_gen %d)", kind, version, gen))
		}
	}
	e, err := c.build(kind, version, gen, raw)
	if err != nil {
		return nil, fmt.Errorf("load kind %s/%s manifest_gen %d: %w", kind, version, gen, err)
	}
	c.mu.Lock()
	if cur, ok := c.entries[key]; !ok || cur.gen < gen {
		c.entries[key] = e
	}
	c.mu.Unlock()
	return e, nil
}

// build decodes raw and compiles both schemas (so a broken schema fails the
// lookup, not a later validation).
func (c *kindCache) build(kind, version string, gen int64, raw []byte) (*kindEntry, error) {
	m, err := manifest.Parse(raw)
	if err != nil {
		return nil, err
	}
	e := &kindEntry{kind: kind, version: version, gen: gen, manifest: m, schemas: c.schemas}
	if _, err := e.spec(); err != nil {
		return nil, err
	}
	if _, err := e.config(); err != nil {
		return nil, err
	}
	return e, nil
}

// schemaInvalid turns a schema violation of the document named doc ("spec",
// "config") into an *InvalidError naming the JSON pointer and the keyword.
func schemaInvalid(doc string, err error) error {
	var se *manifest.SchemaError
	if !errors.As(err, &se) {
		return fmt.Errorf("validate %s: %w", doc, err)
	}
	if len(se.Violations) == 0 {
		return invalid(doc, "schema", "%s does not match the kind's schema", doc)
	}
	v := se.Violations[0]
	msg := v.Message
	if n := len(se.Violations) - 1; n > 0 {
		msg += fmt.Sprintf(" (and %d more)", n)
	}
	return &InvalidError{Field: doc + v.Pointer, Rule: v.Rule, Message: msg}
}
