package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// DocType is what an applied document is.
type DocType string

// The document types conctl apply takes, in the order they are applied.
const (
	DocManifest       DocType = "manifest"
	DocProviderConfig DocType = "providerconfig"
	DocReactorBinding DocType = "reactorbinding"
	DocResource       DocType = "resource"
)

// docTypes lists the types in apply order.
var docTypes = []DocType{DocManifest, DocProviderConfig, DocReactorBinding, DocResource}

// docShape is the keys a type's document may hold, and the ones only it
// holds (markers).
type docShape struct {
	keys    []string
	markers []string
}

// The snake_case documents users apply, by their keys.
var docShapes = map[DocType]docShape{
	DocManifest: {
		keys: []string{"kind", "version", "description", "spec_schema", "status_schema", "config_schema", "reactions",
			"finalizer_name", "max_inflight", "task_deadline_secs", "resync_interval_secs", "resync_recomposes",
			"orphan_grace_secs"},
		markers: []string{"description", "spec_schema", "status_schema", "config_schema", "reactions", "finalizer_name",
			"max_inflight", "task_deadline_secs", "resync_interval_secs", "resync_recomposes", "orphan_grace_secs"},
	},
	DocProviderConfig: {
		keys:    []string{"kind", "name", "is_default", "spec", "data"},
		markers: []string{"is_default", "data"},
	},
	DocReactorBinding: {
		keys:    []string{"name", "watch_kind", "transition", "reactor", "label_match", "enabled"},
		markers: []string{"watch_kind", "transition", "reactor", "label_match", "enabled"},
	},
	DocResource: {
		keys:    []string{"kind", "name", "version", "labels", "spec", "provider_config_ref"},
		markers: []string{"labels", "provider_config_ref"},
	},
}

// ParseDocType reads a --type value (aliases of the get types accepted).
func ParseDocType(s string) (DocType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "manifest", "manifests", "kind", "kinds", "crd", "crds":
		return DocManifest, nil
	case "providerconfig", "providerconfigs", "pc":
		return DocProviderConfig, nil
	case "reactorbinding", "reactorbindings", "rb":
		return DocReactorBinding, nil
	case "resource", "resources", "res":
		return DocResource, nil
	}
	return "", fmt.Errorf("unknown type %q (one of manifest, providerconfig, reactorbinding, resource)", s)
}

// Document is one object read from a file.
type Document struct {
	// Source names where it came from: file, file#2 (the second document
	// of a multi-document file), or stdin.
	Source string
	Type   DocType
	// Raw is the document as compact JSON.
	Raw json.RawMessage
}

// ReadDocuments reads every document of the -f arguments: files, directories
// (their *.json, *.yaml and *.yml files, sorted; recursively with
// recursive) and "-" for stdin. JSON files may hold several concatenated
// documents or one array of them; YAML files several documents separated
// by ---. Each document's type is forced, or inferred from its keys, or —
// when the keys fit two types — from the file name (<kind>.kind.json,
// providerconfig-*, reactor-binding-*, resource-*). Every document is read
// and typed before anything is applied; the result is in apply order
// (manifests, providerconfigs, reactor bindings, resources; stable within a
// type).
func ReadDocuments(paths []string, stdin io.Reader, forced DocType, recursive bool) ([]Document, error) {
	if len(paths) == 0 {
		return nil, usageError{errors.New("no input: pass -f FILE, -f DIR or -f -")}
	}
	if i := slices.Index(paths, "-"); i >= 0 && slices.Contains(paths[i+1:], "-") { // before stdin is read
		return nil, usageError{errors.New("-f - (stdin) given twice")}
	}
	var docs []Document
	for _, p := range paths {
		if p == "-" {
			b, err := io.ReadAll(stdin)
			if err != nil {
				return nil, fmt.Errorf("read stdin: %w", err)
			}
			d, err := parseDocuments("stdin", "", b, forced)
			if err != nil {
				return nil, err
			}
			docs = append(docs, d...)
			continue
		}
		files, err := expandPath(p, recursive)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", f, err)
			}
			d, err := parseDocuments(f, strings.ToLower(filepath.Ext(f)), b, forced)
			if err != nil {
				return nil, err
			}
			docs = append(docs, d...)
		}
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("no documents found in %s", strings.Join(paths, ", "))
	}
	sort.SliceStable(docs, func(i, j int) bool {
		return slices.Index(docTypes, docs[i].Type) < slices.Index(docTypes, docs[j].Type)
	})
	return docs, nil
}

// expandPath lists a file, or a directory's document files.
func expandPath(p string, recursive bool) ([]string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	if !st.IsDir() {
		return []string{p}, nil
	}
	// WalkDir does not follow a symlinked root: walk what it points at,
	// naming the files under p as given.
	root, err := filepath.EvalSymlinks(p)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	var files []string
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && !recursive {
				return filepath.SkipDir
			}
			return nil
		}
		switch strings.ToLower(filepath.Ext(path)) {
		case ".json", ".yaml", ".yml":
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, filepath.Join(p, rel))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read directory %s: %w", p, err)
	}
	sort.Strings(files)
	return files, nil
}

// parseDocuments splits one input into typed documents.
func parseDocuments(source, ext string, b []byte, forced DocType) ([]Document, error) {
	b = bytes.TrimPrefix(b, []byte("\ufeff")) // a UTF-8 byte order mark (Windows editors write one)
	var raws []json.RawMessage
	var err error
	switch ext {
	case ".json":
		raws, err = splitJSON(b)
	case ".yaml", ".yml":
		raws, err = splitYAML(b)
	default:
		if t := bytes.TrimLeft(b, " \t\r\n"); len(t) > 0 && (t[0] == '{' || t[0] == '[') {
			raws, err = splitJSON(b)
		} else {
			raws, err = splitYAML(b)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	raws, err = expandLists(raws)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	docs := make([]Document, 0, len(raws))
	for i, raw := range raws {
		src := source
		if len(raws) > 1 {
			src = fmt.Sprintf("%s#%d", source, i+1)
		}
		if t, doc, ok, err := fromAPIObject(raw); ok || err != nil {
			if err == nil && forced != "" && forced != t {
				err = fmt.Errorf("--type %s, but this is a %s as conctl get prints it", forced, t)
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", src, err)
			}
			docs = append(docs, Document{Source: src, Type: t, Raw: doc})
			continue
		}
		t, err := docTypeOf(source, raw, forced)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", src, err)
		}
		docs = append(docs, Document{Source: src, Type: t, Raw: raw})
	}
	return docs, nil
}

// splitJSON reads a stream of JSON values; a top-level array is a list of
// documents.
func splitJSON(b []byte) ([]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	var out []json.RawMessage
	for {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, jsonError(b, dec.InputOffset(), err)
		}
		if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '[' {
			var list []json.RawMessage
			if err := json.Unmarshal(t, &list); err != nil {
				return nil, fmt.Errorf("invalid JSON: %w", err)
			}
			for _, r := range list {
				out = append(out, compactJSON(r))
			}
			continue
		}
		out = append(out, compactJSON(raw))
	}
	if len(out) == 0 {
		return nil, errors.New("no documents")
	}
	return out, nil
}

func compactJSON(raw json.RawMessage) json.RawMessage {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return raw
	}
	return buf.Bytes()
}

// jsonError names the line and column of a JSON syntax error.
func jsonError(b []byte, fallback int64, err error) error {
	off := fallback
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		off = se.Offset
	case errors.As(err, &te):
		off = te.Offset
	case errors.Is(err, io.ErrUnexpectedEOF):
		off = int64(len(b))
	}
	line, col := 1, 1
	for i := int64(0); i < off && i < int64(len(b)); i++ {
		if b[i] == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return fmt.Errorf("invalid JSON at line %d, column %d: %w", line, col, err)
}

// splitYAML reads the documents of a YAML stream as JSON.
func splitYAML(b []byte) ([]json.RawMessage, error) {
	dec := yaml.NewDecoder(bufio.NewReader(bytes.NewReader(b)))
	var out []json.RawMessage
	for i := 1; ; i++ {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("invalid YAML: %w", err)
		}
		if len(n.Content) == 0 || (n.Content[0].Kind == yaml.ScalarNode && n.Content[0].Tag == "!!null") {
			continue // an empty document (e.g. a trailing ---)
		}
		// Decoding checks the document as YAML (duplicate keys, alias
		// bombs); the value is then read from the nodes, so numbers keep
		// their text rather than passing through a float64.
		var check any
		if err := n.Decode(&check); err != nil {
			return nil, fmt.Errorf("invalid YAML (document %d): %w", i, err)
		}
		v, err := yamlValue(&n)
		if err != nil {
			return nil, fmt.Errorf("invalid YAML (document %d, line %d): %w", i, n.Line, err)
		}
		raw, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("invalid YAML (document %d): %w", i, err)
		}
		out = append(out, raw)
	}
	if len(out) == 0 {
		return nil, errors.New("no documents")
	}
	return out, nil
}

// yamlValue turns a YAML node into values encoding/json writes: numbers
// as json.Number holding the scalar's text when it is a JSON number (so
// 12345678901234567890 and 0.12345678901234567890123 stay exact), strings,
// booleans, null, maps with string keys (merge keys applied) and slices.
func yamlValue(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return yamlValue(n.Content[0])
	case yaml.AliasNode:
		return yamlValue(n.Alias)
	case yaml.SequenceNode:
		out := make([]any, len(n.Content))
		for i, e := range n.Content {
			v, err := yamlValue(e)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = v
		}
		return out, nil
	case yaml.MappingNode:
		return yamlMapping(n)
	}
	switch n.ShortTag() {
	case "!!int", "!!float":
		if jsonNumberRE.MatchString(n.Value) {
			return json.Number(n.Value), nil
		}
	case "!!str", "!!timestamp":
		return n.Value, nil
	}
	var v any
	if err := n.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// jsonNumberRE is a JSON number literal.
var jsonNumberRE = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?$`)

// yamlMapping reads a mapping: its keys must be strings; << merges the
// mappings it names under the keys written beside it.
func yamlMapping(n *yaml.Node) (map[string]any, error) {
	out := map[string]any{}
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		for k.Kind == yaml.AliasNode {
			k = k.Alias
		}
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merges = append(merges, val)
			continue
		}
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			return nil, fmt.Errorf("mapping key %s is not a string", k.Value)
		}
		v, err := yamlValue(val)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k.Value, err)
		}
		out[k.Value] = v
	}
	for _, m := range merges {
		for m.Kind == yaml.AliasNode {
			m = m.Alias
		}
		srcs := []*yaml.Node{m}
		if m.Kind == yaml.SequenceNode {
			srcs = m.Content
		}
		for _, src := range srcs {
			v, err := yamlValue(src)
			if err != nil {
				return nil, err
			}
			mm, ok := v.(map[string]any)
			if !ok {
				return nil, errors.New("<< must name a mapping or a list of mappings")
			}
			for k, e := range mm {
				if _, ok := out[k]; !ok {
					out[k] = e
				}
			}
		}
	}
	return out, nil
}

// docTypeOf types one document: forced, else by its keys, else by the file
// name.
func docTypeOf(source string, raw json.RawMessage, forced DocType) (DocType, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return "", errors.New("a document must be a JSON object (a manifest, providerconfig, reactor binding or resource)")
	}
	if forced != "" {
		return forced, nil
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var fits, marked []DocType
	for _, t := range docTypes {
		shape := docShapes[t]
		if !containsAll(shape.keys, keys) {
			continue
		}
		fits = append(fits, t)
		for _, k := range shape.markers {
			if _, ok := fields[k]; ok {
				marked = append(marked, t)
				break
			}
		}
	}
	switch {
	case len(marked) == 1:
		return marked[0], nil
	case len(fits) == 1:
		return fits[0], nil

	case len(fits) == 0:
		return "", fmt.Errorf("cannot tell what this document is (keys %s fit no manifest, providerconfig, "+
			"reactor binding or resource): check the keys or pass --type", strings.Join(keys, ", "))
	}
	if hint, ok := typeFromFileName(source); ok && slices.Contains(fits, hint) {
		return hint, nil
	}
	if len(marked) == 0 && slices.Equal(fits, []DocType{DocProviderConfig, DocResource}) {
		// kind, name and spec alone: a provider config says is_default
		// (or carries data), so this is a resource.
		return DocResource, nil
	}
	names := make([]string, len(fits))
	for i, t := range fits {
		names[i] = string(t)
	}
	return "", fmt.Errorf("ambiguous document (keys %s fit %s): pass --type", strings.Join(keys, ", "),
		strings.Join(names, " and "))
}

func containsAll(set, keys []string) bool {
	for _, k := range keys {
		if !slices.Contains(set, k) {
			return false
		}
	}
	return true
}

// typeFromFileName reads the fixture naming convention of examples/.
func typeFromFileName(path string) (DocType, bool) {
	base := strings.ToLower(filepath.Base(path))
	base = strings.TrimSuffix(base, filepath.Ext(base))
	switch {
	case strings.HasSuffix(base, ".kind") || strings.HasPrefix(base, "kind-"):
		return DocManifest, true
	case strings.HasPrefix(base, "providerconfig-"):
		return DocProviderConfig, true
	case strings.HasPrefix(base, "reactor-binding-") || strings.HasPrefix(base, "reactorbinding-"):
		return DocReactorBinding, true
	case strings.HasPrefix(base, "resource-"):
		return DocResource, true
	}
	return "", false
}

// decodeStrict decodes a document into v; an unknown (misspelt) key is an
// error.
func decodeStrict(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	return nil
}
