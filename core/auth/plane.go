package auth

// The worker plane's credentials: who may open a worker session, read a
// kind's providerconfig, or relay a stage as a peer broker. They are
// separate from the API's tokens (a dashboard token never runs tasks, a
// worker token never reads the API) and come in two forms:
//
//   - bearer tokens, for plain (h2c) listeners or on top of TLS:
//     WORKER_TOKENS_FILE holds the workers' tokens, one per line
//
//     # <token> <name> [<kind>,<kind>...]
//     9d1e…44 ingest-worker
//     2b7c…0f sink-worker statussink,logsink
//
//     (with a kind list the token may only serve those kinds), and
//     MESH_TOKENS_FILE the peer brokers' tokens
//
//     # <token> <name>
//     5a0c…d2 mesh-2026-11
//
//     Every broker accepts any mesh token in its file and presents the FIRST
//     one when it relays to a peer, so a rotation is: add the new token
//     everywhere, move it to the top everywhere, remove the old one (after
//     the longest task: the lease secrets issued under a mesh token stop
//     verifying once it is removed, docs/security.md).
//
//   - client certificates, with mutual TLS (TLS_CLIENT_CA_FILE): the
//     certificate was verified against the client CA during the handshake;
//     its Organizational Unit says what it is (converge-worker or
//     converge-broker), or the audiences' allow-lists do (CertPolicy,
//     identities.go), and its first URI SAN (else its Common Name) is the
//     identity's name.
//
// A token authenticates one audience: one listed in both files, or also in
// API_TOKENS_FILE, is refused at load and at every reload.
//
// Both files are re-read every TLS_RELOAD_INTERVAL like the TLS material:
// compared by content, swapped only on a change, the last good set kept when
// a file is mid-rotation (unreadable or unparsable). A swap closes Changed,
// and a live session checks its token again with Current: the broker ends
// the sessions of a revoked token.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/converge-run/converge/core/engine"

	"github.com/rs/zerolog"
)

// Audience is what a worker-plane identity is.
type Audience string

// The audiences.
const (
	// AudienceWorker may open worker sessions and read providerconfigs.
	AudienceWorker Audience = "worker"
	// AudienceBroker is a peer broker: it may relay stages.
	AudienceBroker Audience = "broker"
	// AudienceOpen is every caller of an unauthenticated worker plane.
	AudienceOpen Audience = "open"
)

// Certificate OUs that mark a client certificate's audience.
const (
	WorkerOU = "converge-worker"
	BrokerOU = "converge-broker"
)

// Principal is an authenticated worker-plane caller.
type Principal struct {
	Name     string
	Audience Audience
	// Kinds the identity may serve; nil is every kind.
	Kinds map[string]bool
	// Via is how it authenticated: token, certificate or open.
	Via string
	// digest is the token's SHA-256 (Via token), for Plane.Current.
	digest [sha256.Size]byte
}

// Is reports whether p may act as a.
func (p Principal) Is(a Audience) bool { return p.Audience == a || p.Audience == AudienceOpen }

// Serves reports whether p may serve kind.
func (p Principal) Serves(kind string) bool { return p.Kinds == nil || p.Kinds[kind] }

// Key identifies p for binding lease secrets to it.
func (p Principal) Key() string { return string(p.Audience) + "/" + p.Via + "/" + p.Name }

// planeSet is one parsed generation of the files.
type planeSet struct {
	byDigest   map[[sha256.Size]byte]Principal
	meshToken  string
	meshTokens []string
	workerRaw  []byte
	meshRaw    []byte
}

// Plane holds the worker plane's bearer credentials and refreshes them.
type Plane struct {
	workerFile, meshFile string
	others               []TokenFile
	interval             time.Duration
	log                  zerolog.Logger
	cur                  atomic.Pointer[planeSet]
	mu                   sync.Mutex
	swaps                atomic.Int64
	// changed is closed, and replaced, when the credentials change.
	changed atomic.Pointer[chan struct{}]
}

// NewPlane loads the files once, failing fast when one is unusable; either
// may be empty. A token in both, or also in one of others (the API's token
// file), is refused.
func NewPlane(workerFile, meshFile string, interval time.Duration, log zerolog.Logger, others ...TokenFile) (*Plane, error) {
	if interval <= 0 {
		interval = 3 * time.Minute
	}
	p := &Plane{workerFile: workerFile, meshFile: meshFile, others: others, interval: interval,
		log: log.With().Str("component", "plane-credentials").Logger()}
	ch := make(chan struct{})
	p.changed.Store(&ch)
	s, err := p.load()
	if err != nil {
		return nil, err
	}
	p.cur.Store(s)
	return p, nil
}

func (p *Plane) load() (*planeSet, error) {
	s := &planeSet{byDigest: map[[sha256.Size]byte]Principal{}}
	var err error
	if p.workerFile != "" {
		if s.workerRaw, err = os.ReadFile(p.workerFile); err != nil {
			return nil, fmt.Errorf("read WORKER_TOKENS_FILE: %w", err)
		}
		if err = parsePlane(s, s.workerRaw, AudienceWorker); err == nil {
			err = checkDisjoint(s.workerRaw, p.others)
		}
		if err != nil {
			return nil, fmt.Errorf("WORKER_TOKENS_FILE %s: %w", p.workerFile, err)
		}
	}
	if p.meshFile != "" {
		if s.meshRaw, err = os.ReadFile(p.meshFile); err != nil {
			return nil, fmt.Errorf("read MESH_TOKENS_FILE: %w", err)
		}
		if p.workerFile != "" { // a worker's token is no peer broker's
			err = checkShared(s.meshRaw, TokenFile{Setting: "WORKER_TOKENS_FILE", Path: p.workerFile}, s.workerRaw)
		}
		if err == nil {
			err = parsePlane(s, s.meshRaw, AudienceBroker)
		}
		if err == nil {
			err = checkDisjoint(s.meshRaw, p.others)
		}
		if err != nil {
			return nil, fmt.Errorf("MESH_TOKENS_FILE %s: %w", p.meshFile, err)
		}
	}
	return s, nil
}

// ParseWorkerTokens parses WORKER_TOKENS_FILE content (for tests and tools).
func ParseWorkerTokens(b []byte) (map[string]Principal, error) {
	s := &planeSet{byDigest: map[[sha256.Size]byte]Principal{}}
	if err := parsePlane(s, b, AudienceWorker); err != nil {
		return nil, err
	}
	out := map[string]Principal{}
	for _, pr := range s.byDigest {
		out[pr.Name] = pr
	}
	return out, nil
}

func parsePlane(s *planeSet, b []byte, a Audience) error {
	sc := bufio.NewScanner(bytes.NewReader(b))
	added := 0
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		maxFields := 2
		if a == AudienceWorker {
			maxFields = 3
		}
		if len(f) < 2 || len(f) > maxFields {
			if a == AudienceWorker {
				return fmt.Errorf("line %d: want <token> <name> [<kind>,<kind>...]", n)
			}
			return fmt.Errorf("line %d: want <token> <name>", n)
		}
		if len(f[0]) < 16 {
			return fmt.Errorf("line %d: a token must be at least 16 characters", n)
		}
		d := sha256.Sum256([]byte(f[0]))
		pr := Principal{Name: f[1], Audience: a, Via: "token", digest: d}
		if len(f) == 3 {
			pr.Kinds = map[string]bool{}
			for _, k := range strings.Split(f[2], ",") {
				if k = strings.TrimSpace(k); k != "" {
					pr.Kinds[k] = true
				}
			}
		}
		if _, dup := s.byDigest[d]; dup {
			return fmt.Errorf("line %d: duplicate token (a token may appear once across both files)", n)
		}
		s.byDigest[d] = pr
		if a == AudienceBroker {
			if s.meshToken == "" {
				s.meshToken = f[0]
			}
			s.meshTokens = append(s.meshTokens, f[0])
		}
		added++
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("scan: %w", err)
	}
	if added == 0 {
		return errors.New("no tokens")
	}
	return nil
}

// Lookup is the identity of a bearer token; false for an unknown one.
func (p *Plane) Lookup(token string) (Principal, bool) {
	if p == nil || token == "" {
		return Principal{}, false
	}
	pr, ok := p.cur.Load().byDigest[sha256.Sum256([]byte(token))]
	return pr, ok
}

// Current is what the credential p authenticated with allows now: for a
// token, its entry in the files as last read (false once it is removed);
// any other credential is as it was (a certificate is checked again by the
// listener on every request). A live session uses it to end when its token
// is revoked.
func (p *Plane) Current(pr Principal) (Principal, bool) {
	if p == nil || pr.Via != "token" {
		return pr, true
	}
	cur, ok := p.cur.Load().byDigest[pr.digest]
	return cur, ok
}

// Changed is closed the next time the credentials change (a Reload that
// swapped them); nil, never closed, for a nil Plane.
func (p *Plane) Changed() <-chan struct{} {
	if p == nil {
		return nil
	}
	return *p.changed.Load()
}

// MeshToken is the token this broker presents to its peers ("" without a
// MESH_TOKENS_FILE).
func (p *Plane) MeshToken() string {
	if p == nil {
		return ""
	}
	return p.cur.Load().meshToken
}

// MeshTokens are every mesh token, the presented one first.
func (p *Plane) MeshTokens() []string {
	if p == nil {
		return nil
	}
	return p.cur.Load().meshTokens
}

// Swaps counts credential changes picked up since NewPlane (0 for nil).
func (p *Plane) Swaps() int64 {
	if p == nil {
		return 0
	}
	return p.swaps.Load()
}

// Reload re-reads the files now; it swaps only on a content change and
// keeps the last good set when the new files do not parse.
func (p *Plane) Reload() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, err := p.load()
	if err != nil {
		return err
	}
	old := p.cur.Load()
	if bytes.Equal(old.workerRaw, s.workerRaw) && bytes.Equal(old.meshRaw, s.meshRaw) {
		return nil
	}
	p.cur.Store(s)
	p.swaps.Add(1)
	next := make(chan struct{})
	close(*p.changed.Swap(&next))
	p.log.Info().Int("tokens", len(s.byDigest)).Msg("worker-plane credentials rotated")
	return nil
}

// Name implements engine.Duty.
func (p *Plane) Name() string { return "plane-credentials" }

// Run refreshes every interval until ctx ends.
func (p *Plane) Run(ctx context.Context) error {
	return engine.Every(ctx, p.interval, func() {
		if err := p.Reload(); err != nil {
			p.log.Warn().Err(err).Msg("worker-plane token files not loaded (unreadable mid-rotation, or refused); keeping the last good set")
		}
	})
}
