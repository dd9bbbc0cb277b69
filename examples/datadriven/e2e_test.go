package datadriven_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/examples/apply"
	"github.com/converge-run/converge/examples/datadriven"
)

func decode(t *testing.T, raw json.RawMessage) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m), string(raw))
	return m
}

// watched wraps a provider to see the default providerconfig pushes it gets,
// so a test edits a config and knows when the worker has it.
type watched struct {
	worker.Provider
	mu   sync.Mutex
	seen []worker.ProviderConfig
}

func (w *watched) OnConfig(cfg worker.ProviderConfig) {
	w.mu.Lock()
	w.seen = append(w.seen, cfg)
	w.mu.Unlock()
	w.Provider.OnConfig(cfg)
}

func (w *watched) waitConfig(t *testing.T, want func(worker.ProviderConfig) bool) {
	t.Helper()
	apptest.WaitFor(t, 30*time.Second, "the worker gets the edited providerconfig", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.seen) > 0 && want(w.seen[len(w.seen)-1])
	})
}

// start runs a converge with the demo's fixtures (fast leaves) and a worker
// whose composers are watched.
func start(t *testing.T) (*apptest.Stack, apply.StoreApplier, map[string]*watched) {
	t.Helper()
	s := apptest.Start(t, apptest.Options{})
	ctx := context.Background()
	a := apply.StoreApplier{Store: s.Store, Actor: "test"}
	docs, err := datadriven.Documents(false)
	require.NoError(t, err)
	require.NoError(t, apply.All(ctx, a, docs), "every fixture applies")
	for _, kind := range []string{datadriven.KindFakeVPC, datadriven.KindFakeDB, datadriven.KindFakeApp,
		datadriven.KindFakeTerraform, datadriven.KindFakeK8sJob} {
		require.NoError(t, a.ApplyProviderConfig(ctx, apply.ProviderConfig{Kind: kind, Name: "default", IsDefault: true,
			Spec: json.RawMessage(`{"latency_ms":0}`)}))
	}
	w := map[string]*watched{}
	var ps []worker.Provider
	for _, p := range datadriven.Providers(s.Log) {
		if k := p.Kind().Kind; k == datadriven.KindCELBOM || k == datadriven.KindStarlark {
			w[k] = &watched{Provider: p}
			p = w[k]
		}
		ps = append(ps, p)
	}
	s.StartWorker(apptest.Worker{Options: worker.Options{MaxParallel: 32}, Providers: ps})
	return s, a, w
}

func byName(rs []resource.Resource) map[string]resource.Resource {
	m := map[string]resource.Resource{}
	for _, r := range rs {
		m[r.Name] = r
	}
	return m
}

// TestCELBOM_DAGConvergesAndRulesEditLive: the sample celbom composes the
// DAG by the fixture rules (the app gated on both its VPC and its DB, both
// values flowing in); then the rules are edited — every team gets a DB —
// and the next compose follows them with no restart.
func TestCELBOM_DAGConvergesAndRulesEditLive(t *testing.T) {
	t.Parallel()
	s, a, w := start(t)
	ctx := context.Background()
	teams := `[{"name":"red","tier":"prod","image":"img:red"},{"name":"blue","tier":"dev","image":"img:blue"},{"name":"green","tier":"dev"}]`
	require.NoError(t, a.ApplyResource(ctx, apply.Resource{Kind: datadriven.KindCELBOM, Name: "shop", Spec: json.RawMessage(`{"teams":` + teams + `}`)}))
	_, below := s.WaitSubtree(datadriven.KindCELBOM, "shop", 90*time.Second, apptest.AllIn(resource.PhaseReady))
	require.Len(t, below, 6, "red: vpc, db, app; blue: vpc, app; green: vpc")
	got := byName(below)
	red := got["shop-red-app"]
	require.Equal(t, decode(t, got["shop-red-vpc"].Status)["vpc_id"], decode(t, red.Status)["vpc_id"], "vpc_id flowed in")
	require.Equal(t, decode(t, got["shop-red-db"].Status)["db_endpoint"], decode(t, red.Status)["db_endpoint"], "db_endpoint flowed in")
	require.Equal(t, "none", decode(t, got["shop-blue-app"].Status)["db_endpoint"], "blue has no db by the fixture rules")

	// Edit the rules live: every team with an image gets a db.
	pc := fixtureConfig(t, datadriven.KindCELBOM)
	var rules datadriven.CELRules
	require.NoError(t, json.Unmarshal(pc.Spec, &rules))
	require.Equal(t, "db", rules.Rules[1].Name)
	rules.Rules[1].When = "has(team.image)"
	pc.Spec, _ = json.Marshal(rules)
	require.NoError(t, a.ApplyProviderConfig(ctx, pc))
	w[datadriven.KindCELBOM].waitConfig(t, func(cfg worker.ProviderConfig) bool {
		var got datadriven.CELRules
		return json.Unmarshal(cfg.Spec, &got) == nil && len(got.Rules) == 3 && got.Rules[1].When == "has(team.image)"
	})
	// The next compose (here: a spec change) follows the new rules.
	require.NoError(t, a.ApplyResource(ctx, apply.Resource{Kind: datadriven.KindCELBOM, Name: "shop",
		Spec: json.RawMessage(`{"teams":` + teams + `,"revision":2}`)}))
	_, below = s.WaitSubtree(datadriven.KindCELBOM, "shop", 90*time.Second, func(root resource.Resource, below []resource.Resource) bool {
		return len(below) == 7 && apptest.AllIn(resource.PhaseReady)(root, below)
	})
	got = byName(below)
	require.Contains(t, got, "shop-blue-db")
	require.Equal(t, decode(t, got["shop-blue-db"].Status)["db_endpoint"], decode(t, got["shop-blue-app"].Status)["db_endpoint"],
		"blue's app now waits on its new db and takes its endpoint")
}

// TestStarlark_PipelineConvergesAndProgramEditsLive: the sample program
// composes terraform → job per team with the built image flowing into the
// job; an edited program adds a VPC per team on the next compose; a broken
// program fails the compose terminally, naming the line.
func TestStarlark_PipelineConvergesAndProgramEditsLive(t *testing.T) {
	t.Parallel()
	s, a, w := start(t)
	ctx := context.Background()
	require.NoError(t, a.ApplyResource(ctx, apply.Resource{Kind: datadriven.KindStarlark, Name: "builds",
		Spec: json.RawMessage(`{"teams":["red","blue"],"bucket":"acme-tf"}`)}))
	_, below := s.WaitSubtree(datadriven.KindStarlark, "builds", 90*time.Second, apptest.AllIn(resource.PhaseReady))
	require.Len(t, below, 4)
	got := byName(below)
	for _, team := range []string{"red", "blue"} {
		tf, job := got["builds-"+team+"-terraform"], got["builds-"+team+"-job"]
		require.Equal(t, "s3://acme-tf/"+team+"/main.tf", decode(t, tf.Spec)["source"])
		require.NotEmpty(t, decode(t, tf.Status)["image"])
		require.Equal(t, decode(t, tf.Status)["image"], decode(t, job.Spec)["image"], "the built image flowed into the job")
		require.Equal(t, decode(t, tf.Status)["image"], decode(t, job.Status)["image"])
	}

	// Edit the program live: a VPC per team too.
	pc := fixtureConfig(t, datadriven.KindStarlark)
	var files map[string]string
	require.NoError(t, json.Unmarshal(pc.Data, &files))
	files["main.star"] = strings.Replace(files["main.star"], "        children.extend(c)\n",
		"        children.extend(c)\n        children.append({\"kind\": \"fakevpc\", \"name\": \"%s-%s-vpc\" % (resource[\"name\"], team)})\n", 1)
	require.Contains(t, files["main.star"], "fakevpc")
	pc.Data, _ = json.Marshal(files)
	require.NoError(t, a.ApplyProviderConfig(ctx, pc))
	w[datadriven.KindStarlark].waitConfig(t, func(cfg worker.ProviderConfig) bool { return strings.Contains(string(cfg.Data), "-vpc") })
	require.NoError(t, a.ApplyResource(ctx, apply.Resource{Kind: datadriven.KindStarlark, Name: "builds",
		Spec: json.RawMessage(`{"teams":["red","blue"],"bucket":"acme-tf","revision":2}`)}))
	_, below = s.WaitSubtree(datadriven.KindStarlark, "builds", 90*time.Second, func(root resource.Resource, below []resource.Resource) bool {
		return len(below) == 6 && apptest.AllIn(resource.PhaseReady)(root, below)
	})
	require.Contains(t, byName(below), "builds-blue-vpc")

	// A broken program: the compose fails terminally and says where.
	files["main.star"] = strings.Replace(files["main.star"], `    spec = resource["spec"]`, `    spec = resource["spec"]["missing"]`, 1)
	pc.Data, _ = json.Marshal(files)
	require.NoError(t, a.ApplyProviderConfig(ctx, pc))
	w[datadriven.KindStarlark].waitConfig(t, func(cfg worker.ProviderConfig) bool { return strings.Contains(string(cfg.Data), "missing") })
	require.NoError(t, a.ApplyResource(ctx, apply.Resource{Kind: datadriven.KindStarlark, Name: "builds",
		Spec: json.RawMessage(`{"teams":["red","blue"],"bucket":"acme-tf","revision":3}`)}))
	root := s.WaitPhase(datadriven.KindStarlark, "builds", resource.PhaseFailed, 60*time.Second)
	conds, err := s.Store.Conditions(ctx, root.ID)
	require.NoError(t, err)
	var msgs []string
	for _, c := range conds {
		msgs = append(msgs, c.Message)
	}
	require.Contains(t, strings.Join(msgs, "\n"), "main.star:7:28", "the failure names the line: %v", conds)
}
