package store

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The cluster's lease key is created once however many members ask at
// the same time; a rotation adds a newer key that issues while the older
// ones keep verifying, and at most LeaseKeysKept are kept.
func TestLeaseKeys_CreatedOnceRotatedAndBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		got [][][]byte
	)
	for range 8 { // eight brokers booting at once
		wg.Go(func() {
			ks, err := e.store.LeaseKeys(ctx, time.Hour)
			require.NoError(t, err)
			mu.Lock()
			got = append(got, ks)
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, ks := range got {
		require.Len(t, ks, 1, "one key for the whole cluster")
		require.Equal(t, got[0][0], ks[0])
		require.Len(t, ks[0], 32)
	}
	first := got[0][0]

	again, err := e.store.LeaseKeys(ctx, time.Hour)
	require.NoError(t, err)
	require.Equal(t, [][]byte{first}, again, "fresh: read, not rotated")

	_, err = e.pool.Exec(ctx, `UPDATE lease_keys SET created_at = now() - interval '2 hours'`)
	require.NoError(t, err)
	rotated, err := e.store.LeaseKeys(ctx, time.Hour)
	require.NoError(t, err)
	require.Len(t, rotated, 2)
	require.NotEqual(t, first, rotated[0], "a fresh key issues")
	require.Equal(t, first, rotated[1], "the previous one still verifies")

	for range 4 {
		_, err = e.pool.Exec(ctx, `UPDATE lease_keys SET created_at = now() - interval '2 hours'`)
		require.NoError(t, err)
		_, err = e.store.LeaseKeys(ctx, time.Hour)
		require.NoError(t, err)
	}
	var n int
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*) FROM lease_keys`).Scan(&n))
	require.Equal(t, LeaseKeysKept, n, "only the newest are kept")

	never, err := e.store.LeaseKeys(ctx, 0)
	require.NoError(t, err)
	require.Len(t, never, LeaseKeysKept, "rotateAfter 0 never rotates")
}
