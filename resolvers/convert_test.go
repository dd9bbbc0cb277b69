package resolvers

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/converge-run/converge/core/resource"
)

// The GraphQL model carries no core type; the nested resolvers rebuild the
// core row from it, so the round trip must keep every field.
func TestFromResource_InvertsToResource(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	later := now.Add(time.Hour)
	owner, root := uuid.New(), uuid.New()
	cases := map[string]struct {
		reason string
		in     resource.Resource
	}{
		"Full": {
			reason: "every field set survives the round trip",
			in: resource.Resource{ID: uuid.New(), Kind: "net", Version: "v1", Name: "a",
				Labels: map[string]string{"team": "x"}, Spec: json.RawMessage(`{"cidr":"10.0.0.0/8"}`),
				Status: json.RawMessage(`{"ok":true}`), Phase: resource.PhaseReconciling, Ready: false,
				Generation: 4, SyncedGen: 3, ComposedGen: 4, HealthOK: true, FailureGen: 2, FailureTerminal: true,
				Finalizers: []string{"f"}, DeletionRequestedAt: &now, FrozenUntil: &later, Quarantined: true,
				OwnerID: &owner, RootID: &root, ProviderConfigRef: "impatient", ShardID: 7,
				CreatedAt: now, UpdatedAt: later},
		},
		"Root": {
			reason: "a root has no owner, no root and the default config",
			in: resource.Resource{ID: uuid.New(), Kind: "net", Version: "v1", Name: "b", Labels: map[string]string{},
				Spec: json.RawMessage(`{}`), Phase: resource.PhaseReady, Ready: true, Generation: 1, SyncedGen: 1,
				HealthOK: true, Finalizers: []string{}, CreatedAt: now, UpdatedAt: now},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.in, fromResource(toResource(tc.in))); diff != "" {
				t.Errorf("%s: fromResource(toResource(r)) -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}
