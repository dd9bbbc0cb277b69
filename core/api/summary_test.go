package api_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/api"
)

// TestSummary_FirstPaintInOneRead: the summary query carries the totals,
// each non-reactor kind's non-zero counts by phase, and the queue estimate.
func TestSummary_FirstPaintInOneRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.manifest(workerKind)
	e.manifest(reactorKind)
	e.apply("leaf", "a", `{size: 1}`)
	e.apply("leaf", "b", `{size: 2}`)
	var got struct {
		Summary struct {
			PhaseCounts []struct {
				Phase string
				Count int
			}
			ByKind []struct {
				Kind, Phase string
				Count       int
			}
			Queue []struct {
				Kind            string
				Pending, Leased int
			}
		}
	}
	e.ok(`{ summary { phaseCounts { phase count } byKind { kind phase count } queue { kind pending leased } } }`, nil, &got)
	require.Len(t, got.Summary.PhaseCounts, 7)
	total := 0
	for _, c := range got.Summary.PhaseCounts {
		total += c.Count
	}
	require.Equal(t, 2, total)
	require.Len(t, got.Summary.ByKind, 1, "non-zero counts of non-reactor kinds only: %+v", got.Summary.ByKind)
	require.Equal(t, "leaf", got.Summary.ByKind[0].Kind)
	require.Equal(t, "RECONCILING", got.Summary.ByKind[0].Phase)
	require.Equal(t, 2, got.Summary.ByKind[0].Count)
	require.NotNil(t, got.Summary.Queue, "the queue estimate is a list (empty before the planner has statistics)")
}

// TestKindUsage_TheKindsListIsAConstantNumberOfStatements: kinds { usage }
// — the dashboard's Kinds page and its KindsLive subscription, pushed to
// every open dashboard on each manifest apply — reads every kind version's
// usage in one statement, not one per kind version on the primary. The
// list prefetches it: with a nanosecond batch window (a slow machine's,
// in effect) the loaders alone read a kind at a time.
func TestKindUsage_TheKindsListIsAConstantNumberOfStatements(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(api.Limits{LoaderWait: time.Nanosecond}))
	const query = `{ kinds { name version usage { resources servedBy } } }`
	count := func() (int64, int) {
		var out struct {
			Kinds []struct {
				Name  string
				Usage struct{ Resources int }
			}
		}
		used := e.statementsOf(query, nil, &out)
		for _, k := range out.Kinds {
			if k.Name == "k00" {
				require.Equal(t, 1, k.Usage.Resources)
			}
		}
		return used, len(out.Kinds)
	}
	e.manifest(`{"kind":"k00","reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`)
	e.apply("k00", "a", `{}`)
	small, n := count()
	require.Equal(t, 1, n)
	for i := 1; i < 30; i++ {
		e.manifest(fmt.Sprintf(`{"kind":"k%02d","reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`, i))
	}
	big, n := count()
	require.Equal(t, 30, n)
	t.Logf("statements: 30 kinds %d, 1 kind %d", big, small)
	require.Equal(t, small, big, "the count does not grow with the kinds")
}
