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
