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
// their SHA-256 digest. Without a token file the API is open: every request
// is an anonymous admin.
package auth

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"strings"
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

// Tokens maps token digests to identities. A nil *Tokens is an open API.
type Tokens struct {
	byDigest map[[sha256.Size]byte]Identity
}

// Len is the number of tokens.
func (t *Tokens) Len() int {
	if t == nil {
		return 0
	}
	return len(t.byDigest)
}

// Lookup returns the identity of token; false for an unknown token.
func (t *Tokens) Lookup(token string) (Identity, bool) {
	if t == nil || token == "" {
		return Identity{}, false
	}
	id, ok := t.byDigest[sha256.Sum256([]byte(token))]
	return id, ok
}

// LoadTokens reads a token file; an empty path returns nil (an open API).
func LoadTokens(path string) (*Tokens, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read API tokens file: %w", err)
	}
	t, err := ParseTokens(b)
	if err != nil {
		return nil, fmt.Errorf("API tokens file %s: %w", path, err)
	}
	return t, nil
}

// ParseTokens parses the token file format (see the package doc).
func ParseTokens(b []byte) (*Tokens, error) {
	t := &Tokens{byDigest: map[[sha256.Size]byte]Identity{}}
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
		id := Identity{Role: role}
		if len(f) == 3 {
			id.Name = f[2]
		}
		d := sha256.Sum256([]byte(f[0]))
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
