package maintenance_test

import (
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// event writes one event of resource id, created at, and returns its id.
func (f *fixture) event(id string, at time.Time) int {
	f.t.Helper()
	return f.int(`INSERT INTO resource_events (resource_id, type, reason, created_at) VALUES ($1, 'Normal', 'Test', $2) RETURNING id`, id, at)
}

// remaining is the ids of the events left, oldest first.
func (f *fixture) remaining() []int {
	f.t.Helper()
	rows, err := f.db.Query(ctx, `SELECT id FROM resource_events ORDER BY id`)
	require.NoError(f.t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(f.t, err)
	return ids
}

// A prune deletes the expired events, oldest first by their time (not by
// id: a transaction that started earlier can write its event later), at
// most limit a pass; with nothing expired, or nothing at all, it deletes
// nothing.
func TestPruneEvents_DeletesTheExpiredHead(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	st := f.at(t0)
	cutoff := t0.Add(-7 * 24 * time.Hour)

	n, err := st.PruneEvents(ctx, cutoff, 100)
	require.NoError(t, err)
	require.Zero(t, n, "an empty log")

	r := f.res(res{})
	var old []int
	for i := range 5 {
		old = append(old, f.event(r, cutoff.Add(-time.Duration(10-i)*time.Hour)))
	}
	young := f.event(r, cutoff.Add(time.Hour))
	late := f.event(r, cutoff.Add(-time.Hour)) // expired, but written after a younger one
	newest := f.event(r, t0)

	n, err = st.PruneEvents(ctx, cutoff, 2)
	require.NoError(t, err)
	require.Equal(t, 2, n, "at most limit a pass")
	require.Equal(t, append(append([]int{}, old[2:]...), young, late, newest), f.remaining(), "the oldest two went first")

	n, err = st.PruneEvents(ctx, cutoff, 100)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	require.Equal(t, []int{young, newest}, f.remaining(), "every expired event, the one written late too")

	n, err = st.PruneEvents(ctx, cutoff, 100)
	require.NoError(t, err)
	require.Zero(t, n, "nothing expired")
	require.Equal(t, []int{young, newest}, f.remaining())

	// Two hours on, the young event has expired too.
	n, err = st.PruneEvents(ctx, cutoff.Add(2*time.Hour), 100)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, []int{newest}, f.remaining())
}

// Passes running at once on several control pods delete each expired event
// once between them, and none fails on a row another is deleting.
func TestPruneEvents_ConcurrentPassesShareTheWork(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := f.res(res{})
	cutoff := t0.Add(-7 * 24 * time.Hour)
	f.exec(`INSERT INTO resource_events (resource_id, type, reason, created_at)
SELECT $1, 'Normal', 'Test', $2::timestamptz - interval '1 hour' FROM generate_series(1, 5000)`, r, cutoff)
	youngest := f.event(r, t0)

	const passes = 4
	var wg sync.WaitGroup
	counts := make([]int, passes)
	errs := make([]error, passes)
	for i := range passes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			counts[i], errs[i] = f.at(t0).PruneEvents(ctx, cutoff, 5000)
		}()
	}
	wg.Wait()
	total := 0
	for i := range passes {
		require.NoError(t, errs[i])
		total += counts[i]
	}
	require.Equal(t, 5000, total, "each expired event deleted once")
	require.Equal(t, []int{youngest}, f.remaining())
}
