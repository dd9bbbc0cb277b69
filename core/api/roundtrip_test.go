package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/membership"
)

// TestContract_EveryQueryAndMutationRoundTrips drives every query and
// mutation of the contract through the HTTP handler on a real database.
func TestContract_EveryQueryAndMutationRoundTrips(t *testing.T) {
	t.Parallel()
	e := newEnv(t)

	// applyKindManifest, kinds, kind
	var k struct {
		ApplyKindManifest struct {
			Name, Version string
			IsReactor     bool
			Reactions     []struct {
				Name, Trigger string
				Emits, Reads  []string
				Verb          *string
			}
			Config   struct{ MaxInflight int }
			Manifest json.RawMessage
		}
	}
	e.ok(`mutation($m: JSON!) { applyKindManifest(manifest: $m) {
		name version isReactor reactions { name trigger emits reads verb } config { maxInflight } manifest } }`,
		map[string]any{"m": json.RawMessage(workerKind)}, &k)
	require.Equal(t, "leaf", k.ApplyKindManifest.Name)
	require.Equal(t, "v1", k.ApplyKindManifest.Version)
	require.Equal(t, "OPERATION", k.ApplyKindManifest.Reactions[1].Trigger)
	require.Equal(t, []string{"OPERATION_OUTPUT"}, k.ApplyKindManifest.Reactions[1].Emits)
	require.Equal(t, []string{"SPEC", "STATUS", "LABELS", "FINALIZERS", "CHILD_STATUS"}, k.ApplyKindManifest.Reactions[0].Reads,
		"a reaction that declares no reads receives every part")
	require.JSONEq(t, workerKind, string(k.ApplyKindManifest.Manifest))

	// Reaction.reads: what the manifest declares, in canonical order; [] is identity only.
	var dry struct {
		ApplyKindManifest struct {
			Reactions []struct {
				Name  string
				Reads []string
			}
		}
	}
	e.ok(`mutation($m: JSON!) { applyKindManifest(manifest: $m, dryRun: true) { reactions { name reads } } }`,
		map[string]any{"m": json.RawMessage(`{"kind":"net","reactions":[
			{"name":"compose","trigger":"specChange","emits":["children","status"],"reads":["labels","spec"]},
			{"name":"rollup","trigger":"childrenSettled","emits":["status"],"reads":["childStatus"]},
			{"name":"probe","trigger":"resync","emits":["status"],"reads":[]}]}`)}, &dry)
	require.Len(t, dry.ApplyKindManifest.Reactions, 3)
	require.Equal(t, []string{"SPEC", "LABELS"}, dry.ApplyKindManifest.Reactions[0].Reads)
	require.Equal(t, []string{"CHILD_STATUS"}, dry.ApplyKindManifest.Reactions[1].Reads)
	require.Equal(t, []string{}, dry.ApplyKindManifest.Reactions[2].Reads)
	e.manifest(reactorKind)

	var kinds struct {
		Kinds []struct {
			Name       string
			IsReactor  bool
			SpecSchema json.RawMessage
		}
		Kind struct {
			Name   string
			Config struct{ OrphanGraceSecs int }
		}
		Missing *struct{ Name string }
	}
	e.ok(`{ kinds { name isReactor specSchema } kind(name: "leaf") { name config { orphanGraceSecs } }
		missing: kind(name: "nope") { name } }`, nil, &kinds)
	require.Len(t, kinds.Kinds, 2)
	require.Equal(t, "leaf", kinds.Kinds[0].Name)
	require.True(t, kinds.Kinds[1].IsReactor)
	require.JSONEq(t, `{"type":"object","properties":{"size":{"type":"integer"}}}`, string(kinds.Kinds[0].SpecSchema))
	require.Nil(t, kinds.Missing)

	// updateKindConfig
	var kc struct {
		UpdateKindConfig struct{ MaxInflight, OrphanGraceSecs int }
	}
	e.ok(`mutation { updateKindConfig(kind: "leaf", version: "v1", input: {maxInflight: 7}) { maxInflight orphanGraceSecs } }`, nil, &kc)
	require.Equal(t, 7, kc.UpdateKindConfig.MaxInflight)

	// applyProviderConfig, providerConfigs
	var pc struct {
		ApplyProviderConfig struct {
			ID, Kind, Name string
			IsDefault      bool
			Spec           json.RawMessage
			Owner          *struct{ ID string }
		}
	}
	e.ok(`mutation { applyProviderConfig(input: {kind: "leaf", name: "main", isDefault: true, spec: {region: "eu"}}) {
		id kind name isDefault spec owner { id } } }`, nil, &pc)
	require.True(t, pc.ApplyProviderConfig.IsDefault)
	require.JSONEq(t, `{"region":"eu"}`, string(pc.ApplyProviderConfig.Spec))
	e.ok(`mutation { applyProviderConfig(input: {kind: "leaf", name: "alt", isDefault: false, spec: {}, data: [1]}) { id } }`, nil, nil)
	var pcs struct {
		ProviderConfigs struct {
			Items      []struct{ Name string }
			NextCursor *string
		}
	}
	e.ok(`{ providerConfigs(kind: "leaf", first: 1) { items { name } nextCursor } }`, nil, &pcs)
	require.Len(t, pcs.ProviderConfigs.Items, 1)
	require.NotNil(t, pcs.ProviderConfigs.NextCursor)
	e.ok(`query($a: String) { providerConfigs(kind: "leaf", first: 1, after: $a) { items { name } nextCursor } }`,
		map[string]any{"a": *pcs.ProviderConfigs.NextCursor}, &pcs)
	require.Equal(t, "main", pcs.ProviderConfigs.Items[0].Name)

	// applyResource, resource, resourceById, resources, phaseCounts
	id := e.apply("leaf", "a", `{size: 1}`, `labels: {team: "x"}`)
	e.apply("leaf", "b", `{size: 2}`, `providerConfigRef: "alt"`)
	var got struct {
		Resource struct {
			ID, Name, Phase string
			Ready           bool
			Generation      int
			Labels, Spec    json.RawMessage
			Status          json.RawMessage
			Conditions      []struct{ Type, Status, Reason string }
			ProviderConfig  struct{ Name string }
			Definition      struct{ Name string }
			Owner           *struct{ ID string }
			Dependencies    []struct{ Upstream struct{ ID string } }
			Dependents      []struct{ ID string }
			Children        struct{ Items []struct{ ID string } }
			History         struct {
				Items []struct{ Reason, Actor, Type string }
			}
			SyncedGeneration int
		}
		ResourceByID struct{ Name string }
		B            struct{ ProviderConfig struct{ Name string } }
		None         *struct{ ID string }
	}
	e.ok(`query($id: ID!) {
		resource(kind: "leaf", name: "a") { id name phase ready generation syncedGeneration labels spec status
			conditions { type status reason } providerConfig { name } definition { name } owner { id }
			dependencies { upstream { id } } dependents { id } children { items { id } }
			history { items { reason actor type } } }
		resourceById(id: $id) { name }
		b: resource(kind: "leaf", name: "b") { providerConfig { name } }
		none: resource(kind: "leaf", name: "zzz") { id } }`, map[string]any{"id": id}, &got)
	require.Equal(t, id, got.Resource.ID)
	require.Equal(t, "RECONCILING", got.Resource.Phase)
	require.JSONEq(t, `{"team":"x"}`, string(got.Resource.Labels))
	require.JSONEq(t, `{"size":1}`, string(got.Resource.Spec))
	require.Equal(t, "null", string(got.Resource.Status))
	require.Equal(t, "Ready", got.Resource.Conditions[0].Type)
	require.Equal(t, "main", got.Resource.ProviderConfig.Name)
	require.Equal(t, "alt", got.B.ProviderConfig.Name)
	require.Equal(t, "leaf", got.Resource.Definition.Name)
	require.Equal(t, "a", got.ResourceByID.Name)
	require.Nil(t, got.None)
	require.Equal(t, "Created", got.Resource.History.Items[0].Reason)
	require.Equal(t, "api", got.Resource.History.Items[0].Actor)

	var list struct {
		Resources struct {
			Items      []struct{ Name string }
			NextCursor *string
		}
		PhaseCounts []struct {
			Phase string
			Count int
		}
	}
	e.ok(`{ resources(kind: "leaf", phases: [RECONCILING], labels: {team: "x"}) { items { name } nextCursor }
		phaseCounts(kind: "leaf") { phase count } }`, nil, &list)
	require.Len(t, list.Resources.Items, 1)
	require.Nil(t, list.Resources.NextCursor)
	require.Len(t, list.PhaseCounts, 7)
	counts := map[string]int{}
	for _, c := range list.PhaseCounts {
		counts[c.Phase] = c.Count
	}
	require.Equal(t, 2, counts["RECONCILING"])

	// runOperation, operation
	var op struct {
		RunOperation struct {
			ID, Verb, State string
			Input           json.RawMessage
			Resource        struct{ Name string }
		}
	}
	e.ok(`mutation { runOperation(kind: "leaf", name: "a", verb: "flip", input: {n: 1}) { id verb state input resource { name } } }`, nil, &op)
	require.Equal(t, "PENDING", op.RunOperation.State)
	require.Equal(t, "a", op.RunOperation.Resource.Name)
	var op2 struct {
		Operation struct{ Verb string }
		Ops       struct {
			Operations []struct{ ID string }
		}
	}
	e.ok(`query($id: ID!) { operation(id: $id) { verb } ops: resource(kind: "leaf", name: "a") { operations { id } } }`,
		map[string]any{"id": op.RunOperation.ID}, &op2)
	require.Equal(t, "flip", op2.Operation.Verb)
	require.Len(t, op2.Ops.Operations, 1)

	// quarantine, unquarantine, resync, delete
	var q struct {
		QuarantineResource struct {
			Phase       string
			Quarantined bool
		}
	}
	e.ok(`mutation { quarantineResource(kind: "leaf", name: "a") { phase quarantined } }`, nil, &q)
	require.Equal(t, "QUARANTINED", q.QuarantineResource.Phase)
	var uq struct{ UnquarantineResource struct{ Phase string } }
	e.ok(`mutation { unquarantineResource(kind: "leaf", name: "a") { phase } }`, nil, &uq)
	require.Equal(t, "RECONCILING", uq.UnquarantineResource.Phase)
	var rs struct{ ResyncResource struct{ Name string } }
	e.ok(`mutation { resyncResource(kind: "leaf", name: "a") { name } }`, nil, &rs)
	require.Equal(t, "a", rs.ResyncResource.Name)
	var del struct{ DeleteResource struct{ Phase string } }
	e.ok(`mutation { deleteResource(kind: "leaf", name: "b") { phase } }`, nil, &del)
	require.Equal(t, "DELETING", del.DeleteResource.Phase)

	// reactor bindings
	var b struct {
		ApplyReactorBinding struct {
			Name, Transition string
			Enabled          bool
			LabelMatch       json.RawMessage
		}
	}
	e.ok(`mutation { applyReactorBinding(input: {name: "on-fail", watchKind: "leaf", transition: FAILED, reactor: "notifier",
		labelMatch: {team: "x"}}) { name transition enabled labelMatch } }`, nil, &b)
	require.Equal(t, "FAILED", b.ApplyReactorBinding.Transition)
	require.True(t, b.ApplyReactorBinding.Enabled)
	var bs struct{ ReactorBindings []struct{ Name string } }
	e.ok(`{ reactorBindings(watchKind: "leaf") { name } }`, nil, &bs)
	require.Len(t, bs.ReactorBindings, 1)
	var db struct{ DeleteReactorBinding bool }
	e.ok(`mutation { deleteReactorBinding(name: "on-fail") }`, nil, &db)
	require.True(t, db.DeleteReactorBinding)
	var dp struct{ DeleteProviderConfig bool }
	e.ok(`mutation { deleteProviderConfig(kind: "leaf", name: "main") }`, nil, &dp)
	require.True(t, dp.DeleteProviderConfig)

	// clusterMembers, version, viewer
	_, err := membership.New(e.pool).Upsert(e.ctx, membership.Member{ID: "pod-1", Role: membership.RoleAll,
		Shards: &shard.Range{Lo: 0, Hi: 256}, Host: "h", PID: 7, Version: "v9"})
	require.NoError(t, err)
	var cm struct {
		ClusterMembers []struct {
			ID, Role, Status string
			ShardLo, ShardHi *int
			Pid              int
			Config           json.RawMessage
		}
		Version string
		Viewer  struct {
			Role         string
			AuthRequired bool
		}
	}
	e.ok(`{ clusterMembers { id role status shardLo shardHi pid config } version viewer { role authRequired } }`, nil, &cm)
	require.Len(t, cm.ClusterMembers, 1)
	require.Equal(t, "READY", cm.ClusterMembers[0].Status)
	require.Equal(t, "ALL", cm.ClusterMembers[0].Role)
	require.Equal(t, 256, *cm.ClusterMembers[0].ShardHi)
	require.Equal(t, "v-test", cm.Version)
	require.Equal(t, struct {
		Role         string
		AuthRequired bool
	}{"ADMIN", false}, cm.Viewer)
}

// TestEndpoints_GETQueriesAndSDL: GET serves queries (never mutations) and
// /graphql/schema.graphql the schema.
func TestEndpoints_GETQueriesAndSDL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	get := func(q string) (int, string) {
		resp, err := http.Get(e.srv.URL + "/graphql?query=" + url.QueryEscape(q))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get(`{ version }`)
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"data":{"version":"v-test"}}`, body)
	// A mutation sent with GET is refused (405, Allow: POST) with a code;
	// so are a method no transport takes and a POST whose body is not JSON.
	refused := func(resp *http.Response, status int, allow, has string) {
		t.Helper()
		defer resp.Body.Close()
		var out struct {
			Data   any
			Errors []struct {
				Message    string
				Extensions map[string]any
			}
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		require.Equal(t, status, resp.StatusCode)
		require.Equal(t, allow, resp.Header.Get("Allow"))
		require.Len(t, out.Errors, 1)
		require.Contains(t, out.Errors[0].Message, has)
		require.Equal(t, "BAD_USER_INPUT", out.Errors[0].Extensions["code"])
		require.Nil(t, out.Data)
	}
	resp, err := http.Get(e.srv.URL + "/graphql?query=" + url.QueryEscape(`mutation { deleteReactorBinding(name: "x") }`))
	require.NoError(t, err)
	refused(resp, http.StatusMethodNotAllowed, "POST", "a GET request runs queries only")
	req, err := http.NewRequest(http.MethodPut, e.srv.URL+"/graphql", strings.NewReader(`{"query":"{ version }"}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	refused(resp, http.StatusMethodNotAllowed, "GET, POST", "method PUT is not allowed")
	resp, err = http.Post(e.srv.URL+"/graphql", "text/plain", strings.NewReader(`{"query":"{ version }"}`))
	require.NoError(t, err)
	refused(resp, http.StatusUnsupportedMediaType, "", `Content-Type must be application/json, not "text/plain"`)

	resp, err = http.Get(e.srv.URL + "/graphql/schema.graphql")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(b), "type Resource {")
	require.Contains(t, string(b), "resourceChanged(")
	require.NotContains(t, string(b), "type __Schema")
	if diff := cmp.Diff("text/plain; charset=utf-8", resp.Header.Get("Content-Type")); diff != "" {
		t.Error(diff)
	}
	require.True(t, strings.HasPrefix(resp.Header.Get("X-Request-Id"), ""))
}
