package live_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/live"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store/notify"
	"github.com/converge-run/converge/db/pgtest"
)

// TestSamples_BoundedRingOfQueueAndPhaseTotals: the hub samples the phase
// totals and the queue estimate on its own (no subscriber needed), keeps
// the last SampleWindow, oldest first.
func TestSamples_BoundedRingOfQueueAndPhaseTotals(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	db := pgtest.PoolFor(t, url)
	l := notify.NewListener(db, zerolog.Nop())
	h := live.NewHub(l, db, zerolog.Nop(), live.WithOptions(live.Options{MemberPoll: time.Hour,
		SampleEvery: 20 * time.Millisecond, SampleWindow: 3}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = h.Run(ctx) }()
	<-h.Started()

	_, err := db.Exec(ctx, `INSERT INTO kind_manifest (kind, version, manifest) VALUES
		('leaf', 'v1', '{"kind":"leaf","reactions":[{"name":"w","trigger":"specChange","emits":["status"]}]}')`)
	require.NoError(t, err)
	for range 4 {
		id := uuid.New()
		_, err := db.Exec(ctx, `INSERT INTO resources (id, kind, version, name, shard_id) VALUES ($1, 'leaf', 'v1', $2, shard_of($1))`,
			id, id.String())
		require.NoError(t, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	var got []live.Sample
	for {
		got = h.Samples()
		if n := len(got); n == 3 && reconciling(got[n-1]) == 4 {
			break
		}
		require.True(t, time.Now().Before(deadline), "no sample with the 4 new resources within 30s: %+v", got)
		require.LessOrEqual(t, len(got), 3, "the ring keeps SampleWindow samples")
		time.Sleep(10 * time.Millisecond) // polling the ring, bounded by the deadline above
	}
	require.Len(t, got, 3)
	for i := 1; i < len(got); i++ {
		require.False(t, got[i].At.Before(got[i-1].At), "oldest first")
	}
	require.Len(t, got[2].Phases, len(resource.AllPhases), "all seven phases, zeros included")
}

func reconciling(s live.Sample) int64 {
	for _, p := range s.Phases {
		if p.Phase == resource.PhaseReconciling {
			return p.Count
		}
	}
	return 0
}
