package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const (
	chartDir = "../../deploy/helm/converge"
	srcRoot  = "../.."
)

var (
	envOnce    sync.Once
	envSets    map[string]map[string]bool
	errEnvScan error
)

func env(t *testing.T) map[string]map[string]bool {
	t.Helper()
	envOnce.Do(func() { envSets, errEnvScan = EnvSets(srcRoot) })
	if errEnvScan != nil {
		t.Fatal(errEnvScan)
	}
	return envSets
}

func ciValues(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil || len(files) < 3 {
		t.Fatalf("want the minimal, production and split values files in ci/, got %v (%v)", files, err)
	}
	return files
}

// TestChartValuesFiles renders, decodes and checks every values file the
// chart ships for CI.
func TestChartValuesFiles(t *testing.T) {
	for _, f := range ciValues(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			n, err := CheckFile(chartDir, env(t), []string{f}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if n < 8 {
				t.Errorf("only %d objects rendered", n)
			}
		})
	}
}

// TestChartShapes pins what each install shape renders.
func TestChartShapes(t *testing.T) {
	render := func(file string) *Objects {
		t.Helper()
		docs, _, err := Render(chartDir, []string{filepath.Join(chartDir, "ci", file)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		o, err := Decode(docs)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	roles := func(o *Objects) map[string]string {
		out := map[string]string{}
		for _, d := range o.Deployments {
			c := d.Spec.Template.Spec.Containers[0]
			v, _ := envValue(&c, "ROLE")
			out[d.Name] = v
		}
		return out
	}
	minimal := render("minimal-values.yaml")
	if got := roles(minimal); got["converge-control"] != "all" || len(got) != 2 {
		t.Errorf("minimal: deployments and roles %v, want converge-control ROLE=all and one worker", got)
	}
	prod := render("production-values.yaml")
	if got := roles(prod); got["converge-control"] != "control" || got["converge-broker"] != "broker" {
		t.Errorf("production: roles %v", got)
	}
	if len(prod.Certificates) != 2 || len(prod.HPAs) != 2 || len(prod.ServiceMonitors) != 1 || len(prod.NetworkPolicies) != 3 {
		t.Errorf("production: %d certificates, %d HPAs, %d service monitors, %d network policies",
			len(prod.Certificates), len(prod.HPAs), len(prod.ServiceMonitors), len(prod.NetworkPolicies))
	}
	for _, sa := range prod.ServiceAccounts {
		if sa.Annotations["eks.amazonaws.com/role-arn"] == "" {
			t.Errorf("production: ServiceAccount %s has no IRSA role annotation", sa.Name)
		}
	}
	for _, d := range prod.Deployments {
		c := d.Spec.Template.Spec.Containers[0]
		if v, _ := envValue(&c, "ROLE"); v == "control" {
			if _, ok := envValue(&c, "DATABASE_READ_URL"); !ok {
				t.Errorf("production: control pods do not read the replica")
			}
		}
	}
}

// TestChecksCatch breaks each invariant through the values and checks the
// check names the problem.
func TestChecksCatch(t *testing.T) {
	minimal := filepath.Join(chartDir, "ci", "minimal-values.yaml")
	split := filepath.Join(chartDir, "ci", "split-values.yaml")
	cases := []struct {
		name     string
		file     string
		override map[string]any
		want     string
	}{
		{"grace below the broker drain", minimal, map[string]any{"terminationGracePeriodSeconds": 40},
			"terminationGracePeriodSeconds 40s does not exceed preStop 5s + SHUTDOWN_DRAIN 45s + the listeners' shutdown grace 10s + deregistration 5s"},
		// 60 s covered the drain and the deregistration but not the 10 s
		// the listeners give requests in flight after the drain.
		{"grace without the listeners' shutdown", minimal, map[string]any{"terminationGracePeriodSeconds": 60},
			"terminationGracePeriodSeconds 1m0s does not exceed preStop 5s + SHUTDOWN_DRAIN 45s + the listeners' shutdown grace 10s + deregistration 5s"},
		{"grace below the worker drain", split, map[string]any{"workers": []any{map[string]any{
			"name": "slow", "image": map[string]any{"repository": "converge-run/stdworker"}, "drainTimeout": "90s"}}},
			"does not exceed preStop 0s + WORKER_DRAIN_TIMEOUT 1m30s"},
		{"an env var converge does not read", minimal, map[string]any{"extraEnv": map[string]any{"SHUTDOWN_DRIAN": "10s"}},
			"env SHUTDOWN_DRIAN is not read by converge"},
		{"a duplicate variable on a worker image of the user's own", minimal, map[string]any{"workers": []any{map[string]any{
			"name": "c", "image": map[string]any{"repository": "example.com/team/dns-worker"}, "env": map[string]any{"LOG_LEVEL": "debug"}}}},
			"LOG_LEVEL is set twice"},
		{"a worker env var its binary does not read", minimal, map[string]any{"workers": []any{map[string]any{
			"name": "c", "image": map[string]any{"repository": "converge-run/classic-worker"}, "env": map[string]any{"STDWORKER_KINDS": "x"}}}},
			"env STDWORKER_KINDS is not read by classic-worker"},
		{"an unknown field", minimal, map[string]any{"extraVolumes": []any{map[string]any{"name": "x", "emptyDirr": map[string]any{}}}},
			`json: unknown field "emptyDirr"`},
		{"a secret nobody makes", minimal, map[string]any{"extraVolumes": []any{map[string]any{"name": "x", "secret": map[string]any{"secretName": "nowhere"}}}},
			`secret "nowhere" is neither rendered`},
		{"a projected secret nobody makes", minimal, map[string]any{"extraVolumes": []any{map[string]any{"name": "x", "projected": map[string]any{
			"sources": []any{map[string]any{"secret": map[string]any{"name": "nowhere"}}}}}}},
			`volume x: secret "nowhere" is neither rendered`},
		{"a projected secret mounted with subPath", minimal, map[string]any{
			"extraVolumes": []any{map[string]any{"name": "ca", "projected": map[string]any{
				"sources": []any{map[string]any{"secret": map[string]any{"name": "rds-ca"}}}}}},
			"extraVolumeMounts": []any{map[string]any{"name": "ca", "mountPath": "/etc/rds/ca.pem", "subPath": "ca.pem"}},
			"database":          map[string]any{"existingSecret": "rds-ca", "url": ""}},
			"mounted with subPath"},
		{"a secret mounted with subPath", minimal, map[string]any{
			"extraVolumes":      []any{map[string]any{"name": "ca", "secret": map[string]any{"secretName": "rds-ca"}}},
			"extraVolumeMounts": []any{map[string]any{"name": "ca", "mountPath": "/etc/rds/ca.pem", "subPath": "ca.pem"}},
			"database":          map[string]any{"existingSecret": "rds-ca", "url": ""}},
			"mounted with subPath"},
		{"a schema violation", minimal, map[string]any{"control": map[string]any{"replicas": "three"}}, "values don't meet the specifications"},
		{"a missing database", minimal, map[string]any{"database": map[string]any{"url": ""}}, "DATABASE_URL is required"},
		{"an open API without saying so", minimal, map[string]any{"apiTokens": map[string]any{"open": false}}, "apiTokens: set apiTokens.tokens"},
		{"API tokens beside an open worker plane", minimal, map[string]any{"apiTokens": map[string]any{"open": false, "tokens": "abc admin"}},
			"workerAuth.open=true beside API tokens"},
		{"mTLS without TLS", minimal, map[string]any{"tls": map[string]any{"mtls": map[string]any{"enabled": true}}}, "tls.mtls.enabled needs tls.enabled"},
		{"a preStop sleep of 0 (the API server refuses the pods before Kubernetes 1.33)", minimal,
			map[string]any{"preStopSleepSeconds": 0}, "at '/preStopSleepSeconds': minimum: got 0, want 1"},
		{"a drain of zero, which converge refuses at boot", minimal, map[string]any{"shutdownDrain": "0s"},
			`SHUTDOWN_DRAIN="0s" is not a positive duration`},
		{"a worker drain of zero, which the worker refuses at start", split, map[string]any{"workers": []any{map[string]any{
			"name": "w", "image": map[string]any{"repository": "converge-run/stdworker"}, "drainTimeout": "0ms"}}},
			`WORKER_DRAIN_TIMEOUT="0ms" is not a positive duration`},
		{"a heartbeat below converge's floor", minimal, map[string]any{"extraEnv": map[string]any{"MEMBER_HEARTBEAT_EVERY": "500ms"}},
			`MEMBER_HEARTBEAT_EVERY="500ms" is below converge's floor of 1s (converge refuses to start)`},
		{"a TLS reload below converge's floor", minimal, map[string]any{"extraEnv": map[string]any{"TLS_RELOAD_INTERVAL": "100ms"}},
			`TLS_RELOAD_INTERVAL="100ms" is below converge's floor of 1s`},
		{"the chart's TLS reload interval below converge's floor", filepath.Join(chartDir, "ci", "production-values.yaml"),
			map[string]any{"tls": map[string]any{"reloadInterval": "500ms"}},
			`TLS_RELOAD_INTERVAL="500ms" is below converge's floor of 1s`},
		{"a worker silence below converge's floor", minimal, map[string]any{"extraEnv": map[string]any{"WORKER_SILENCE_TIMEOUT": "2s"}},
			`WORKER_SILENCE_TIMEOUT="2s" is below converge's floor of 3s`},
		{"an unclaimed-work window below converge's floor", minimal, map[string]any{"extraEnv": map[string]any{"SWEEPER_UNCLAIMED_DELETE_AFTER": "5m"}},
			`SWEEPER_UNCLAIMED_DELETE_AFTER="5m" is below converge's floor of 10m0s`},
		{"a websocket keepalive below converge's floor", minimal, map[string]any{"extraEnv": map[string]any{"API_WS_KEEPALIVE": "500ms"}},
			`API_WS_KEEPALIVE="500ms" is below converge's floor of 1s`},
		{"a worker session age below converge's floor", minimal, map[string]any{"extraEnv": map[string]any{"WORKER_SESSION_MAX_AGE": "30s"}},
			`WORKER_SESSION_MAX_AGE="30s" is below converge's floor of 1m0s`},
		{"a heartbeat of zero", minimal, map[string]any{"extraEnv": map[string]any{"MEMBER_HEARTBEAT_EVERY": "0s"}},
			`MEMBER_HEARTBEAT_EVERY="0s" is not a positive duration`},
		{"broker autoscaling without broker pods", minimal, map[string]any{"broker": map[string]any{"autoscaling": map[string]any{"enabled": true}}},
			"broker.autoscaling.enabled needs split=true"},
		{"network policies without the database's address", minimal, map[string]any{"networkPolicy": map[string]any{"enabled": true}},
			"networkPolicy.enabled: set networkPolicy.database.cidrs"},
		{"a PDB that allows no eviction (node drains hang)", minimal, map[string]any{"control": map[string]any{"pdb": map[string]any{"maxUnavailable": 0}}},
			"values don't meet the specifications"},
		{"a PDB of 0%", minimal, map[string]any{"control": map[string]any{"pdb": map[string]any{"maxUnavailable": "0%"}}},
			"values don't meet the specifications"},
		{"a PDB budget the API server refuses", minimal, map[string]any{"workers": []any{map[string]any{
			"name": "w", "image": map[string]any{"repository": "converge-run/stdworker"}, "pdb": map[string]any{"maxUnavailable": "one"}}}},
			"values don't meet the specifications"},
		{"two workers of one name (two Deployments of one name)", minimal, map[string]any{"workers": []any{
			map[string]any{"name": "w", "image": map[string]any{"repository": "converge-run/stdworker"}},
			map[string]any{"name": "w", "image": map[string]any{"repository": "converge-run/classic-worker"}}}},
			"workers: two entries are named w"},
		{"a worker autoscaler whose minimum exceeds its maximum", minimal, map[string]any{"workers": []any{map[string]any{
			"name": "w", "image": map[string]any{"repository": "converge-run/stdworker"},
			"autoscaling": map[string]any{"enabled": true, "minReplicas": 10, "maxReplicas": 5}}}},
			"workers[w].autoscaling: minReplicas 10 exceeds maxReplicas 5"},
		{"a broker autoscaler whose minimum exceeds its maximum", split, map[string]any{"broker": map[string]any{
			"autoscaling": map[string]any{"enabled": true, "minReplicas": 10, "maxReplicas": 5}}},
			"broker.autoscaling: minReplicas 10 exceeds maxReplicas 5"},
		{"runAsUser 0 beside runAsNonRoot (the kubelet refuses to start the container)", minimal,
			map[string]any{"podSecurityContext": map[string]any{"runAsUser": 0}}, "runs as user 0"},
		{"the broker's health port on its broker port (the second listener cannot bind)", split,
			map[string]any{"ports": map[string]any{"health": 8080}}, "ports.health equals ports.http"},
		{"network policies cutting IAM token signing off", filepath.Join(chartDir, "ci", "production-values.yaml"),
			map[string]any{"networkPolicy": map[string]any{"httpsEgressCidrs": []any{}}},
			"networkPolicy.enabled with database.iamAuth: set networkPolicy.httpsEgressCidrs"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := CheckFile(chartDir, env(t), []string{c.file}, c.override)
			if err == nil {
				t.Fatalf("the check passed; want an error containing %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error:\n%v\nwant it to contain %q", err, c.want)
			}
		})
	}
}

// TestDocumentedKnobsPass: what docs/operations.md tells an operator to
// set on converge and stdworker passes the check (GOMEMLIMIT, read by
// core/memlimit).
func TestDocumentedKnobsPass(t *testing.T) {
	split := filepath.Join(chartDir, "ci", "split-values.yaml")
	_, err := CheckFile(chartDir, env(t), []string{split}, map[string]any{
		"extraEnv": map[string]any{"GOMEMLIMIT": "400MiB"},
		"workers": []any{map[string]any{"name": "std", "image": map[string]any{"repository": "converge-run/stdworker"},
			"env": map[string]any{"GOMEMLIMIT": "off"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestFloorsPass: converge's cadences at their floors, and
// WORKER_SESSION_MAX_AGE=0 (never end a session), pass the check, as
// converge takes them.
func TestFloorsPass(t *testing.T) {
	minimal := filepath.Join(chartDir, "ci", "minimal-values.yaml")
	at := map[string]any{}
	for name, floor := range convergeFloors {
		at[name] = floor
	}
	for name, extra := range map[string]map[string]any{"at the floors": at, "a session age of 0": {"WORKER_SESSION_MAX_AGE": "0"}} {
		if _, err := CheckFile(chartDir, env(t), []string{minimal}, map[string]any{"extraEnv": extra}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// TestScanEnv checks the scan finds what core/config, the API limits and
// the worker SDK read, and not the names that are only labels.
func TestScanEnv(t *testing.T) {
	sets := env(t)
	for _, name := range []string{"DATABASE_URL", "ROLE", "SHUTDOWN_DRAIN", "TLS_CLIENT_CA_FILE", "API_MAX_COMPLEXITY", "API_WS_KEEPALIVE", "LOG_LEVEL", "CONVERGE_UI_DIR", "AWS_REGION"} {
		if !sets["converge"][name] {
			t.Errorf("converge: %s not found", name)
		}
	}
	for _, name := range []string{"BROKER_URL", "WORKER_DRAIN_TIMEOUT", "WORKER_TLS_CA_FILE", "STDWORKER_KINDS"} {
		if !sets["stdworker"][name] {
			t.Errorf("stdworker: %s not found", name)
		}
	}
	for _, name := range []string{"TLS", "TLS_CLIENT_CA", "BAD_USER_INPUT", "REDACTED"} {
		if sets["converge"][name] {
			t.Errorf("converge: %s found, but it is a label, not a variable", name)
		}
	}
	// The demo worker reads the TLS files through the SDK's OptionsFromEnv,
	// so a chart with TLS on may run it.
	if !sets["classic-worker"]["WORKER_TLS_CA_FILE"] {
		t.Error("classic-worker: WORKER_TLS_CA_FILE not found, though the SDK's OptionsFromEnv reads it")
	}
}

// TestProbeChecks: every binary of ours is probed, and a worker only when
// it serves the probes (WORKER_HEALTH_ADDR).
func TestProbeChecks(t *testing.T) {
	probe := func(path string) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("health")}}}
	}
	ports := []corev1.ContainerPort{{Name: "health", ContainerPort: 8081}}
	bare := &corev1.Container{Image: "converge-run/stdworker:1", Ports: ports}
	if errs := checkProbes("w", bare); len(errs) != 1 || !strings.Contains(errs[0].Error(), "stdworker needs liveness and readiness probes") {
		t.Errorf("a worker without probes: %v", errs)
	}
	unserved := &corev1.Container{Image: "converge-run/stdworker:1", Ports: ports, LivenessProbe: probe("/livez"), ReadinessProbe: probe("/readyz")}
	if errs := checkProbes("w", unserved); len(errs) != 1 || !strings.Contains(errs[0].Error(), "WORKER_HEALTH_ADDR is not set") {
		t.Errorf("a worker probed without WORKER_HEALTH_ADDR: %v", errs)
	}
	served := unserved.DeepCopy()
	served.Env = []corev1.EnvVar{{Name: "WORKER_HEALTH_ADDR", Value: ":8081"}}
	if errs := checkProbes("w", served); len(errs) != 0 {
		t.Errorf("a served worker: %v", errs)
	}
	// A worker is unready while no broker holds it: a liveness probe on
	// /readyz would restart every worker through a broker rollout.
	served.LivenessProbe = probe("/readyz")
	if errs := checkProbes("w", served); len(errs) != 1 || !strings.Contains(errs[0].Error(), `liveness probe on "/readyz", want /livez`) {
		t.Errorf("a worker whose liveness probe is /readyz: %v", errs)
	}
	// /readyz fails while the database is away: a liveness or startup probe
	// on it would restart every converge pod on a Postgres blip.
	conv := &corev1.Container{Image: "converge-run/converge:1", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		StartupProbe:   &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("http")}}},
		LivenessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/livez", Port: intstr.FromString("http")}}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/livez", Port: intstr.FromString("http")}}}}
	errs := checkProbes("c", conv)
	got := fmt.Sprint(errs)
	if len(errs) != 2 || !strings.Contains(got, `startup probe on "/readyz", want /livez`) || !strings.Contains(got, `readiness probe on "/livez", want /readyz`) {
		t.Errorf("converge probed on the wrong paths: %v", errs)
	}
}

// TestChartIdentities: tls.mtls.identities renders the per-audience
// allow-lists where converge reads them — API_CLIENT_IDENTITIES on the pods
// that serve the API (with client-certificate verification there), the
// worker and mesh lists on broker pods, nothing on workers — and a list
// alone authenticates the API.
func TestChartIdentities(t *testing.T) {
	prod := filepath.Join(chartDir, "ci", "production-values.yaml")
	ids := map[string]any{"tls": map[string]any{"mtls": map[string]any{"identities": map[string]any{
		"api":     []any{"admin:spiffe://prod.example/ns/ops/sa/conctl", "viewer:CN=dashboard"},
		"workers": []any{"spiffe://prod.example/ns/converge/sa/worker"},
		"mesh":    []any{"spiffe://prod.example/ns/converge/sa/converge", "spiffe://prod.example/ns/edge/sa/*"},
	}}}}
	if _, err := CheckFile(chartDir, env(t), []string{prod}, ids); err != nil {
		t.Fatalf("production with identities: %v", err)
	}
	envs := func(override map[string]any) map[string]map[string]string {
		t.Helper()
		docs, _, err := Render(chartDir, []string{prod}, override)
		if err != nil {
			t.Fatal(err)
		}
		o, err := Decode(docs)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]map[string]string{}
		for _, d := range o.Deployments {
			c := d.Spec.Template.Spec.Containers[0]
			m := map[string]string{}
			for _, e := range c.Env {
				m[e.Name] = e.Value
			}
			out[d.Name] = m
		}
		return out
	}
	got := envs(ids)
	control, broker := got["converge-control"], got["converge-broker"]
	if control == nil || broker == nil {
		t.Fatalf("deployments %v", got)
	}
	want := map[string]string{"API_CLIENT_IDENTITIES": "admin:spiffe://prod.example/ns/ops/sa/conctl,viewer:CN=dashboard",
		"TLS_CLIENT_CA_FILE": "/etc/converge/tls/ca.crt"}
	for k, v := range want {
		if control[k] != v {
			t.Errorf("control: %s=%q, want %q", k, control[k], v)
		}
	}
	for _, k := range []string{"WORKER_CLIENT_IDENTITIES", "MESH_CLIENT_IDENTITIES", "API_AUTH"} {
		if _, ok := control[k]; ok {
			t.Errorf("control: %s set", k)
		}
	}
	want = map[string]string{"WORKER_CLIENT_IDENTITIES": "spiffe://prod.example/ns/converge/sa/worker",
		"MESH_CLIENT_IDENTITIES": "spiffe://prod.example/ns/converge/sa/converge,spiffe://prod.example/ns/edge/sa/*"}
	for k, v := range want {
		if broker[k] != v {
			t.Errorf("broker: %s=%q, want %q", k, broker[k], v)
		}
	}
	if _, ok := broker["API_CLIENT_IDENTITIES"]; ok {
		t.Error("broker (ROLE=broker serves no API): API_CLIENT_IDENTITIES set")
	}
	for name, e := range got {
		if name == "converge-control" || name == "converge-broker" {
			continue
		}
		for _, k := range []string{"API_CLIENT_IDENTITIES", "WORKER_CLIENT_IDENTITIES", "MESH_CLIENT_IDENTITIES"} {
			if _, ok := e[k]; ok {
				t.Errorf("worker %s: %s set", name, k)
			}
		}
	}
	if _, ok := envs(nil)["converge-control"]["TLS_CLIENT_CA_FILE"]; ok {
		t.Error("control without API identities verifies client certificates (split=true keeps the API on tokens)")
	}

	// The API list alone authenticates the API: no tokens, no API_AUTH=none.
	only := map[string]any{"apiTokens": map[string]any{"existingSecret": ""},
		"tls": map[string]any{"mtls": map[string]any{"identities": map[string]any{"api": []any{"admin:CN=ops"}}}}}
	if _, err := CheckFile(chartDir, env(t), []string{prod}, only); err != nil {
		t.Fatalf("API identities without tokens: %v", err)
	}
	c := envs(only)["converge-control"]
	if _, ok := c["API_TOKENS_FILE"]; ok {
		t.Error("API_TOKENS_FILE without tokens")
	}
	if v, ok := c["API_AUTH"]; ok {
		t.Errorf("API_AUTH=%s beside API_CLIENT_IDENTITIES (converge refuses the contradiction)", v)
	}
}

// TestChartIdentitiesRefused: lists without mTLS, an API entry without a
// role, a comma inside an entry, and an open API beside an API list.
func TestChartIdentitiesRefused(t *testing.T) {
	minimal := filepath.Join(chartDir, "ci", "minimal-values.yaml")
	prod := filepath.Join(chartDir, "ci", "production-values.yaml")
	list := func(audience string, entries ...any) map[string]any {
		return map[string]any{"tls": map[string]any{"mtls": map[string]any{"identities": map[string]any{audience: entries}}}}
	}
	cases := []struct {
		name     string
		file     string
		override map[string]any
		want     string
	}{
		{"a worker list without mTLS", minimal, list("workers", "spiffe://x/sa/worker"), "need tls.enabled and tls.mtls.enabled"},
		{"an API list without mTLS", minimal, list("api", "admin:CN=ops"), "need tls.enabled and tls.mtls.enabled"},
		{"an API entry without a role", prod, list("api", "CN=ops"), "values don't meet the specifications"},
		{"a comma inside an entry", prod, list("mesh", "a,b"), "values don't meet the specifications"},
		{"an open API beside an API list", prod, map[string]any{"apiTokens": map[string]any{"existingSecret": "", "open": true},
			"tls": map[string]any{"mtls": map[string]any{"identities": map[string]any{"api": []any{"admin:CN=ops"}}}}},
			"apiTokens: open=true contradicts"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := CheckFile(chartDir, env(t), []string{c.file}, c.override)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want it to contain %q", err, c.want)
			}
		})
	}
}

// TestChartWorkerValues: every per-worker value the schema accepts reaches
// the worker's Deployment (none is accepted and silently dropped).
func TestChartWorkerValues(t *testing.T) {
	minimal := filepath.Join(chartDir, "ci", "minimal-values.yaml")
	spread := map[string]any{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
		"labelSelector": map[string]any{"matchLabels": map[string]any{"converge.run/worker": "std"}}}
	override := map[string]any{"workers": []any{map[string]any{
		"name": "std", "image": map[string]any{"repository": "converge-run/stdworker", "pullPolicy": "Always"},
		"replicas": 0, "topologySpreadConstraints": []any{spread},
	}}}
	if _, err := CheckFile(chartDir, env(t), []string{minimal}, override); err != nil {
		t.Fatal(err)
	}
	docs, _, err := Render(chartDir, []string{minimal}, override)
	if err != nil {
		t.Fatal(err)
	}
	o, err := Decode(docs)
	if err != nil {
		t.Fatal(err)
	}
	var w *appsv1.Deployment
	for _, d := range o.Deployments {
		if d.Name == "converge-worker-std" {
			w = d
		}
	}
	if w == nil {
		t.Fatal("no worker Deployment rendered")
	}
	if w.Spec.Replicas == nil || *w.Spec.Replicas != 0 {
		t.Errorf("replicas: 0 rendered as %v, want 0 (a worker Deployment scaled to zero)", w.Spec.Replicas)
	}
	if got := w.Spec.Template.Spec.Containers[0].ImagePullPolicy; got != corev1.PullAlways {
		t.Errorf("image.pullPolicy: Always rendered as %q", got)
	}
	if got := w.Spec.Template.Spec.TopologySpreadConstraints; len(got) != 1 || got[0].TopologyKey != "topology.kubernetes.io/zone" {
		t.Errorf("topologySpreadConstraints rendered as %v", got)
	}
}

// TestChartNonDefaultShapes: shapes beside the ci/ files render and pass
// every check — a values file of the user's, checked with just helm-check,
// must not fail on what the chart itself renders.
func TestChartNonDefaultShapes(t *testing.T) {
	minimal := filepath.Join(chartDir, "ci", "minimal-values.yaml")
	split := filepath.Join(chartDir, "ci", "split-values.yaml")
	prod := filepath.Join(chartDir, "ci", "production-values.yaml")
	cases := map[string]struct {
		file     string
		override map[string]any
	}{
		"a ServiceMonitor over ROLE=all pods (no health port)": {minimal, map[string]any{
			"metrics": map[string]any{"serviceMonitor": map[string]any{"enabled": true}}}},
		"a ServiceMonitor over split roles without TLS": {split, map[string]any{
			"metrics": map[string]any{"serviceMonitor": map[string]any{"enabled": true}}}},
		"production without autoscaling": {prod, map[string]any{
			"broker": map[string]any{"autoscaling": map[string]any{"enabled": false}}}},
		// docs/deploy.md: your own workers, built on the Go SDK, are images
		// of the same shape; their own variables are theirs to read.
		"a worker image of the user's own": {prod, map[string]any{"workers": []any{map[string]any{
			"name": "dns", "image": map[string]any{"repository": "123456789012.dkr.ecr.eu-west-1.amazonaws.com/dns-worker"},
			"env": map[string]any{"DNS_ZONE": "example.com"}}}}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := CheckFile(chartDir, env(t), []string{c.file}, c.override); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestNetworkPolicyPorts: a policy that opens a port no pod it names
// listens on — the workers' way to the brokers, a probe port — fails the
// check, as it would cut the traffic off in a cluster enforcing policies.
func TestNetworkPolicyPorts(t *testing.T) {
	prod := filepath.Join(chartDir, "ci", "production-values.yaml")
	for _, c := range []struct {
		name   string
		mutate func(o *Objects)
		want   string
	}{
		{"egress to the brokers on the wrong port", func(o *Objects) {
			np := policy(t, o, "converge-workers")
			np.Spec.Egress[len(np.Spec.Egress)-1].Ports[0].Port = ptrTo(intstr.FromInt32(9999))
		}, "NetworkPolicy converge-workers egress port 9999"},
		{"ingress on a port the pods do not open", func(o *Objects) {
			np := policy(t, o, "converge-workers")
			np.Spec.Ingress[0].Ports[0].Port = ptrTo(intstr.FromInt32(9090))
		}, "NetworkPolicy converge-workers ingress port 9090"},
	} {
		t.Run(c.name, func(t *testing.T) {
			docs, values, err := Render(chartDir, []string{prod}, nil)
			must(t, err)
			o, err := Decode(docs)
			must(t, err)
			checker := &Checker{Env: env(t), ExternalSecrets: ExternalSecrets(values)}
			must(t, checker.Check(o))
			c.mutate(o)
			err = checker.Check(o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func policy(t *testing.T, o *Objects, name string) *networkingv1.NetworkPolicy {
	t.Helper()
	for _, np := range o.NetworkPolicies {
		if np.Name == name {
			return np
		}
	}
	t.Fatalf("no NetworkPolicy %s", name)
	return nil
}

func ptrTo[T any](v T) *T { return &v }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
