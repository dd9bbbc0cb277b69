package manifest

import (
	"encoding/json"
	"slices"
)

// DroppedRequired lists the top-level fields the old spec schema requires
// that the new one no longer declares at all (absent from its properties
// while it declares properties, and no longer required): a stored
// resource carrying such a field holds data the new schema no longer
// describes, even when it would still validate. A field that stays declared
// but is no longer required is not dropped. Sorted; nil when nothing is.
func DroppedRequired(oldSchema, newSchema json.RawMessage) []string {
	var o, n struct {
		Required   []string                   `json:"required"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if len(oldSchema) == 0 || json.Unmarshal(oldSchema, &o) != nil {
		return nil
	}
	if len(newSchema) == 0 || json.Unmarshal(newSchema, &n) != nil || n.Properties == nil {
		// untyped (or no properties declared): every field is still allowed
		return nil
	}
	var out []string
	for _, f := range o.Required {
		if _, ok := n.Properties[f]; !ok && !slices.Contains(n.Required, f) && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return out
}
