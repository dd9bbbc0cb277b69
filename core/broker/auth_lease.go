package broker

import (
	"crypto/hmac"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/converge-run/converge/core/auth"
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
// the stage stopped waiting is verified too. Its key is derived from the
// mesh tokens when there are any (a peer broker can verify a redelivery of
// a stage this broker handed out) and is otherwise random per process (a
// redelivery to another broker is then refused and the task re-runs).

const (
	leaseNonce = 16
	leaseMAC   = 16
)

// leaseKeys issues and verifies lease secrets.
type leaseKeys struct {
	own   []byte
	creds *auth.Plane // nil: no mesh tokens

	mu      sync.Mutex
	derived [][]byte // the keys of the credentials' generation seen
	gen     int64    // creds.Swaps() when derived was computed
}

func newLeaseKeys(creds *auth.Plane) *leaseKeys {
	k := make([]byte, 32)
	_, _ = crand.Read(k) // crypto/rand.Read never fails (Go 1.24+)
	return &leaseKeys{own: k, creds: creds}
}

// keys are the MAC keys to verify with; the first one issues. They are
// derived again only when the credentials rotated.
func (l *leaseKeys) keys() [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.derived != nil && l.gen == l.creds.Swaps() {
		return l.derived
	}
	l.gen = l.creds.Swaps()
	var out [][]byte
	for _, t := range l.creds.MeshTokens() {
		m := hmac.New(sha256.New, []byte(t))
		m.Write([]byte("converge lease secret v1"))
		out = append(out, m.Sum(nil))
	}
	out = append(out, l.own)
	l.derived = out
	return l.derived
}

func leaseSum(key []byte, holder, taskID string, nonce []byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, part := range [][]byte{[]byte(holder), []byte(taskID), nonce} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		m.Write(n[:])
		m.Write(part)
	}
	return m.Sum(nil)[:leaseMAC]
}

// issue is a fresh secret for handing taskID to holder.
func (l *leaseKeys) issue(holder, taskID string) string {
	b := make([]byte, leaseNonce, leaseNonce+leaseMAC)
	_, _ = crand.Read(b)
	b = append(b, leaseSum(l.keys()[0], holder, taskID, b)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// verify reports whether secret was issued for taskID to holder.
func (l *leaseKeys) verify(holder, taskID, secret string) bool {
	b, err := base64.RawURLEncoding.DecodeString(secret)
	if err != nil || len(b) != leaseNonce+leaseMAC {
		return false
	}
	for _, k := range l.keys() {
		if hmac.Equal(b[leaseNonce:], leaseSum(k, holder, taskID, b[:leaseNonce])) {
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
