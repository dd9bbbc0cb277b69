package store

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/db/pgtest"
)

func TestWaitReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	primary, other := pgtest.PoolFor(t, url), pgtest.PoolFor(t, url)
	cases := map[string]struct {
		reason string
		s      *Store
	}{
		"NoReplica": {reason: "a store reading from the primary has nothing to wait for", s: New(primary, nil)},
		"NotInRecovery": {reason: "a read pool that is not a standby (no replay position) counts as caught up",
			s: New(primary, other)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ok, err := tc.s.WaitReplay(ctx, 50*time.Millisecond)
			require.NoError(t, err, tc.reason)
			require.True(t, ok, tc.reason)
		})
	}
}
