package broker

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/auth"
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

// A broker that just started verifies its workers' redelivered results
// while its first read of the cluster keys is still running: every secret
// that misses waits for that read and verifies with its keys. (Before, the
// first miss started a read and a second miss within the second was
// refused outright: its worker dropped the result and the task, adopted by
// this broker, hung until the worker's session ended.)
func TestLeaseKeys_MissesDuringAReadWaitForIt(t *testing.T) {
	t.Parallel()
	issuer := newLeaseKeys(nil)
	issuer.source = func(context.Context) ([][]byte, error) { return [][]byte{key(3)}, nil }
	require.NoError(t, issuer.load(context.Background()))
	secrets := []string{issuer.issue("holder", "t1"), issuer.issue("holder", "t2")}

	started, release := make(chan struct{}), make(chan struct{})
	var reads atomic.Int32
	successor := newLeaseKeys(nil)
	successor.source = func(context.Context) ([][]byte, error) {
		if reads.Add(1) == 1 {
			close(started)
		}
		<-release
		return [][]byte{key(3)}, nil
	}
	got := make(chan bool, 2)
	go func() { got <- successor.verify("holder", "t1", secrets[0]) }()
	<-started
	go func() { got <- successor.verify("holder", "t2", secrets[1]) }()
	select {
	case ok := <-got:
		t.Fatalf("a verification returned %v before the read under way ended", ok)
	case <-time.After(50 * time.Millisecond): // proving an absence: neither returns early
	}
	close(release)
	require.True(t, <-got)
	require.True(t, <-got)
	require.EqualValues(t, 1, reads.Load(), "one read served both misses")
}

func key(b byte) []byte {
	k := make([]byte, 32)
	for i := range k {
		k[i] = b
	}
	return k
}

// A pooled HMAC state, reset between uses and shared by goroutines, gives
// the same MAC as a fresh keyed HMAC over the length-prefixed parts; a
// different key, holder, task or nonce gives another.
func TestLeaseSum_PooledStateMatchesAFreshHMAC(t *testing.T) {
	t.Parallel()
	want := func(k []byte, holder, task string, nonce []byte) []byte {
		m := hmac.New(sha256.New, k)
		for _, part := range [][]byte{[]byte(holder), []byte(task), nonce} {
			var n [8]byte
			binary.BigEndian.PutUint64(n[:], uint64(len(part)))
			m.Write(n[:])
			m.Write(part)
		}
		return m.Sum(nil)[:leaseMAC]
	}
	mk := newMACKey(key(7))
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				holder, task := fmt.Sprintf("h%d", g), fmt.Sprintf("task-%d", i)
				nonce := []byte(fmt.Sprintf("nonce-%016d", i))
				got := leaseSum(nil, mk, holder, task, nonce)
				if !bytes.Equal(got, want(key(7), holder, task, nonce)) {
					t.Errorf("leaseSum(%s, %s) = %x, want a fresh HMAC's", holder, task, got)
					return
				}
			}
		})
	}
	wg.Wait()
	a := leaseSum(nil, mk, "h", "t", []byte("n"))
	require.NotEqual(t, a, leaseSum(nil, newMACKey(key(8)), "h", "t", []byte("n")), "another key")
	require.NotEqual(t, a, leaseSum(nil, mk, "h2", "t", []byte("n")), "another holder")
	require.NotEqual(t, a, leaseSum(nil, mk, "h", "t2", []byte("n")), "another task")
	require.NotEqual(t, a, leaseSum(nil, mk, "h", "t", []byte("m")), "another nonce")
	require.NotEqual(t, a, leaseSum(nil, mk, "ht", "", []byte("n")), "the parts are length-prefixed")
}

// A secret is issued in one allocation (the string) and verifies for its
// holder and task only.
func TestLeaseKeys_IssueAllocatesTheSecretOnly(t *testing.T) { //nolint:paralleltest // AllocsPerRun
	l := newLeaseKeys(nil)
	var secret string
	allocs := testing.AllocsPerRun(100, func() { secret = l.issue("holder", "task-1") })
	verifies := testing.AllocsPerRun(100, func() { _ = l.verify("holder", "task-1", secret) })
	if !raceEnabled { // the HMAC states come from a sync.Pool
		require.LessOrEqual(t, allocs, 1.0)
		require.Zero(t, verifies, "a verification allocates nothing")
	}
	require.Len(t, secret, 43) // unpadded base64 of 32 bytes
	require.True(t, l.verify("holder", "task-1", secret))
	require.False(t, l.verify("holder", "task-2", secret))
	require.False(t, l.verify("other", "task-1", secret))
	require.NotEqual(t, secret, l.issue("holder", "task-1"), "a fresh nonce each time")
	for _, bad := range []string{"", secret[:len(secret)-1], secret + "A", secret[:42] + "!", strings.Repeat("A", 1000)} {
		require.False(t, l.verify("holder", "task-1", bad), "%q", bad)
	}
}

// With mesh tokens the lease secrets are issued with the first mesh token's
// key and verified with every listed token's. The documented rotation keeps
// every secret verifying while both tokens are listed; removing the old
// token retires the secrets issued under it (their tasks run again), so the
// rotation waits out the longest task between its last two steps.
func TestLeaseKeys_MeshTokenRotationRetiresTheOldTokensSecretsOnlyAtRemoval(t *testing.T) {
	t.Parallel()
	const oldTok, newTok = "mesh-token-old-0123456789", "mesh-token-new-0123456789"
	file := filepath.Join(t.TempDir(), "mesh")
	write := func(content string) {
		t.Helper()
		require.NoError(t, os.WriteFile(file, []byte(content), 0o600))
	}
	write(oldTok + " mesh-old\n")
	plane, err := auth.NewPlane("", file, time.Hour, zerolog.Nop())
	require.NoError(t, err)
	l := newLeaseKeys(plane)
	underOld := l.issue("holder", "t1")

	write(oldTok + " mesh-old\n" + newTok + " mesh-new\n") // 1. add the new token
	require.NoError(t, plane.Reload())
	require.True(t, l.verify("holder", "t1", underOld))
	write(newTok + " mesh-new\n" + oldTok + " mesh-old\n") // 2. move it to the top
	require.NoError(t, plane.Reload())
	underNew := l.issue("holder", "t2")
	require.True(t, l.verify("holder", "t1", underOld), "a secret of the old token verifies while it is listed")
	write(newTok + " mesh-new\n") // 3. remove the old token
	require.NoError(t, plane.Reload())
	require.True(t, l.verify("holder", "t2", underNew))
	require.False(t, l.verify("holder", "t1", underOld), "a secret issued under a removed token no longer verifies")
}
