package auth

// Identity per audience, with mutual TLS. A verified client certificate
// presents one identity — its first URI SAN (a SPIFFE ID such as
// spiffe://prod.example/ns/converge/sa/worker), else "CN=" and its Common
// Name — and each audience may carry its own allow-list of identities:
//
//	API_CLIENT_IDENTITIES     ROLE:IDENTITY entries: who may call the GraphQL API, as admin or viewer
//	WORKER_CLIENT_IDENTITIES  who may open worker sessions and read providerconfigs
//	MESH_CLIENT_IDENTITIES    which peer brokers may relay stages
//
// Entries are comma-separated; an identity ending in "/*" admits every
// identity below that path (spiffe://prod.example/ns/converge/sa/*). A
// worker-plane audience without a list admits by the certificate's OU as
// before (converge-worker, converge-broker); one with a list admits only the
// identities listed, whatever their OU. A certificate both plane lists admit
// is refused as ambiguous. The API admits no certificate without
// API_CLIENT_IDENTITIES: a worker's or a broker's certificate, verified by
// the same client CA, never calls the API, and a listed API identity is
// no worker-plane credential. The identity is always read from the verified
// certificate, never from anything the client sends.

import (
	"crypto/x509"
	"fmt"
	"strings"
)

// CertIdentity is the identity a verified client certificate presents.
func CertIdentity(c *x509.Certificate) string {
	if len(c.URIs) > 0 {
		return c.URIs[0].String()
	}
	return "CN=" + c.Subject.CommonName
}

// IdentityList is an allow-list of certificate identities. The zero value
// lists nothing and is unset (Set is false).
type IdentityList struct {
	exact    map[string]bool
	prefixes []string
}

// ParseIdentityList reads a comma-separated allow-list; env names the
// variable in errors.
func ParseIdentityList(env, s string) (IdentityList, error) {
	var l IdentityList
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if err := l.add(e); err != nil {
			return IdentityList{}, fmt.Errorf("%s: %w", env, err)
		}
	}
	return l, nil
}

func (l *IdentityList) add(e string) error {
	if !strings.HasPrefix(e, "spiffe://") && !strings.HasPrefix(e, "CN=") && !strings.Contains(e, "://") {
		return fmt.Errorf("identity %q: want a URI SAN (spiffe://trust-domain/path) or CN=<common name>", e)
	}
	star := strings.Index(e, "*")
	switch {
	case star < 0:
		if l.exact == nil {
			l.exact = map[string]bool{}
		}
		l.exact[e] = true
	case star == len(e)-1 && strings.HasSuffix(e, "/*") && strings.Contains(e, "://"):
		l.prefixes = append(l.prefixes, strings.TrimSuffix(e, "*"))
	default:
		return fmt.Errorf("identity %q: a wildcard is allowed only as a trailing /* of a URI", e)
	}
	return nil
}

// Set reports whether the list was configured (non-empty).
func (l IdentityList) Set() bool { return len(l.exact) > 0 || len(l.prefixes) > 0 }

// Match reports whether id is listed.
func (l IdentityList) Match(id string) bool {
	if l.exact[id] {
		return true
	}
	for _, p := range l.prefixes {
		if strings.HasPrefix(id, p) && len(id) > len(p) {
			return true
		}
	}
	return false
}

// CertPolicy decides the worker-plane audience of a verified certificate.
type CertPolicy struct {
	Workers IdentityList // WORKER_CLIENT_IDENTITIES
	Mesh    IdentityList // MESH_CLIENT_IDENTITIES
}

// Principal is the worker-plane identity c carries, or why it carries none.
func (p CertPolicy) Principal(c *x509.Certificate) (Principal, error) {
	id := CertIdentity(c)
	ous := map[string]bool{}
	for _, ou := range c.Subject.OrganizationalUnit {
		ous[ou] = true
	}
	worker := ous[WorkerOU]
	if p.Workers.Set() {
		worker = p.Workers.Match(id)
	}
	broker := ous[BrokerOU]
	if p.Mesh.Set() {
		broker = p.Mesh.Match(id)
	}
	name := c.Subject.CommonName
	if len(c.URIs) > 0 {
		name = c.URIs[0].String()
	}
	switch {
	case worker && broker:
		return Principal{}, fmt.Errorf("certificate %s is admitted as both a worker and a peer broker: list it for one audience only", id)
	case worker:
		return Principal{Name: name, Audience: AudienceWorker, Via: "certificate"}, nil
	case broker:
		return Principal{Name: name, Audience: AudienceBroker, Via: "certificate"}, nil
	}
	return Principal{}, fmt.Errorf("certificate %s is no worker-plane identity (%s)", id, p.rule())
}

func (p CertPolicy) rule() string {
	var parts []string
	if p.Workers.Set() {
		parts = append(parts, "not in WORKER_CLIENT_IDENTITIES")
	} else {
		parts = append(parts, "no OU "+WorkerOU)
	}
	if p.Mesh.Set() {
		parts = append(parts, "not in MESH_CLIENT_IDENTITIES")
	} else {
		parts = append(parts, "no OU "+BrokerOU)
	}
	return strings.Join(parts, ", ")
}

// APIIdentities maps allowed certificate identities to API roles.
type APIIdentities struct {
	roles []roleList
}

type roleList struct {
	role Role
	list IdentityList
}

// ParseAPIIdentities reads API_CLIENT_IDENTITIES: comma-separated
// ROLE:IDENTITY entries (admin:spiffe://…, viewer:CN=dashboard).
func ParseAPIIdentities(s string) (APIIdentities, error) {
	byRole := map[Role]*IdentityList{}
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		role, id, ok := strings.Cut(e, ":")
		if !ok || (Role(role) != RoleAdmin && Role(role) != RoleViewer) {
			return APIIdentities{}, fmt.Errorf("API_CLIENT_IDENTITIES: entry %q: want ROLE:IDENTITY with ROLE admin or viewer", e)
		}
		l := byRole[Role(role)]
		if l == nil {
			l = &IdentityList{}
			byRole[Role(role)] = l
		}
		if err := l.add(id); err != nil {
			return APIIdentities{}, fmt.Errorf("API_CLIENT_IDENTITIES: %w", err)
		}
	}
	var a APIIdentities
	// admin first: an identity listed under both roles is an admin.
	for _, r := range []Role{RoleAdmin, RoleViewer} {
		if l := byRole[r]; l != nil {
			a.roles = append(a.roles, roleList{role: r, list: *l})
		}
	}
	return a, nil
}

// Set reports whether any identity is allowed.
func (a APIIdentities) Set() bool { return len(a.roles) > 0 }

// Lookup is the API identity of a verified certificate, if it is listed.
func (a APIIdentities) Lookup(c *x509.Certificate) (Identity, bool) {
	id := CertIdentity(c)
	for _, rl := range a.roles {
		if rl.list.Match(id) {
			return Identity{Role: rl.role, Name: id}, true
		}
	}
	return Identity{}, false
}
