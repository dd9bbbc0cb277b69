package dbx

import (
	"bytes"
	"encoding/json"
	"regexp"
	"sort"
	"strings"

	"github.com/converge-run/converge/core/jsonb"
)

// Kubernetes label syntax: a key is an optional DNS-subdomain prefix and
// "/", then a name of at most 63 characters; a value is empty or a name.
var (
	labelNameRE   = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	labelPrefixRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

const (
	maxLabelName   = 63
	maxLabelPrefix = 253
	// MaxLabels caps the labels of one resource (or one selector): with the
	// key and value bounds it keeps a resource's labels under ~25 KB.
	MaxLabels = 64
)

// ValidateLabels checks every key and value (in key order, so the reported
// violation is stable). field is the input's name ("labels", "labelMatch").
func ValidateLabels(field string, labels map[string]string) error {
	if len(labels) > MaxLabels {
		return Invalid(field, "label_count", "%d labels; at most %d are allowed", len(labels), MaxLabels)
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := validateLabelKey(field, k); err != nil {
			return err
		}
		v := labels[k]
		if v != "" && (len(v) > maxLabelName || !labelNameRE.MatchString(v)) {
			return Invalid(field, "label_value_invalid",
				"value %q of label %q must be empty or at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit", v, k)
		}
	}
	return nil
}

func validateLabelKey(field, k string) error {
	name := k
	if i := strings.LastIndexByte(k, '/'); i >= 0 {
		prefix := k[:i]
		name = k[i+1:]
		if prefix == "" || len(prefix) > maxLabelPrefix || !labelPrefixRE.MatchString(prefix) {
			return Invalid(field, "label_key_invalid",
				"label key %q: the prefix must be a DNS subdomain (lowercase, at most 253 characters)", k)
		}
	}
	if name == "" || len(name) > maxLabelName || !labelNameRE.MatchString(name) {
		return Invalid(field, "label_key_invalid",
			"label key %q: the name must be at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit", k)
	}
	return nil
}

// JSONObject checks that doc is a JSON object Postgres stores as jsonb
// (jsonb.Check); empty means {}.
func JSONObject(field string, doc json.RawMessage) (json.RawMessage, error) {
	doc = bytes.TrimSpace(doc)
	if len(doc) == 0 {
		return json.RawMessage(`{}`), nil
	}
	if err := jsonb.Check(doc); err != nil {
		return nil, Invalid(field, "malformed", "%s", err)
	}
	if doc[0] != '{' {
		return nil, Invalid(field, "type", "must be a JSON object")
	}
	return doc, nil
}

// JSONValue checks that doc is JSON Postgres stores as jsonb (jsonb.Check);
// empty means absent (SQL NULL).
func JSONValue(field string, doc json.RawMessage) (*string, error) {
	doc = bytes.TrimSpace(doc)
	if len(doc) == 0 || bytes.Equal(doc, []byte("null")) {
		return nil, nil
	}
	if err := jsonb.Check(doc); err != nil {
		return nil, Invalid(field, "malformed", "%s", err)
	}
	s := string(doc)
	return &s, nil
}
