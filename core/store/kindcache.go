package store

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/converge-run/converge/core/manifest"
)

// kindEntry is one applied manifest, decoded, with its compiled schemas. It
// is immutable once built.
type kindEntry struct {
	gen      int64
	manifest manifest.KindManifest
	spec     *manifest.Schema
	config   *manifest.Schema
}

// kindCache holds the decoded manifests keyed by (kind, version), each
// entry tagged with its manifest_gen: a lookup with another generation is a
// miss, so an applied change (on this pod or another) is seen by the next
// statement that reads the row's manifest_gen. Compiling a schema is the
// expensive part of validation; the cache makes it once per manifest change.
type kindCache struct {
	mu      sync.RWMutex
	entries map[manifest.KindVersion]*kindEntry
}

func newKindCache() *kindCache {
	return &kindCache{entries: map[manifest.KindVersion]*kindEntry{}}
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
	e, err := buildKindEntry(gen, raw)
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

func buildKindEntry(gen int64, raw []byte) (*kindEntry, error) {
	m, err := manifest.Parse(raw)
	if err != nil {
		return nil, err
	}
	spec, err := manifest.CompileSchema("/spec_schema", m.SpecSchema)
	if err != nil {
		return nil, err
	}
	config, err := manifest.CompileSchema("/config_schema", m.ConfigSchema)
	if err != nil {
		return nil, err
	}
	return &kindEntry{gen: gen, manifest: m, spec: spec, config: config}, nil
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
