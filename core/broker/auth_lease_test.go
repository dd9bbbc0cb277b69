package broker

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// On an open plane (no mesh tokens) two brokers reading the same cluster
// keys verify each other's lease secrets; a rotation one of them sees first
// is picked up by the other on the first secret it cannot verify; a secret
// of a process-own key (issued before the cluster key was read) verifies
// only on its issuer.
func TestLeaseKeys_SharedClusterKeyVerifiesAcrossBrokers(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		cluster = [][]byte{key(1)}
	)
	source := func(context.Context) ([][]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		return cluster, nil
	}
	a, b := newLeaseKeys(nil), newLeaseKeys(nil)
	early := a.issue("holder", "t0") // before the cluster key was read: a's own key
	a.source, b.source = source, source
	require.NoError(t, a.load(context.Background()))
	require.NoError(t, b.load(context.Background()))

	s := a.issue("holder", "t1")
	require.True(t, b.verify("holder", "t1", s), "the other broker verifies it")
	require.False(t, b.verify("other-holder", "t1", s), "for that holder only")
	require.False(t, b.verify("holder", "t2", s), "for that task only")
	require.True(t, a.verify("holder", "t0", early))
	require.False(t, b.verify("holder", "t0", early), "a process-own key is its issuer's alone")

	mu.Lock()
	cluster = [][]byte{key(2), key(1)} // rotated
	mu.Unlock()
	require.NoError(t, a.load(context.Background()))
	b.reloaded = b.reloaded.Add(-leaseReloadEvery) // b has not re-read since
	rotated := a.issue("holder", "t3")
	require.True(t, b.verify("holder", "t3", rotated), "an unverifiable secret re-reads the keys once")
	require.True(t, b.verify("holder", "t1", s), "the previous key still verifies")
}

func key(b byte) []byte {
	k := make([]byte, 32)
	for i := range k {
		k[i] = b
	}
	return k
}
