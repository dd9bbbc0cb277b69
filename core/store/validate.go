package store

import (
	"encoding/json"

	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store/internal/dbx"
)

// validateName checks the name rule of resources, provider configs and
// reactor bindings (the tables' CHECK constraints say the same).
func validateName(field, name string) error {
	if !resource.ValidName(name) {
		return invalid(field, "name_invalid",
			"%q "+resource.NameRule, name)
	}
	return nil
}

// MaxLabels caps the labels of one resource (or one selector): with the
// key and value bounds it keeps a resource's labels under ~25 KB.
const MaxLabels = dbx.MaxLabels

// validateLabels checks every key and value (dbx.ValidateLabels).
func validateLabels(field string, labels map[string]string) error {
	return dbx.ValidateLabels(field, labels)
}

// jsonObject checks that doc is a JSON object; empty means {}.
func jsonObject(field string, doc json.RawMessage) (json.RawMessage, error) {
	return dbx.JSONObject(field, doc)
}

// jsonValue checks that doc is JSON; empty means absent (SQL NULL).
func jsonValue(field string, doc json.RawMessage) (*string, error) { return dbx.JSONValue(field, doc) }

func nonNilLabels(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
