package broker

import "context"

// DefaultComposeSlots is how many composes one broker runs at once.
//
// A compose is the heaviest task there is: its worker returns the whole
// composition (a bom: 1,000 children with their specs and edges) and the
// broker writes it in one transaction — a thousand inserts, their index
// entries, labels and edges, tens of milliseconds of database time. The
// kind's cap (max_inflight) bounds a composite's tasks cluster-wide, but a
// composite usually has no cap, so 100 roots applied at once became 100
// compositions held in memory and 100 transactions queued in Postgres
// while the leaves they had already created waited behind them (the first
// leaf of a 100k run started 9 s in; 1,000 roots held a 1M run for minutes).
// Two slots keep a compose writing while the next one's worker computes,
// and leave the rest of the machine to the leaves.
const DefaultComposeSlots = 2

// composeSlots bounds the composes in flight on one broker: a task takes a
// slot before its compose stage is sent and gives it back once the
// composition is written (or failed). Other stages never wait on it.
type composeSlots chan struct{}

func newComposeSlots(n int) composeSlots {
	if n <= 0 {
		n = DefaultComposeSlots
	}
	return make(composeSlots, n)
}

// acquire waits for a slot; it returns the release, or ctx's error.
func (s composeSlots) acquire(ctx context.Context) (func(), error) {
	if s == nil {
		return func() {}, nil
	}
	select {
	case s <- struct{}{}:
		return func() { <-s }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
