package metrics

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRegisterQueueDepth_CachesPerTTLAndStatesItsPrecision(t *testing.T) {
	t.Parallel()
	m := New()
	calls := 0
	m.RegisterQueueDepth(func(context.Context) (map[[2]string]float64, error) {
		calls++
		if calls > 1 {
			return nil, errors.New("down")
		}
		return map[[2]string]float64{{"vpc", "pending"}: 12, {"vpc", "leased"}: 3}, nil
	}, time.Hour)
	for range 3 {
		mfs, err := m.Registry.Gather()
		require.NoError(t, err)
		got := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() != "converge_queue_depth" {
				continue
			}
			require.Equal(t, queueDepthHelp, mf.GetHelp())
			for _, mt := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range mt.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				got[labels["kind"]+"/"+labels["state"]] = mt.GetGauge().GetValue()
			}
		}
		require.Equal(t, map[string]float64{"vpc/pending": 12, "vpc/leased": 3}, got)
	}
	require.Equal(t, 1, calls, "scrapes within the TTL share one read")
	require.Contains(t, queueDepthHelp, "no queue scan", "the help text states the precision")
}

// queueDepthSeries gathers converge_queue_depth as "kind/state" → value.
func queueDepthSeries(t *testing.T, m *Metrics) map[string]float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "converge_queue_depth" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			got[labels["kind"]+"/"+labels["state"]] = mt.GetGauge().GetValue()
		}
	}
	return got
}

// A read that fails past the cache's TTL (the database away) leaves the
// gauge without series, as unknown, rather than serving the last value as
// current for as long as the outage lasts; the next read that succeeds
// brings them back.
func TestRegisterQueueDepth_AFailedReadPastTheTTLServesNothing(t *testing.T) {
	t.Parallel()
	m := New()
	var fail bool
	m.RegisterQueueDepth(func(context.Context) (map[[2]string]float64, error) {
		if fail {
			return nil, errors.New("database unreachable")
		}
		return map[[2]string]float64{{"vpc", "pending"}: 12}, nil
	}, 0)
	require.Equal(t, map[string]float64{"vpc/pending": 12}, queueDepthSeries(t, m))
	fail = true
	require.Empty(t, queueDepthSeries(t, m), "the value of a read that no longer succeeds is not current")
	fail = false
	require.Equal(t, map[string]float64{"vpc/pending": 12}, queueDepthSeries(t, m))
}
