package metrics

import (
	"context"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// TestMetrics_DocumentedAsServed: docs/operations.md's "Probes and metrics"
// names every converge_* metric the process serves, and serves every one it
// names.
func TestMetrics_DocumentedAsServed(t *testing.T) {
	t.Parallel()
	m := New()
	m.RegisterQueueDepth(func(context.Context) (map[[2]string]float64, error) { return nil, nil }, time.Second)
	served := map[string]bool{"converge_queue_depth": true}
	fq := regexp.MustCompile(`fqName: "(converge_[a-z_]+)"`)
	v := reflect.ValueOf(*m)
	for i := range v.NumField() {
		c, ok := v.Field(i).Interface().(prometheus.Collector)
		if !ok || v.Type().Field(i).Name == "Registry" {
			continue
		}
		ch := make(chan *prometheus.Desc, 16)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			if n := fq.FindStringSubmatch(d.String()); n != nil {
				served[n[1]] = true
			}
		}
	}
	require.Greater(t, len(served), 5, "the collectors are found")

	b, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(b), "\n## Probes and metrics\n")
	require.True(t, ok, "operations.md has a Probes and metrics section")
	section, _, _ = strings.Cut(section, "\n## ")
	documented := map[string]bool{}
	for _, n := range regexp.MustCompile("`(converge_[a-z_]+)`").FindAllStringSubmatch(section, -1) {
		documented[n[1]] = true
	}
	var undocumented, unserved []string
	for n := range served {
		if !documented[n] {
			undocumented = append(undocumented, n)
		}
	}
	for n := range documented {
		if !served[n] {
			unserved = append(unserved, n)
		}
	}
	sort.Strings(undocumented)
	sort.Strings(unserved)
	require.Empty(t, undocumented, "served, and not named in docs/operations.md's Probes and metrics")
	require.Empty(t, unserved, "named in docs/operations.md's Probes and metrics, and not served")
}
