package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// The objects conctl get -o json|yaml prints are documents apply -f takes
// back: kubectl's habit of "get -o yaml > f; edit f; apply -f f". An API
// object (camelCase, with server-set fields such as id, phase, createdAt)
// is turned into its snake_case document; the server-set fields are
// ignored, as kubectl ignores status on apply. A listing ({"items": [...],
// "nextCursor": ...}) is its items.

// expandLists replaces each listing document by its items.
func expandLists(raws []json.RawMessage) ([]json.RawMessage, error) {
	out := make([]json.RawMessage, 0, len(raws))
	for _, raw := range raws {
		var fields map[string]json.RawMessage
		if json.Unmarshal(raw, &fields) != nil || !isListing(fields) {
			out = append(out, raw)
			continue
		}
		var items []json.RawMessage
		if err := json.Unmarshal(fields["items"], &items); err != nil {
			return nil, fmt.Errorf("a listing's items must be an array of objects: %w", err)
		}
		out = append(out, items...)
	}
	return out, nil
}

// isListing: the keys are items (an array) and, optionally, nextCursor.
func isListing(fields map[string]json.RawMessage) bool {
	items, ok := fields["items"]
	if !ok || len(fields) > 2 {
		return false
	}
	if _, ok := fields["nextCursor"]; len(fields) == 2 && !ok {
		return false
	}
	t := strings.TrimSpace(string(items))
	return strings.HasPrefix(t, "[")
}

// apiObject is the union of the fields apply reads from printed objects.
type apiObject struct {
	ID        *string `json:"id"`
	CreatedAt *string `json:"createdAt"`
	UpdatedAt *string `json:"updatedAt"`

	Kind    string          `json:"kind"`
	Name    string          `json:"name"`
	Version string          `json:"version"`
	Labels  json.RawMessage `json:"labels"`
	Spec    json.RawMessage `json:"spec"`
	Phase   *string         `json:"phase"`
	Gen     *int            `json:"generation"`
	PCRef   *string         `json:"providerConfigRef"`

	Manifest json.RawMessage `json:"manifest"`
	IsReact  *bool           `json:"isReactor"`

	IsDefault *bool           `json:"isDefault"`
	Data      json.RawMessage `json:"data"`
	Owner     *struct {
		Kind string `json:"kind"`
		Name string `json:"name"`
	} `json:"owner"`

	WatchKind  *string         `json:"watchKind"`
	Transition string          `json:"transition"`
	Reactor    string          `json:"reactor"`
	LabelMatch json.RawMessage `json:"labelMatch"`
	Enabled    *bool           `json:"enabled"`

	Verb *string `json:"verb"`
	Role *string `json:"role"`
}

// fromAPIObject recognises an object as conctl get prints it (it has a
// createdAt or updatedAt, which no hand-written document has) and returns
// its type and snake_case document. ok is false for anything else.
func fromAPIObject(raw json.RawMessage) (DocType, json.RawMessage, bool, error) {
	var o apiObject
	if err := json.Unmarshal(raw, &o); err != nil {
		return "", nil, false, nil //nolint:nilerr // not an API object: docTypeOf reports the shape
	}
	if o.CreatedAt == nil && o.UpdatedAt == nil {
		return "", nil, false, nil
	}
	var (
		t   DocType
		doc any
		err error
	)
	switch {
	case o.IsReact != nil || !isNull(o.Manifest):
		t = DocManifest
		if isNull(o.Manifest) {
			return t, nil, true, errors.New("this kind has no manifest field: print it with conctl get kind NAME -o yaml")
		}
		return t, o.Manifest, true, nil
	case o.WatchKind != nil:
		t = DocReactorBinding
		doc = reactorBindingDoc{Name: o.Name, WatchKind: *o.WatchKind, Transition: strings.ToLower(o.Transition),
			Reactor: o.Reactor, LabelMatch: nullable(o.LabelMatch), Enabled: o.Enabled}
	case o.IsDefault != nil:
		t = DocProviderConfig
		if o.Owner != nil {
			return t, nil, true, fmt.Errorf("providerconfig %s/%s is composed by %s/%s: edit its owner instead",
				o.Kind, o.Name, o.Owner.Kind, o.Owner.Name)
		}
		doc = providerConfigDoc{Kind: o.Kind, Name: o.Name, IsDefault: *o.IsDefault, Spec: o.Spec, Data: nullable(o.Data)}
	case o.Phase != nil || o.Gen != nil:
		t = DocResource
		if isNull(o.Spec) {
			return t, nil, true, fmt.Errorf("resource %s/%s has no spec here: print it with conctl get %s %s -o yaml",
				o.Kind, o.Name, o.Kind, o.Name)
		}
		d := resourceDoc{Kind: o.Kind, Name: o.Name, Version: o.Version, Labels: nullable(o.Labels), Spec: o.Spec}
		if o.PCRef != nil {
			d.ProviderConfigRef = *o.PCRef
		}
		doc = d
	case o.Verb != nil:
		return "", nil, true, errors.New("an operation cannot be applied (run one with conctl run)")
	case o.Role != nil:
		return "", nil, true, errors.New("a cluster member cannot be applied")
	default:
		return "", nil, false, nil
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return t, nil, true, fmt.Errorf("encode the %s document: %w", t, err)
	}
	return t, b, true, nil
}

// nullable drops a JSON null (omitted from the document).
func nullable(raw json.RawMessage) json.RawMessage {
	if isNull(raw) {
		return nil
	}
	return raw
}
