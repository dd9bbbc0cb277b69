package main

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
)

// Release is what the check renders as: the names the objects get.
const (
	ReleaseName      = "converge"
	ReleaseNamespace = "converge"
	// KubeVersion is the cluster the check renders for: the oldest the
	// chart supports (the preStop sleep action is GA from 1.30).
	KubeVersion = "v1.30.0"
)

// Doc is one rendered object's YAML and the template it came from.
type Doc struct {
	Source string
	YAML   string
}

// Render renders the chart at dir with the values files (merged in order,
// later wins) and the override values on top, the way `helm template`
// does: values coalesced over the chart's defaults, validated against
// values.schema.json, the chart's kubeVersion constraint checked. It
// returns every object in a stable order; NOTES.txt is left out.
func Render(dir string, valueFiles []string, override map[string]any) ([]Doc, chartutil.Values, error) {
	chrt, err := loader.Load(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("load the chart %s: %w", dir, err)
	}
	vals := map[string]any{}
	for _, f := range valueFiles {
		v, err := chartutil.ReadValuesFile(f)
		if err != nil {
			return nil, nil, fmt.Errorf("read %s: %w", f, err)
		}
		vals = chartutil.CoalesceTables(v, vals)
	}
	if override != nil {
		vals = chartutil.CoalesceTables(deepCopy(override), vals)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = chartutil.KubeVersion{Version: KubeVersion, Major: "1", Minor: "30"}
	if err := checkKubeVersion(chrt, caps); err != nil {
		return nil, nil, err
	}
	rv, err := chartutil.ToRenderValues(chrt, vals, chartutil.ReleaseOptions{
		Name: ReleaseName, Namespace: ReleaseNamespace, Revision: 1, IsInstall: true,
	}, caps)
	if err != nil {
		return nil, nil, fmt.Errorf("values: %w", err)
	}
	out, err := engine.Render(chrt, rv)
	if err != nil {
		return nil, nil, fmt.Errorf("render: %w", err)
	}
	files := make([]string, 0, len(out))
	for name := range out {
		files = append(files, name)
	}
	sort.Strings(files)
	var docs []Doc
	for _, name := range files {
		if strings.HasSuffix(name, "NOTES.txt") || strings.HasPrefix(filepath.Base(name), "_") {
			continue
		}
		split := releaseutil.SplitManifests(out[name])
		keys := make([]string, 0, len(split))
		for k := range split {
			keys = append(keys, k)
		}
		sort.Sort(releaseutil.BySplitManifestsOrder(keys))
		for _, k := range keys {
			if body := strings.TrimSpace(split[k]); body != "" && !onlyComments(body) {
				docs = append(docs, Doc{Source: name, YAML: body})
			}
		}
	}
	values, _ := rv["Values"].(chartutil.Values)
	return docs, values, nil
}

func checkKubeVersion(chrt *chart.Chart, caps *chartutil.Capabilities) error {
	if c := chrt.Metadata.KubeVersion; c != "" && !chartutil.IsCompatibleRange(c, caps.KubeVersion.String()) {
		return fmt.Errorf("chart requires kubeVersion %s, the check renders for %s", c, caps.KubeVersion)
	}
	return nil
}

func onlyComments(body string) bool {
	for _, line := range strings.Split(body, "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

// deepCopy copies nested maps so coalescing never writes into the caller's.
func deepCopy(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			out[k] = deepCopy(sub)
		} else {
			out[k] = v
		}
	}
	return out
}
