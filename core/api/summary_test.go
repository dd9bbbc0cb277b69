package api_test

import (
	"testing"

	"github.com/stretchr/testify/require"
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
