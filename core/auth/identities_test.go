package auth

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

func certWith(cn, uri string, ous ...string) *x509.Certificate {
	c := &x509.Certificate{Subject: pkix.Name{CommonName: cn, OrganizationalUnit: ous}}
	if uri != "" {
		u, _ := url.Parse(uri)
		c.URIs = []*url.URL{u}
	}
	return c
}

func TestIdentityList_ExactAndPathPrefixes(t *testing.T) {
	l, err := ParseIdentityList("X", " spiffe://td/ns/a/sa/w , CN=dash,spiffe://td/ns/b/* ")
	require.NoError(t, err)
	require.True(t, l.Set())
	for id, want := range map[string]bool{
		"spiffe://td/ns/a/sa/w": true, "spiffe://td/ns/a/sa/w2": false, "CN=dash": true, "CN=dashboard": false,
		"spiffe://td/ns/b/sa/x": true, "spiffe://td/ns/b/": false, "spiffe://td/ns/bb/sa/x": false,
	} {
		require.Equal(t, want, l.Match(id), id)
	}
	empty, err := ParseIdentityList("X", " , ")
	require.NoError(t, err)
	require.False(t, empty.Set())
}

func TestIdentityList_RefusesWhatItCannotMatchSafely(t *testing.T) {
	for in, want := range map[string]string{
		"dashboard":          `X: identity "dashboard": want a URI SAN`,
		"spiffe://td/*/sa/w": "a wildcard is allowed only as a trailing /* of a URI",
		"spiffe://td/ns/a*":  "a wildcard is allowed only as a trailing /* of a URI",
		"CN=*":               "a wildcard is allowed only as a trailing /* of a URI",
	} {
		_, err := ParseIdentityList("X", in)
		require.ErrorContains(t, err, want, in)
	}
	_, err := ParseAPIIdentities("root:CN=x")
	require.ErrorContains(t, err, "API_CLIENT_IDENTITIES: entry \"root:CN=x\": want ROLE:IDENTITY with ROLE admin or viewer")
	_, err = ParseAPIIdentities("spiffe://td/x")
	require.ErrorContains(t, err, "ROLE admin or viewer", "an identity without a role is refused, not read as role spiffe")
}

func TestCertPolicy_ListsReplaceTheOUPerAudience(t *testing.T) {
	byOU := CertPolicy{}
	p, err := byOU.Principal(certWith("w1", "", WorkerOU))
	require.NoError(t, err)
	require.Equal(t, AudienceWorker, p.Audience)
	_, err = byOU.Principal(certWith("dash", ""))
	require.ErrorContains(t, err, "certificate CN=dash is no worker-plane identity (no OU converge-worker, no OU converge-broker)")

	w, _ := ParseIdentityList("WORKER_CLIENT_IDENTITIES", "spiffe://td/sa/worker")
	listed := CertPolicy{Workers: w}
	p, err = listed.Principal(certWith("svid", "spiffe://td/sa/worker"))
	require.NoError(t, err)
	require.Equal(t, Principal{Name: "spiffe://td/sa/worker", Audience: AudienceWorker, Via: "certificate"}, p)
	_, err = listed.Principal(certWith("old", "", WorkerOU))
	require.ErrorContains(t, err, "not in WORKER_CLIENT_IDENTITIES", "with a list the OU no longer admits a worker")
	p, err = listed.Principal(certWith("b", "", BrokerOU))
	require.NoError(t, err, "the mesh, without a list, still admits by OU")
	require.Equal(t, AudienceBroker, p.Audience)

	m, _ := ParseIdentityList("MESH_CLIENT_IDENTITIES", "spiffe://td/sa/*")
	_, err = CertPolicy{Workers: w, Mesh: m}.Principal(certWith("svid", "spiffe://td/sa/worker"))
	require.ErrorContains(t, err, "admitted as both a worker and a peer broker")
}

func TestAPIIdentities_RoleFromTheCertificateOnly(t *testing.T) {
	a, err := ParseAPIIdentities("viewer:CN=dash,admin:spiffe://td/ops/*,viewer:spiffe://td/ops/ro")
	require.NoError(t, err)
	id, ok := a.Lookup(certWith("dash", ""))
	require.True(t, ok)
	require.Equal(t, Identity{Role: RoleViewer, Name: "CN=dash"}, id)
	id, ok = a.Lookup(certWith("x", "spiffe://td/ops/ro"))
	require.True(t, ok)
	require.Equal(t, RoleAdmin, id.Role, "an identity listed under both roles is an admin")
	_, ok = a.Lookup(certWith("dash", "spiffe://td/other"))
	require.False(t, ok, "a URI SAN is the identity: the CN no longer counts")
}
