package store

import (
	"context"
	"testing"
)

// TestMapErr_ParsesTheRealManifestCheck writes an illegal manifest past the
// Go validation, straight at the table, so the DB's own message is parsed.
func TestMapErr_ParsesTheRealManifestCheck(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, err := e.pool.Exec(context.Background(), `INSERT INTO kind_manifest (kind, version, manifest) VALUES ('a', 'v1', $1)`,
		`{"kind":"a","reactions":[{"name":"o","trigger":"operation","emits":["operationOutput"]}]}`)
	requireInvalid(t, mapErr(err, "kind a/v1"), "manifest/reactions/0/verb", "operation_requires_verb")
}
