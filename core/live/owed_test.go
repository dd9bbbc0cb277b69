package live_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/live"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
)

// A subscriber whose buffer filled is owed what it missed. These tests fill
// a buffer, make the last change (waiting until the hub holds the push it
// could not deliver), and only then read: the owed push arrives although
// nothing changes any more. Before, it waited for a later change that may
// never come, and the client stayed stale.

// waitOwed waits until the hub holds n owed pushes.
func waitOwed(t *testing.T, h *live.Hub, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return h.OwedPushes() == n }, 30*time.Second, 5*time.Millisecond,
		"owed pushes: want %d, have %d", n, h.OwedPushes())
}

// waitLen waits until a subscription's buffer holds n pushes.
func waitLen[T any](t *testing.T, ch <-chan T, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return len(ch) == n }, 30*time.Second, 5*time.Millisecond,
		"buffer: want %d pushes, have %d", n, len(ch))
}

func TestResourceChanged_OverflowedSubscriberGetsResyncWithoutAFurtherChange(t *testing.T) {
	t.Parallel()
	e := startHubWith(t, live.Options{Buffer: 2, CountsInterval: 10 * time.Millisecond, MemberPoll: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := live.SubscribeResources(ctx, e.hub, live.ResourceFilter{Kind: "leaf"}, func(c live.Change) live.Change { return c })
	// One statement, one wake: five changes for a buffer of two.
	e.exec(`INSERT INTO resources (id, kind, version, name, shard_id)
		SELECT id, 'leaf', 'v1', 'r' || i, shard_of(id) FROM (SELECT gen_random_uuid() AS id, i FROM generate_series(1, 5) i) s`)
	waitOwed(t, e.hub, 1)

	var got []string
	for len(got) == 0 || got[len(got)-1] != "RESYNC" {
		c := next(t, ch, fmt.Sprintf("a RESYNC after %v", got), func(live.Change) bool { return true })
		switch c.Type {
		case live.Resync:
			require.Equal(t, "leaf", c.Kind, "the RESYNC names the subscriber's kind")
			got = append(got, "RESYNC")
		default:
			got = append(got, c.Name)
		}
	}
	require.Len(t, got, 3, "the two changes that fit, then the RESYNC for the three that did not: %v", got)
	waitOwed(t, e.hub, 0)
}

func TestPhaseCounts_FullBufferGetsTheLatestCountsWithoutAFurtherChange(t *testing.T) {
	t.Parallel()
	e := startHub(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reconciling := func(cs []resource.PhaseCount) int64 {
		for _, c := range cs {
			if c.Phase == resource.PhaseReconciling {
				return c.Count
			}
		}
		return 0
	}
	ch := live.SubscribePhaseCounts(ctx, e.hub, "leaf", func(cs []resource.PhaseCount) []resource.PhaseCount { return cs })
	waitLen(t, ch, 1) // the counts at once
	e.insert("leaf", "a", uuid.Nil, uuid.Nil)
	waitLen(t, ch, 2) // the buffer (2) is full
	e.insert("leaf", "b", uuid.Nil, uuid.Nil)
	waitOwed(t, e.hub, 1)

	next(t, ch, "the counts with both rows", func(cs []resource.PhaseCount) bool { return reconciling(cs) == 2 })
	waitOwed(t, e.hub, 0)
}

func TestCatalogs_FullBufferGetsTheLatestListWithoutAFurtherChange(t *testing.T) {
	t.Parallel()
	e := startHub(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := live.SubscribeKinds(ctx, e.hub, func(ks []store.Kind) []store.Kind { return ks })
	waitLen(t, ch, 1) // the kinds at once
	addKind := func(name string) {
		e.exec(fmt.Sprintf(`INSERT INTO kind_manifest (kind, version, manifest) VALUES
			('%[1]s', 'v1', '{"kind":"%[1]s","reactions":[{"name":"w","trigger":"specChange","emits":["status"]}]}')`, name))
	}
	for i := range 3 { // the buffer (4) fills
		addKind(fmt.Sprintf("k%d", i))
		waitLen(t, ch, 2+i)
	}
	addKind("last")
	waitOwed(t, e.hub, 1)

	next(t, ch, "the list with the last kind", func(ks []store.Kind) bool {
		for _, k := range ks {
			if k.Name == "last" {
				return true
			}
		}
		return false
	})
	waitOwed(t, e.hub, 0)
}
