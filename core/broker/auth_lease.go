package broker

import (
	"context"
	"crypto/hmac"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"hash"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/converge-run/converge/core/auth"
	"github.com/converge-run/converge/core/engine"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// Lease secrets: every hand-over of a stage to a worker carries a fresh
// secret — 16 random bytes and a MAC over them, the task id and the
// session's holder (its authenticated identity and worker id) — that the
// worker must echo in the completion and in every redelivery of it. A
// completion is accepted only with a secret this plane issued for that task
// to that holder: a rogue client, even one holding a worker credential,
// cannot complete a task it was not handed, and the real worker's result
// still applies. The MAC is checkable without state, so a redelivery after
// the stage stopped waiting is verified too, by any broker of the cluster:
// secrets are issued with the key derived from the mesh tokens when there
// are any (an authenticated mesh: unchanged), and otherwise with the
// cluster's shared key from Postgres (lease_keys: created by the first
// broker, rotated every LeaseKeyRotation, the newest few verifying), so a
// worker's completion redelivered to another broker after a partition is
// accepted on an open worker plane too. Every member verifies against all
// of them: the mesh keys, the shared keys and its own random process key
// (what it issued before the shared key was first read, or while Postgres
// was unreachable at boot). A secret no key verifies triggers one re-read
// of the shared keys (at most once per leaseReloadEvery), so a rotation by
// another member is seen at once.

const (
	leaseNonce = 16
	leaseMAC   = 16
	// leaseSecretLen is a secret's length: its nonce and MAC in unpadded
	// base64url.
	leaseSecretLen = ((leaseNonce+leaseMAC)*8 + 5) / 6
)

// leaseKeys issues and verifies lease secrets.
type leaseKeys struct {
	own   []byte
	creds *auth.Plane // nil: no mesh tokens
	// shared reads the cluster's keys, newest first (nil: none, as in
	// unit tests); every is how often run re-reads them.
	source func(ctx context.Context) ([][]byte, error)
	every  time.Duration
	log    zerolog.Logger
	// outage hears of reads failing for an unreachable database (nil: each
	// failure is logged).
	outage *engine.Outage

	mu       sync.Mutex
	derived  []*macKey // the keys of the credentials' generation seen
	gen      int64     // creds.Swaps() when derived was computed
	shared   [][]byte  // the cluster keys last read, newest first
	reloaded time.Time // when the last read ended
	reading  *keyRead  // the read under way (nil: none)
}

// leaseReloadEvery bounds the re-reads a secret that verifies with no key
// triggers (a forged one must not turn into a query per message).
const leaseReloadEvery = time.Second

func newLeaseKeys(creds *auth.Plane) *leaseKeys {
	k := make([]byte, 32)
	_, _ = crand.Read(k) // crypto/rand.Read never fails (Go 1.24+)
	return &leaseKeys{own: k, creds: creds}
}

// keys are the MAC keys to verify with; the first one issues: the mesh
// tokens' (derived again only when the credentials rotated), then the
// cluster's shared keys, then this process's own.
func (l *leaseKeys) keys() []*macKey {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.derived != nil && l.gen == l.creds.Swaps() {
		return l.derived
	}
	l.gen = l.creds.Swaps()
	var out []*macKey
	for _, t := range l.creds.MeshTokens() {
		m := hmac.New(sha256.New, []byte(t))
		m.Write([]byte("converge lease secret v1"))
		out = append(out, newMACKey(m.Sum(nil)))
	}
	for _, k := range l.shared {
		out = append(out, newMACKey(k))
	}
	out = append(out, newMACKey(l.own))
	l.derived = out
	return l.derived
}

// macKey is one lease key with a pool of its HMAC states: every stage
// hand-over and every completion computes a MAC, and hmac.New per call
// (two SHA-256 states, the pads hashed again) was a few percent of the
// broker's CPU. A pooled state is Reset to the keyed start, which costs no
// hashing.
type macKey struct {
	key  []byte
	macs sync.Pool // of *macState keyed with key
}

func newMACKey(key []byte) *macKey {
	k := &macKey{key: key}
	k.macs.New = func() any { return &macState{mac: hmac.New(sha256.New, k.key)} }
	return k
}

// load reads the cluster's shared keys; keys() derives its list again. One
// read runs at a time: a caller that finds one under way waits for it and
// shares its outcome. A broker that just started gets its workers'
// redelivered results before its first read has returned; each of them
// must wait for the keys that read is fetching, not be refused because
// another one's miss had started it.
func (l *leaseKeys) load(ctx context.Context) error {
	if l.source == nil {
		return nil
	}
	l.mu.Lock()
	if r := l.reading; r != nil {
		l.mu.Unlock()
		select {
		case <-r.done:
			return r.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r := &keyRead{done: make(chan struct{})}
	l.reading = r
	l.mu.Unlock()
	ks, err := l.source(ctx)
	l.mu.Lock()
	l.reloaded = time.Now()
	if err == nil && len(ks) > 0 {
		l.shared, l.derived = ks, nil
	}
	l.reading = nil
	l.mu.Unlock()
	r.err = err
	close(r.done)
	return err
}

// keyRead is a read of the shared keys under way; err is set before done
// closes.
type keyRead struct {
	done chan struct{}
	err  error
}

// reload re-reads the shared keys after a secret no key verified: it joins
// a read under way, or starts one when the last ended leaseReloadEvery ago
// or more (forged secrets cost at most one query a second); it reports
// whether the keys were read.
func (l *leaseKeys) reload() bool {
	l.mu.Lock()
	due := l.source != nil && (l.reading != nil || time.Since(l.reloaded) >= leaseReloadEvery)
	l.mu.Unlock()
	if !due {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := l.load(ctx); err != nil {
		if !l.outage.Failed("lease-keys", err) {
			l.log.Warn().Err(err).Msg("re-read the cluster lease keys")
		}
		return false
	}
	l.outage.Succeeded()
	return true
}

// Name implements engine.Duty.
func (l *leaseKeys) Name() string { return "lease-keys" }

// Run re-reads the shared keys every l.every (creating or rotating them as
// due) until ctx ends.
func (l *leaseKeys) Run(ctx context.Context) error {
	if l.source == nil {
		<-ctx.Done()
		return nil
	}
	return engine.Every(ctx, l.every, func() {
		err := l.load(ctx)
		switch {
		case err == nil:
			l.outage.Succeeded()
		case ctx.Err() == nil && !l.outage.Failed("lease-keys", err):
			l.log.Warn().Err(err).Msg("re-read the cluster lease keys; the ones read before stay in use")
		}
	})
}

// macState is a keyed MAC with the scratch space one sum needs, pooled
// together: a sum then allocates nothing (it runs for every task handed
// over and every result verified).
type macState struct {
	mac hash.Hash
	msg []byte
	sum [sha256.Size]byte
}

// leaseSum is the MAC of a secret: each part length-prefixed, so no two
// (holder, task, nonce) triples hash the same bytes. It appends the MAC to
// dst.
func leaseSum(dst []byte, key *macKey, holder, taskID string, nonce []byte) []byte {
	st := key.macs.Get().(*macState)
	defer key.macs.Put(st)
	msg := binary.BigEndian.AppendUint64(st.msg[:0], uint64(len(holder)))
	msg = append(msg, holder...)
	msg = binary.BigEndian.AppendUint64(msg, uint64(len(taskID)))
	msg = append(msg, taskID...)
	msg = binary.BigEndian.AppendUint64(msg, uint64(len(nonce)))
	msg = append(msg, nonce...)
	st.msg = msg
	st.mac.Reset()
	st.mac.Write(msg)
	return append(dst, st.mac.Sum(st.sum[:0])[:leaseMAC]...)
}

// issue is a fresh secret for handing taskID to holder.
func (l *leaseKeys) issue(holder, taskID string) string {
	var raw [leaseNonce + leaseMAC]byte
	_, _ = crand.Read(raw[:leaseNonce])
	b := leaseSum(raw[:leaseNonce], l.keys()[0], holder, taskID, raw[:leaseNonce])
	var text [leaseSecretLen]byte
	return string(base64.RawURLEncoding.AppendEncode(text[:0], b)) // one allocation, the string
}

// verify reports whether secret was issued for taskID to holder by any
// member; one that no key verifies re-reads the shared keys once (a
// rotation another member made) before it is refused.
// It allocates nothing: the secret is decoded in stack buffers.
func (l *leaseKeys) verify(holder, taskID, secret string) bool {
	if len(secret) != leaseSecretLen {
		return false
	}
	var text [leaseSecretLen]byte
	var raw [leaseNonce + leaseMAC]byte
	copy(text[:], secret)
	if n, err := base64.RawURLEncoding.Decode(raw[:], text[:]); err != nil || n != len(raw) {
		return false
	}
	b := raw[:]
	return l.verifyWith(holder, taskID, b) || (l.reload() && l.verifyWith(holder, taskID, b))
}

func (l *leaseKeys) verifyWith(holder, taskID string, b []byte) bool {
	var sum [leaseMAC]byte
	for _, k := range l.keys() {
		if hmac.Equal(b[leaseNonce:], leaseSum(sum[:0], k, holder, taskID, b[:leaseNonce])) {
			return true
		}
	}
	return false
}

// holderOf is the lease holder of a session opened by p as workerID.
func holderOf(p auth.Principal, workerID string) string { return p.Key() + "\x00" + workerID }

// leased returns task carrying a fresh secret for s (a copy when task
// already carries one: the earlier hand-over's message may still be queued).
func (l *leaseKeys) leased(task *workerv1.StageTask, s *session) *workerv1.StageTask {
	if task.GetLeaseSecret() != "" {
		task = proto.CloneOf(task)
	}
	task.LeaseSecret = l.issue(s.holder, task.GetTaskId())
	return task
}
