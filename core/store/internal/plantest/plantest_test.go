package plantest

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// An index read with no condition, outside a LIMIT, is a whole index read,
// whether an index scan walks it or a bitmap index scan collects it; one
// with a condition, one under a LIMIT and one that never ran are not.
func TestWholeIndexes(t *testing.T) {
	const plan = `{"Query Text": "q", "Plan": {"Node Type": "Nested Loop", "Plans": [
	  {"Node Type": "Bitmap Heap Scan", "Relation Name": "resource_phases", "Actual Loops": 1, "Plans": [
	    {"Node Type": "Bitmap Index Scan", "Index Name": "idx_resource_phases_lagging", "Actual Loops": 1}]},
	  {"Node Type": "Bitmap Heap Scan", "Relation Name": "resources", "Actual Loops": 1, "Plans": [
	    {"Node Type": "Bitmap Index Scan", "Index Name": "resources_pkey", "Index Cond": "(id = $1)", "Actual Loops": 1}]},
	  {"Node Type": "Index Scan", "Relation Name": "resources", "Index Name": "resources_pkey", "Actual Loops": 1},
	  {"Node Type": "Index Scan", "Relation Name": "resource_deps", "Index Name": "resource_deps_pkey", "Actual Loops": 0},
	  {"Node Type": "Limit", "Plans": [
	    {"Node Type": "Index Scan", "Relation Name": "resource_labels", "Index Name": "resource_labels_pkey"}]}]}}`
	var p Plan
	require.NoError(t, json.Unmarshal([]byte(plan), &p))
	require.Equal(t, []Scan{
		{"Bitmap Index Scan", "resource_phases", "idx_resource_phases_lagging"},
		{"Index Scan", "resources", "resources_pkey"},
	}, p.wholeIndexes())
}
