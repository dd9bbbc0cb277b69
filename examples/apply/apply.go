// Package apply applies the JSON documents users apply — kind manifests,
// providerconfigs, reactor bindings and resources, each one snake_case
// document (the card's "Fixtures and files users apply") — from a directory
// of fixtures, in dependency order.
//
// The documents go through an Applier. Today the local stack and the tests
// use StoreApplier (core/store in-process); the same documents are what
// `conctl apply --type …` and the GraphQL mutations take, so an Applier
// backed by the API slots in without touching the callers.
package apply

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// Type is what a document is.
type Type string

// The document types, in the order they are applied.
const (
	TypeManifest       Type = "manifest"
	TypeProviderConfig Type = "providerconfig"
	TypeReactorBinding Type = "reactorbinding"
	TypeResource       Type = "resource"
)

var order = map[Type]int{TypeManifest: 0, TypeProviderConfig: 1, TypeReactorBinding: 2, TypeResource: 3}

// ProviderConfig is a providerconfig document.
type ProviderConfig struct {
	Kind      string          `json:"kind"`
	Name      string          `json:"name"`
	IsDefault bool            `json:"is_default"`
	Spec      json.RawMessage `json:"spec"`
	Data      json.RawMessage `json:"data,omitempty"`
}

// ReactorBinding is a reactor binding document.
type ReactorBinding struct {
	Name       string            `json:"name"`
	WatchKind  string            `json:"watch_kind"`
	Transition string            `json:"transition"`
	Reactor    string            `json:"reactor"`
	LabelMatch map[string]string `json:"label_match,omitempty"`
	// Enabled defaults to true.
	Enabled *bool `json:"enabled,omitempty"`
}

// Resource is a resource document.
type Resource struct {
	Kind              string            `json:"kind"`
	Name              string            `json:"name"`
	Version           string            `json:"version,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	Spec              json.RawMessage   `json:"spec"`
	ProviderConfigRef string            `json:"provider_config_ref,omitempty"`
}

// Applier applies one document of each type.
type Applier interface {
	ApplyManifest(ctx context.Context, raw json.RawMessage) error
	ApplyProviderConfig(ctx context.Context, pc ProviderConfig) error
	ApplyReactorBinding(ctx context.Context, b ReactorBinding) error
	ApplyResource(ctx context.Context, r Resource) error
}

// Document is one fixture file.
type Document struct {
	Path string
	Type Type
	Raw  json.RawMessage
}

// TypeOf names a fixture file's type from its name:
//
//	<kind>.kind.json         a kind manifest
//	providerconfig-*.json    a providerconfig
//	reactor-binding-*.json   a reactor binding
//	resource-*.json          a resource
func TypeOf(name string) (Type, bool) {
	base := path.Base(name)
	switch {
	case !strings.HasSuffix(base, ".json"):
		return "", false
	case strings.HasSuffix(base, ".kind.json"):
		return TypeManifest, true
	case strings.HasPrefix(base, "providerconfig-"):
		return TypeProviderConfig, true
	case strings.HasPrefix(base, "reactor-binding-"):
		return TypeReactorBinding, true
	case strings.HasPrefix(base, "resource-"):
		return TypeResource, true
	}
	return "", false
}

// Load reads the fixture files of dir in fsys, sorted in apply order
// (manifests, providerconfigs, bindings, resources; by name within a type).
// Files whose names match no type are skipped; include filters further
// (nil keeps every document).
func Load(fsys fs.FS, dir string, include func(Document) bool) ([]Document, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read fixtures %s: %w", dir, err)
	}
	var docs []Document
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		t, ok := TypeOf(e.Name())
		if !ok {
			continue
		}
		p := path.Join(dir, e.Name())
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, fmt.Errorf("read fixture %s: %w", p, err)
		}
		if !json.Valid(b) {
			return nil, fmt.Errorf("fixture %s is not valid JSON", p)
		}
		d := Document{Path: p, Type: t, Raw: bytes.TrimSpace(b)}
		if include == nil || include(d) {
			docs = append(docs, d)
		}
	}
	sort.SliceStable(docs, func(i, j int) bool {
		if order[docs[i].Type] != order[docs[j].Type] {
			return order[docs[i].Type] < order[docs[j].Type]
		}
		return docs[i].Path < docs[j].Path
	})
	return docs, nil
}

// One applies a single document.
func One(ctx context.Context, a Applier, d Document) error {
	var err error
	switch d.Type {
	case TypeManifest:
		err = a.ApplyManifest(ctx, d.Raw)
	case TypeProviderConfig:
		var pc ProviderConfig
		if err = decode(d.Raw, &pc); err == nil {
			err = a.ApplyProviderConfig(ctx, pc)
		}
	case TypeReactorBinding:
		var b ReactorBinding
		if err = decode(d.Raw, &b); err == nil {
			err = a.ApplyReactorBinding(ctx, b)
		}
	case TypeResource:
		var r Resource
		if err = decode(d.Raw, &r); err == nil {
			err = a.ApplyResource(ctx, r)
		}
	default:
		err = fmt.Errorf("unknown document type %q", d.Type)
	}
	if err != nil {
		return fmt.Errorf("apply %s %s: %w", d.Type, d.Path, err)
	}
	return nil
}

// All applies docs in order, stopping at the first failure.
func All(ctx context.Context, a Applier, docs []Document) error {
	for _, d := range docs {
		if err := One(ctx, a, d); err != nil {
			return err
		}
	}
	return nil
}

// decode reads a document strictly: an unknown (misspelt) key is an error.
func decode(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	return nil
}
