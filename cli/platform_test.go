package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/examples/apply"
	"github.com/converge-run/converge/examples/classic"
)

// TestApply_AnotherVersionMigratesLiveUnderItsWorker: the classic worker
// serves vpc v1 and v2 side by side; a v1 vpc re-applied at v2 moves to v2
// live and converges under the v2 provider, while another stays at v1 and
// converges under v1. The Kinds page's figures follow.
func TestApply_AnotherVersionMigratesLiveUnderItsWorker(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{})
	ctx := context.Background()
	must(t, s.conctl("apply", "-f", filepath.Join(classicFixtures, "vpc.kind.json"),
		"-f", filepath.Join(classicFixtures, "vpc-v2.kind.json")))
	for _, name := range []string{"moves", "stays"} {
		r := must(t, s.conctlIn(fmt.Sprintf(`{"kind":"vpc","name":%q,"version":"v1","spec":{"cidr":"10.0.0.0/24","account_id":"acct-1"}}`,
			name), "apply", "-f", "-"))
		require.Equal(t, "resource/vpc/"+name+" created\n", r.stdout)
	}
	for _, name := range []string{"moves", "stays"} {
		v := s.WaitPhase("vpc", name, resource.PhaseReady, 90*time.Second)
		require.NotContains(t, decodeMap(t, v.Status), "api_version", "the v1 provider reconciled it")
	}

	r := must(t, s.conctlIn(`{"kind":"vpc","name":"moves","version":"v2","spec":{"cidr":"10.0.0.0/24","account_id":"acct-1","ipv6":true}}`,
		"apply", "-f", "-"))
	require.Equal(t, "resource/vpc/moves migrated (v1 → v2)\n", r.stdout)
	var moved resource.Resource
	apptest.WaitFor(t, 90*time.Second, "vpc/moves converges at v2", func() bool {
		var err error
		moved, err = s.store.GetResource(ctx, "vpc", "moves")
		return err == nil && moved.Phase == resource.PhaseReady && moved.SyncedGen == 2
	})
	require.Equal(t, "v2", moved.Version)
	status := decodeMap(t, moved.Status)
	require.Equal(t, "v2", status["api_version"], "the v2 provider reconciled it")
	require.NotEmpty(t, status["ipv6_cidr"], "with the v2-only field")
	stays, err := s.store.GetResource(ctx, "vpc", "stays")
	require.NoError(t, err)
	require.Equal(t, "v1", stays.Version)
	require.Equal(t, resource.PhaseReady, stays.Phase)

	page, err := s.store.ListEvents(ctx, moved.ID, 20, "")
	require.NoError(t, err)
	var reasons []string
	for _, e := range page.Items {
		reasons = append(reasons, e.Reason)
	}
	require.Contains(t, reasons, resource.ReasonVersionMigrated)
	r = must(t, s.conctl("history", "vpc/moves", "--diff"))
	require.Contains(t, r.stdout, "generation 2  VersionMigrated  by api")
	require.Contains(t, r.stdout, "  version v1 -> v2\n  + spec/ipv6: true\n", "the migration is kept, with its version")

	// One resource per version, both served by the stack's one member.
	apptest.WaitFor(t, 30*time.Second, "both versions counted and served", func() bool {
		for _, v := range []string{"v1", "v2"} {
			u, err := s.store.KindUsage(ctx, manifest.KindVersion{Kind: "vpc", Version: v}, 3*s.Process.Config.HeartbeatEvery)
			if err != nil || u.Resources != 1 || u.ServedBy != 1 {
				return false
			}
		}
		return true
	})
	got := gqlData(t, s.server, `{ kinds { name version usage { resources servedBy } } }`)
	require.Contains(t, got, `{"name":"vpc","version":"v1","usage":{"resources":1,"servedBy":1}}`)
	require.Contains(t, got, `{"name":"vpc","version":"v2","usage":{"resources":1,"servedBy":1}}`)

	// A kind with two versions is edited one version at a time.
	r = s.conctlEnv(map[string]string{"EDITOR": "true"}, "edit", "kind", "vpc")
	require.Equal(t, 1, r.code, "which version?")
	require.Contains(t, r.stderr, "kind vpc has versions v1, v2: name one")
	ed := writeEditor(t, `sed -i 's/task_deadline_secs: 30$/task_deadline_secs: 31/' "$1"`)
	r = must(t, s.conctlEnv(map[string]string{"EDITOR": ed}, "edit", "kind", "vpc", "--version", "v2"))
	require.Equal(t, "manifest/vpc configured\n", r.stdout)
	require.Contains(t, must(t, s.conctl("get", "kind", "vpc", "--version", "v2", "-o", "yaml")).stdout, "task_deadline_secs: 31\n")
	require.Contains(t, must(t, s.conctl("get", "kind", "vpc", "--version", "v1", "-o", "yaml")).stdout, "task_deadline_secs: 30\n",
		"v1 is left as it was")

	// v1 cannot go while vpc/stays is an instance of it; once it moves, it can.
	r = s.conctl("kind", "delete", "vpc", "--version", "v1")
	require.NotEqual(t, 0, r.code)
	require.Contains(t, r.stderr, "kind vpc/v1 still has 1 resource(s): stays")
	must(t, s.conctlIn(`{"kind":"vpc","name":"stays","version":"v2","spec":{"cidr":"10.0.0.0/24","account_id":"acct-1"}}`,
		"apply", "-f", "-"))
	require.Equal(t, "kind/vpc v1 deleted\n", must(t, s.conctl("kind", "delete", "vpc", "--version", "v1")).stdout)
}

// TestApply_BreakingManifestRefusedWithResourcesNamedThenAccepted: the
// schema-stability gate over the API and conctl.
func TestApply_BreakingManifestRefusedWithResourcesNamedThenAccepted(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{noWorker: true})
	must(t, s.conctl("apply", "-f", filepath.Join(classicFixtures, "vpc.kind.json")))
	for _, name := range []string{"a", "b"} {
		must(t, s.conctlIn(fmt.Sprintf(`{"kind":"vpc","name":%q,"spec":{"cidr":"10.0.0.0/24","team":"red"}}`, name), "apply", "-f", "-"))
	}
	must(t, s.conctlIn(`{"kind":"vpc","name":"c","spec":{"cidr":"10.0.1.0/24"}}`, "apply", "-f", "-"))

	breaking := manifestEdit(t, "vpc.kind.json", func(m map[string]any) {
		props := m["spec_schema"].(map[string]any)["properties"].(map[string]any)
		props["team"] = map[string]any{"type": "integer"}
	})
	r := s.conctlIn(breaking, "apply", "-f", "-")
	require.NotEqual(t, 0, r.code, "refused")
	require.Equal(t, "Error: apply manifest/vpc (stdin): CONFLICT: the new spec_schema of kind vpc/v1 breaks 2 stored "+
		"resource(s): a, b; fields: spec/team [type] (publish the change as a new version, or re-apply with "+
		"acceptBreaking to accept it)\n", r.stderr, "the refusal docs/implementing-a-provider.md prints")

	body := graphqlRaw(t, s.server, `mutation($m: JSON!) { applyKindManifest(manifest: $m) { manifestGeneration } }`,
		map[string]any{"m": json.RawMessage(breaking)})
	var resp struct {
		Errors []struct {
			Extensions map[string]any `json:"extensions"`
		} `json:"errors"`
	}
	require.NoError(t, json.Unmarshal(body, &resp), "%s", body)
	require.Len(t, resp.Errors, 1, "%s", body)
	ext := resp.Errors[0].Extensions
	require.Equal(t, "CONFLICT", ext["code"])
	require.Equal(t, "breaking_change", ext["rule"])
	require.EqualValues(t, 2, ext["resourceCount"])
	require.Equal(t, []any{"a", "b"}, ext["resources"])
	require.Equal(t, []any{"spec/team [type]"}, ext["fields"])

	r = must(t, s.conctlIn(breaking, "apply", "--accept-breaking", "-f", "-"))
	require.Equal(t, "manifest/vpc configured\n", r.stdout, "the owner accepted it explicitly")
}

// TestKindConfig_TransientFailuresDeadLetterAtTheLiveBound: a kind whose
// provider always fails transiently stops at its max_transient_attempts,
// edited live with conctl; the resource shows why; a spec edit retries it.
func TestKindConfig_TransientFailuresDeadLetterAtTheLiveBound(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{noWorker: true})
	ctx := context.Background()
	must(t, s.conctlIn(`{"kind":"flaky","spec_schema":{"type":"object","properties":{"fail":{"type":"boolean"}}},
		"reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`, "apply", "-f", "-"))
	r := must(t, s.conctl("kind", "config", "flaky"))
	require.Contains(t, r.stdout, "20 attempts", "the default bound")
	r = must(t, s.conctl("kind", "config", "flaky", "--max-transient-attempts", "3"))
	require.Contains(t, r.stdout, "3 attempts")
	r = s.conctl("kind", "config", "flaky", "--max-transient-attempts", "-1")
	require.NotEqual(t, 0, r.code)
	require.Contains(t, r.stderr, "--max-transient-attempts -1: want 0 (never) or more")

	var calls atomic.Int32
	s.StartWorker(apptest.Worker{Providers: []worker.Provider{apptest.NewProvider("flaky",
		func(_ context.Context, req worker.Request) (worker.Outcome, error) {
			var spec struct {
				Fail bool `json:"fail"`
			}
			_ = json.Unmarshal(req.Resource.Spec, &spec)
			if !spec.Fail {
				return worker.Outcome{Status: json.RawMessage(`{"ok":true}`)}, nil
			}
			calls.Add(1)
			return worker.Outcome{}, errors.New("upstream 503")
		})}})
	must(t, s.conctlIn(`{"kind":"flaky","name":"pill","spec":{"fail":true}}`, "apply", "-f", "-"))
	failed := s.WaitPhase("flaky", "pill", resource.PhaseFailed, 90*time.Second)
	apptest.WaitFor(t, 90*time.Second, "dead-lettered", func() bool {
		var err error
		failed, err = s.store.GetResource(ctx, "flaky", "pill")
		return err == nil && failed.FailureTerminal
	})
	require.EqualValues(t, 3, calls.Load(), "exactly max_transient_attempts tries")

	got := gqlData(t, s.server, `{ resource(kind: "flaky", name: "pill") { phase deadLetter { generation message } } }`)
	require.Contains(t, got, `"phase":"FAILED"`)
	require.Contains(t, got, `"deadLetter":{"generation":1,"message":"dead-lettered after 3 transient failures in a row (max_transient_attempts 3): upstream 503"}`)
	conds, err := s.store.Conditions(ctx, failed.ID)
	require.NoError(t, err)
	var synced []string
	for _, c := range conds {
		if c.Type == resource.ConditionSynced {
			synced = append(synced, c.Reason)
		}
	}
	require.Equal(t, []string{resource.ReasonDeadLettered}, synced)

	// Nothing re-queues it: a healthy resource of the kind converges after it
	// (the dispatcher and the reaper have run), and the pill was not retried.
	must(t, s.conctlIn(`{"kind":"flaky","name":"canary","spec":{"fail":false}}`, "apply", "-f", "-"))
	s.WaitPhase("flaky", "canary", resource.PhaseReady, 90*time.Second)
	require.EqualValues(t, 3, calls.Load(), "the dead letter was not retried")

	// A spec edit is a new generation with a fresh budget.
	must(t, s.conctlIn(`{"kind":"flaky","name":"pill","spec":{"fail":false}}`, "apply", "-f", "-"))
	s.WaitPhase("flaky", "pill", resource.PhaseReady, 90*time.Second)
	require.NotContains(t, gqlData(t, s.server, `{ resource(kind: "flaky", name: "pill") { deadLetter { message } } }`), "dead-lettered")
}

func decodeMap(t *testing.T, raw json.RawMessage) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m), "%s", raw)
	return m
}

func manifestEdit(t *testing.T, file string, edit func(map[string]any)) string {
	t.Helper()
	m := decodeMap(t, json.RawMessage(manifestWithDescription(t, file, "edited")))
	edit(m)
	out, err := json.Marshal(m)
	require.NoError(t, err)
	return string(out)
}

// gqlData posts a query and returns its data, failing on errors.
func gqlData(t *testing.T, server, query string) string {
	t.Helper()
	body := graphqlRaw(t, server, query, nil)
	var resp struct {
		Data   json.RawMessage `json:"data"`
		Errors []any           `json:"errors"`
	}
	require.NoError(t, json.Unmarshal(body, &resp), "%s", body)
	require.Empty(t, resp.Errors, "%s", body)
	return string(resp.Data)
}

func graphqlRaw(t *testing.T, server, query string, vars map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost,
		strings.TrimSuffix(server, "/")+"/graphql", bytes.NewReader(b))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(resp.Body)
	require.NoError(t, err)
	return buf.Bytes()
}

// TestComposer_ChildAtAnotherVersionMigratesLive: a classicbom whose
// vpc_version moves from v1 to v2 re-composes its vpc at v2; the child keeps
// its id and converges under the v2 provider, and the subtree settles READY.
func TestComposer_ChildAtAnotherVersionMigratesLive(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{})
	ctx := context.Background()
	a := apply.StoreApplier{Store: s.store, Actor: "test"}
	docs, err := classic.Documents(false)
	require.NoError(t, err)
	require.NoError(t, apply.All(ctx, a, docs))
	for _, kind := range []string{classic.KindAccount, classic.KindVPC, classic.KindTGW, classic.KindRoute} {
		require.NoError(t, a.ApplyProviderConfig(ctx, apply.ProviderConfig{Kind: kind, Name: "default", IsDefault: true,
			Spec: json.RawMessage(`{"latency_ms":0,"jitter_ms":5,"failure_rate":0}`)}))
	}
	spec := func(v string) json.RawMessage {
		return json.RawMessage(`{"domains":["payments"],"teams":["red"],"vpc_version":"` + v + `"}`)
	}
	require.NoError(t, a.ApplyResource(ctx, apply.Resource{Kind: classic.KindClassicBOM, Name: "corp", Spec: spec("v1")}))
	s.WaitSubtree(classic.KindClassicBOM, "corp", 120*time.Second, apptest.AllIn(resource.PhaseReady))
	vpcName := classic.UnitName("corp", "payments", "red") + "-vpc"
	before, err := s.store.GetResource(ctx, classic.KindVPC, vpcName)
	require.NoError(t, err)
	require.Equal(t, "v1", before.Version)

	require.NoError(t, a.ApplyResource(ctx, apply.Resource{Kind: classic.KindClassicBOM, Name: "corp", Spec: spec("v2")}))
	var after resource.Resource
	apptest.WaitFor(t, 120*time.Second, "the vpc converges at v2", func() bool {
		after, err = s.store.GetResource(ctx, classic.KindVPC, vpcName)
		return err == nil && after.Version == "v2" && after.Phase == resource.PhaseReady && after.SyncedGen == after.Generation &&
			decodeMap(t, after.Status)["api_version"] == "v2"
	})
	require.Equal(t, before.ID, after.ID, "the same resource, migrated")
	require.Greater(t, after.Generation, before.Generation)
	s.WaitSubtree(classic.KindClassicBOM, "corp", 120*time.Second, apptest.AllIn(resource.PhaseReady))
}
