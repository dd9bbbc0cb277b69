package broker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/engine/enginetest"
	"github.com/converge-run/converge/core/manifest"
)

func TestExcessWorkers(t *testing.T) {
	for _, c := range []struct {
		name  string
		own   int
		peers []int
		want  int
	}{
		{"alone: nowhere to go", 5, nil, 0},
		{"even", 2, []int{2, 2}, 0},
		{"within the rounded-up share", 2, []int{1, 1}, 0},
		{"one above, an empty peer", 3, []int{1, 0}, 1},
		{"every worker here, two empty peers", 4, []int{0, 0}, 2},
		{"six here: down to the share of two", 6, []int{0, 0}, 3},
		{"one above the share, but the peers are one below: moving it only swaps", 2, []int{1}, 0},
		{"a lone worker is never moved", 1, []int{0, 0}, 0},
		{"nothing here", 0, []int{3, 0}, 0},
		{"one above a share of three", 4, []int{3, 3, 3, 0, 3}, 1},
		{"no more than half the gap to the emptiest peer at once", 7, []int{1, 1}, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, excessWorkers(c.own, c.peers))
		})
	}
}

// peerCounts is a settable view of the peers' reported workers.
type peerCounts struct {
	mu sync.Mutex
	n  []int
}

func (p *peerCounts) set(n ...int) {
	p.mu.Lock()
	p.n = n
	p.mu.Unlock()
}

func (p *peerCounts) get() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int(nil), p.n...)
}

// A broker above its share sheds the sessions running the fewest stages,
// once the excess has lasted a settle, and no more until its cooldown has
// passed, however stale the peers' counts look meanwhile; an excess that
// the peers' rows correct within the settle sheds nothing, and once the
// counts show the workers spread, nothing more is shed.
func TestSpreader_ShedsAboveItsShareOnceSettledAndOncePerCooldown(t *testing.T) {
	kv := manifest.KindVersion{Kind: "vpc", Version: "v1"}
	reg := newRegistry(zerolog.Nop())
	sessions := map[string]*session{}
	for _, id := range []string{"a", "b", "c"} {
		s := &session{id: id, workerID: id, maxIn: 4, ready: map[manifest.KindVersion]bool{kv: true},
			done: make(chan struct{}), retiredCh: make(chan struct{})}
		reg.add(s)
		sessions[id] = s
	}
	reg.mu.Lock()
	sessions["a"].inFlight, sessions["b"].inFlight, sessions["c"].inFlight = 2, 0, 1
	reg.mu.Unlock()

	peers := &peerCounts{}
	peers.set(0, 0) // the peers' first beats have not landed yet
	clock := enginetest.NewClock(time.Unix(0, 0))
	looks := make(chan int, 16)
	sp := &spreader{reg: reg, peers: peers.get, clock: clock, log: zerolog.Nop(), cooldown: 5 * time.Second,
		settle: time.Second, looked: func(n int) { looks <- n }}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = sp.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	look := func() int {
		t.Helper()
		select {
		case n := <-looks:
			return n
		case <-time.After(5 * time.Second):
			t.Fatal("the spreader did not look")
			return 0
		}
	}
	shed := func(id string) bool {
		select {
		case <-sessions[id].retiredCh:
			return true
		default:
			return false
		}
	}

	require.Equal(t, 1, look(), "three of three workers here: one above the share")
	peers.set(2, 2) // the peers' beats land: seven workers, a share of three
	reg.notifyRoutes()
	require.Equal(t, 0, look())
	clock.Advance(time.Second)
	require.False(t, shed("a") || shed("b") || shed("c"), "an excess gone within the settle sheds nothing")

	peers.set(1, 0) // four workers over three brokers: a share of two
	reg.notifyRoutes()
	require.Equal(t, 1, look())
	require.False(t, shed("b"), "not before the excess has lasted the settle")
	clock.Advance(time.Second)
	require.Equal(t, 1, look())
	require.True(t, shed("b"), "the idle session is shed")
	require.False(t, shed("a") || shed("c"), "only one session is above the share")
	require.Equal(t, 2, reg.workers(), "a shed session no longer counts as this broker's worker")
	require.ErrorIs(t, reg.retiredFor(sessions["b"]), errSessionShed)

	// The peers' rows have not caught up (the shed worker is still on its
	// way): by them this broker is still above its share, but it waits out
	// its cooldown.
	require.Equal(t, 1, look()) // the shed's own routing change
	clock.Advance(time.Second)
	require.Equal(t, 1, look()) // settled, but within the cooldown
	require.False(t, shed("c"), "nothing shed within the cooldown")
	clock.Advance(4 * time.Second)
	require.Equal(t, 1, look())
	require.True(t, shed("c"), "after the cooldown, a broker still above its share sheds again")

	// The counts show the workers spread: nothing more is shed.
	peers.set(2, 1)
	require.Equal(t, 0, look()) // the shed's own routing change
	clock.Advance(time.Minute)
	reg.notifyRoutes()
	require.Equal(t, 0, look())
	require.False(t, shed("a"), "the last session is within the share")
	require.Equal(t, 1, reg.workers())
}
