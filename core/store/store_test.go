package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/db/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Fixture manifests.
const (
	vpcManifest = `{
		"kind": "vpc",
		"description": "a leaf network",
		"spec_schema": {
			"type": "object",
			"properties": {
				"cidr": {"type": "string", "pattern": "^[0-9.]+/[0-9]+$"},
				"tags": {"type": "array", "items": {"type": "string"}}
			},
			"required": ["cidr"],
			"additionalProperties": false
		},
		"config_schema": {
			"type": "object",
			"properties": {"region": {"type": "string"}},
			"additionalProperties": false
		},
		"reactions": [
			{"name": "work", "trigger": "specChange", "emits": ["status"]},
			{"name": "flowlogs", "trigger": "operation", "emits": ["operationOutput"], "verb": "enable_flow_logs"}
		],
		"max_inflight": 5
	}`
	noopManifest = `{
		"kind": "noop",
		"reactions": [{"name": "work", "trigger": "specChange", "emits": ["status"]}]
	}`
	sinkManifest = `{
		"kind": "statussink",
		"config_schema": {"type": "object", "properties": {"endpoint": {"type": "string"}}},
		"reactions": [{"name": "react", "trigger": "reactor", "emits": ["sideEffect"]}]
	}`
)

type env struct {
	pool  *pgxpool.Pool
	store *Store
}

// newEnv is a store over a fresh, migrated database.
func newEnv(t *testing.T) env {
	t.Helper()
	pool := pgtest.Pool(t)
	return env{pool: pool, store: New(pool, nil)}
}

// newEnvWithKinds also applies the fixture manifests.
func newEnvWithKinds(t *testing.T) env {
	t.Helper()
	e := newEnv(t)
	for _, m := range []string{vpcManifest, noopManifest, sinkManifest} {
		_, _, err := e.store.ApplyManifest(context.Background(), []byte(m))
		require.NoError(t, err)
	}
	return e
}

func (e env) apply(t *testing.T, in ApplyResourceInput) resource.Resource {
	t.Helper()
	r, _, err := e.store.ApplyResource(context.Background(), in)
	require.NoError(t, err)
	return r
}

func (e env) noop(t *testing.T, name string, labels map[string]string) resource.Resource {
	t.Helper()
	return e.apply(t, ApplyResourceInput{Kind: "noop", Name: name, Labels: labels, Spec: json.RawMessage(`{"n": 1}`)})
}

// scalars are the status-model columns tests set directly: the one place
// tests write SQL, standing in for the drainer, the composer and the reaper.
type scalars struct {
	generation, syncedGen, failureGen int64
	healthOK                          bool
	frozen                            string // "", "infinity" or "future"
	deleting                          bool
}

func (e env) setScalars(t *testing.T, id uuid.UUID, s scalars) {
	t.Helper()
	var frozen any
	switch s.frozen {
	case "infinity":
		frozen = "infinity"
	case "future":
		frozen = time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
	}
	var deleting any
	if s.deleting {
		deleting = time.Now().UTC().Format(time.RFC3339Nano)
	}
	_, err := e.pool.Exec(context.Background(), `
		UPDATE resources SET generation = $2, synced_gen = $3, failure_gen = $4, health_ok = $5,
		       frozen_until = $6::timestamptz, deletion_requested_at = $7::timestamptz
		 WHERE id = $1`, id, s.generation, s.syncedGen, s.failureGen, s.healthOK, frozen, deleting)
	require.NoError(t, err)
}

// setOwner makes child a composed child of owner (the composer's write).
func (e env) setOwner(t *testing.T, child, owner uuid.UUID) {
	t.Helper()
	_, err := e.pool.Exec(context.Background(), `UPDATE resources SET owner_id = $2, root_id = $2 WHERE id = $1`, child, owner)
	require.NoError(t, err)
}

// tableCounts counts the rows of every table a store write touches, to
// assert that a rejected write wrote nothing.
func (e env) tableCounts(t *testing.T) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, table := range []string{"kind_manifest", "kind_config", "resources", "resource_events",
		"resource_phase_deltas", "resource_labels", "providerconfigs", "reactor_bindings", "resource_operations",
		"work_queue", "lifecycle_outbox"} {
		var n int64
		require.NoError(t, e.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n))
		out[table] = n
	}
	return out
}

// requireInvalid asserts err is an *InvalidError on field with rule.
func requireInvalid(t *testing.T, err error, field, rule string) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, ErrInvalid)
	var ie *InvalidError
	require.True(t, errors.As(err, &ie), "not an *InvalidError: %v", err)
	if diff := cmp.Diff(fmt.Sprintf("%s [%s]", field, rule), fmt.Sprintf("%s [%s]", ie.Field, ie.Rule)); diff != "" {
		t.Fatalf("field [rule] (-want +got):\n%s\nerror: %v", diff, err)
	}
}

func ptr[T any](v T) *T { return &v }
