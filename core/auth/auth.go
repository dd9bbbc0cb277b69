// Package auth is the API's optional bearer-token authentication: a token
// file maps tokens to a role (admin or viewer), the HTTP handler and the
// websocket connection_init check a request's token, and the request's
// Identity travels in its context to the resolvers (viewers may not mutate;
// the identity's name is the actor recorded on resource events).
//
// The token file (API_TOKENS_FILE) has one token per line:
//
//	# <token> <role> [<name>]
//	3f9c…e1 admin alice
//	77aa…09 viewer dashboard
//
// Blank lines and lines starting with # are ignored. Tokens are compared by
// their SHA-256 digest. A token may not also be a worker-plane token
// (WORKER_TOKENS_FILE, MESH_TOKENS_FILE): one credential, one audience. Without a token file the API is open: every request
// is an anonymous admin. The file is re-read every TLS_RELOAD_INTERVAL, like
// the worker plane's: compared by content, swapped only on a change, the
// last good set kept while a file is unreadable or does not parse.
package auth

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/engine"
)

// Role is what a token may do.
type Role string

// The roles.
const (
	// RoleAdmin may query, subscribe and mutate.
	RoleAdmin Role = "admin"
	// RoleViewer may query and subscribe, not mutate.
	RoleViewer Role = "viewer"
)

// Identity is who a request runs as.
type Identity struct {
	Role Role
	// Name is the token's name ("" for an open API or an unnamed token).
	Name string
	// token is the digest of the bearer token it came from (zero: none),
	// for Tokens.Current.
	token [sha256.Size]byte
}

// Actor is the name recorded on the events a request causes.
func (id Identity) Actor() string {
	if id.Name != "" {
		return id.Name
	}
	return "api"
}

// CanMutate reports whether the identity may run mutations.
func (id Identity) CanMutate() bool { return id.Role == RoleAdmin }

type identityKey struct{}

// WithIdentity returns ctx carrying id.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// FromContext returns the request's identity; a context without one (an
// open API) is an anonymous admin.
func FromContext(ctx context.Context) Identity {
	if id, ok := ctx.Value(identityKey{}).(Identity); ok {
		return id
	}
	return Identity{Role: RoleAdmin}
}

// Tokens maps token digests to identities and, loaded from a file, keeps
// them fresh (Run). A nil *Tokens is an open API.
type Tokens struct {
	path     string
	others   []TokenFile
	interval time.Duration
	log      zerolog.Logger
	cur      atomic.Pointer[tokenSet]
	mu       sync.Mutex
	// changed is closed, and replaced, when the tokens change.
	changed atomic.Pointer[chan struct{}]
}

// tokenSet is one parsed generation of the file.
type tokenSet struct {
	byDigest map[[sha256.Size]byte]Identity
	raw      []byte
}

func newTokens(s *tokenSet) *Tokens {
	t := &Tokens{}
	t.cur.Store(s)
	ch := make(chan struct{})
	t.changed.Store(&ch)
	return t
}

// Len is the number of tokens.
func (t *Tokens) Len() int {
	if t == nil {
		return 0
	}
	return len(t.cur.Load().byDigest)
}

// Lookup returns the identity of token; false for an unknown token.
func (t *Tokens) Lookup(token string) (Identity, bool) {
	if t == nil || token == "" {
		return Identity{}, false
	}
	id, ok := t.cur.Load().byDigest[sha256.Sum256([]byte(token))]
	return id, ok
}

// Current is what the credential id came with allows now: for a token, its
// entry as last read (false once it was removed); an identity without a
// token (a certificate's, an open API's) is as it was. A request or a live
// websocket connection uses it to stop at once when its token is revoked.
func (t *Tokens) Current(id Identity) (Identity, bool) {
	if t == nil || id.token == [sha256.Size]byte{} {
		return id, true
	}
	cur, ok := t.cur.Load().byDigest[id.token]
	return cur, ok
}

// Changed is closed the next time the tokens change; nil, never closed, for
// a nil Tokens.
func (t *Tokens) Changed() <-chan struct{} {
	if t == nil {
		return nil
	}
	return *t.changed.Load()
}

// LoadTokens reads a token file, re-read every interval once Run is
// started; an empty path returns nil (an open API). A token that is also in
// one of others (the worker plane's files) is refused.
func LoadTokens(path string, interval time.Duration, log zerolog.Logger, others ...TokenFile) (*Tokens, error) {
	if path == "" {
		return nil, nil
	}
	s, err := loadTokenSet(path, others)
	if err != nil {
		return nil, err
	}
	if interval <= 0 {
		interval = 3 * time.Minute
	}
	t := newTokens(s)
	t.path, t.others, t.interval, t.log = path, others, interval, log.With().Str("component", "api-tokens").Logger()
	return t, nil
}

func loadTokenSet(path string, others []TokenFile) (*tokenSet, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read API_TOKENS_FILE: %w", err)
	}
	s, err := parseTokenSet(b)
	if err == nil {
		err = checkDisjoint(b, others)
	}
	if err != nil {
		return nil, fmt.Errorf("API_TOKENS_FILE %s: %w", path, err)
	}
	return s, nil
}

// Reload re-reads the file now; it swaps only on a content change and keeps
// the last good set when the file cannot be read or does not parse.
func (t *Tokens) Reload() error {
	if t == nil || t.path == "" {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s, err := loadTokenSet(t.path, t.others)
	if err != nil {
		return err
	}
	if bytes.Equal(t.cur.Load().raw, s.raw) {
		return nil
	}
	t.cur.Store(s)
	next := make(chan struct{})
	close(*t.changed.Swap(&next))
	t.log.Info().Int("tokens", len(s.byDigest)).Msg("API tokens rotated")
	return nil
}

// Name implements engine.Duty.
func (t *Tokens) Name() string { return "api-tokens" }

// Run re-reads the file every interval until ctx ends.
func (t *Tokens) Run(ctx context.Context) error {
	return engine.Every(ctx, t.interval, func() {
		if err := t.Reload(); err != nil {
			t.log.Warn().Err(err).Msg("API_TOKENS_FILE not loaded (unreadable mid-rotation, or refused); keeping the last good set")
		}
	})
}

// ParseTokens parses the token file format (see the package doc).
func ParseTokens(b []byte) (*Tokens, error) {
	s, err := parseTokenSet(b)
	if err != nil {
		return nil, err
	}
	return newTokens(s), nil
}

func parseTokenSet(b []byte) (*tokenSet, error) {
	t := &tokenSet{byDigest: map[[sha256.Size]byte]Identity{}, raw: b}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 || len(f) > 3 {
			return nil, fmt.Errorf("line %d: want <token> <role> [<name>]", n)
		}
		role := Role(strings.ToLower(f[1]))
		if role != RoleAdmin && role != RoleViewer {
			return nil, fmt.Errorf("line %d: role %q is not admin or viewer", n, f[1])
		}
		if len(f[0]) < 16 {
			return nil, fmt.Errorf("line %d: a token must be at least 16 characters", n)
		}
		d := sha256.Sum256([]byte(f[0]))
		id := Identity{Role: role, token: d}
		if len(f) == 3 {
			id.Name = f[2]
		}
		if _, dup := t.byDigest[d]; dup {
			return nil, fmt.Errorf("line %d: duplicate token", n)
		}
		t.byDigest[d] = id
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scan: %w", err)
	}
	if len(t.byDigest) == 0 {
		return nil, fmt.Errorf("no tokens (remove API_TOKENS_FILE to run the API open)")
	}
	return t, nil
}

// Bearer extracts the token of an "Authorization: Bearer <token>" value
// (the scheme is case-insensitive); "" when there is none.
func Bearer(header string) string {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}
