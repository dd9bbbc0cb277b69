// Command helmcheck checks the Helm chart without a cluster:
//
//	cd tools && go run ./helmcheck -chart ../deploy/helm/converge -root ..   (or: just helm-check)
//
// For each values file (default: the chart's ci/*-values.yaml) it renders
// the chart with the Helm SDK as `helm install` would (values coalesced over
// the defaults and validated against values.schema.json, the kubeVersion
// constraint), decodes every object strictly into its k8s.io/api type (an
// unknown field fails), and checks the invariants:
//
//   - every probe's port is a port of its container; startup and liveness
//     probes are on /livez, readiness on /readyz (a Postgres blip must not
//     restart pods);
//   - every env var is one the container's binary reads — found by scanning
//     the sources of core/config, the worker SDK and the commands, not a hand
//     list — or one only expanded into another ($(POD_IP) in BROKER_URL); a
//     worker image of the user's own reads variables of its own, so its
//     names are not checked (duplicates and $(NAME) references are);
//   - every *_DRAIN, *_TIMEOUT and *_INTERVAL variable is a positive
//     duration, and converge's cadences and windows are at least the floors
//     converge refuses to start below (floors.go: MEMBER_HEARTBEAT_EVERY,
//     TLS_RELOAD_INTERVAL, WORKER_SILENCE_TIMEOUT,
//     SWEEPER_UNCLAIMED_DELETE_AFTER, API_WS_KEEPALIVE,
//     WORKER_SESSION_MAX_AGE), each refusal naming the variable, its value
//     and the floor;
//   - terminationGracePeriodSeconds exceeds preStop + SHUTDOWN_DRAIN (+ the
//     deregistration) on broker pods and preStop + WORKER_DRAIN_TIMEOUT on
//     workers;
//   - selectors match: Deployments their templates, Services, PDBs,
//     NetworkPolicies some pods, HPAs an existing Deployment without fixed
//     replicas, the ServiceMonitor a Service with its ports;
//   - every port a NetworkPolicy opens is one its pods (ingress) or the
//     in-release peers it names (egress) listen on;
//   - pods set runAsNonRoot and run as no user 0 (the kubelet would refuse
//     to start them);
//   - every referenced Secret (and key; env, envFrom, secret and projected
//     volumes) is rendered, made by a cert-manager Certificate, or named as
//     existing in the values; no Secret is mounted with subPath (rotation
//     must reach the pod).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"helm.sh/helm/v3/pkg/chartutil"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "helmcheck:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("helmcheck", flag.ContinueOnError)
	chartDir := fs.String("chart", "../deploy/helm/converge", "the chart directory")
	root := fs.String("root", "..", "the converge source tree (scanned for the env vars each binary reads)")
	printObjects := fs.Bool("print", false, "print the rendered objects of each values file (like helm template)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	files := fs.Args()
	if len(files) == 0 {
		var err error
		if files, err = filepath.Glob(filepath.Join(*chartDir, "ci", "*-values.yaml")); err != nil {
			return fmt.Errorf("list %s/ci: %w", *chartDir, err)
		}
		if len(files) == 0 {
			return fmt.Errorf("no values files given and none in %s/ci", *chartDir)
		}
	}
	sort.Strings(files)
	env, err := EnvSets(*root)
	if err != nil {
		return err
	}
	var errs []error
	for _, f := range files {
		if *printObjects {
			if err := printRendered(*chartDir, f); err != nil {
				return err
			}
		}
		n, err := CheckFile(*chartDir, env, []string{f}, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:\n%w", f, err))
			fmt.Printf("FAIL %s\n", f)
			continue
		}
		fmt.Printf("ok   %s: %d objects\n", f, n)
	}
	return errors.Join(errs...)
}

// CheckFile renders the chart with the values files and override, decodes
// and checks the result; it returns how many objects were checked.
func CheckFile(chartDir string, env map[string]map[string]bool, valueFiles []string, override map[string]any) (int, error) {
	docs, values, err := Render(chartDir, valueFiles, override)
	if err != nil {
		return 0, err
	}
	objs, err := Decode(docs)
	if err != nil {
		return 0, err
	}
	c := &Checker{Env: env, ExternalSecrets: ExternalSecrets(values)}
	if err := c.Check(objs); err != nil {
		return 0, err
	}
	return objs.Count(), nil
}

// ExternalSecrets are the Secret names the values declare as made outside
// the chart: the existingSecret of database, apiTokens and workerAuth, and
// the TLS keypairs named without cert-manager.
func ExternalSecrets(values chartutil.Values) map[string]bool {
	out := map[string]bool{}
	for _, p := range []string{"database.existingSecret", "apiTokens.existingSecret", "workerAuth.existingSecret"} {
		if s, err := values.PathValue(p); err == nil && s != "" {
			out[fmt.Sprint(s)] = true
		}
	}
	if cm, _ := values.PathValue("tls.certManager.enabled"); cm != true {
		for _, p := range []string{"tls.secretName", "tls.mtls.workerSecretName"} {
			if s, err := values.PathValue(p); err == nil && s != "" {
				out[fmt.Sprint(s)] = true
			}
		}
	}
	return out
}

func printRendered(chartDir, file string) error {
	docs, _, err := Render(chartDir, []string{file}, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	for _, d := range docs {
		fmt.Printf("---\n# Source: %s (%s)\n%s\n", d.Source, file, d.YAML)
	}
	return nil
}
