package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParse_ClientIdentitiesNeedMutualTLSAndCountAsAPIAuth(t *testing.T) {
	base := map[string]string{"DATABASE_URL": "postgres://db/converge", "LISTEN_ADDR": "https://0.0.0.0:8443",
		"TLS_CERT_FILE": "c.pem", "TLS_KEY_FILE": "k.pem", "WORKER_AUTH": "none"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}

	_, err := Parse(env(with("API_CLIENT_IDENTITIES", "admin:spiffe://td/ops")), "v1")
	require.ErrorContains(t, err, "API_CLIENT_IDENTITIES is set but TLS_CLIENT_CA_FILE is not")

	_, err = Parse(env(with("TLS_CLIENT_CA_FILE", "ca.pem", "WORKER_AUTH", "", "WORKER_CLIENT_IDENTITIES", "worker-1")), "v1")
	require.ErrorContains(t, err, `WORKER_CLIENT_IDENTITIES: identity "worker-1": want a URI SAN`)

	c, err := Parse(env(with("TLS_CLIENT_CA_FILE", "ca.pem", "WORKER_AUTH", "",
		"API_CLIENT_IDENTITIES", "admin:spiffe://td/ops, viewer:CN=dash",
		"MESH_CLIENT_IDENTITIES", "spiffe://td/ns/converge/*")), "v1")
	require.NoError(t, err, "certificate identities authenticate an API reachable beyond this host")
	require.True(t, c.APIAuthenticated())
	require.True(t, c.APIIdentities().Set())
	require.True(t, c.CertPolicy().Mesh.Match("spiffe://td/ns/converge/sa/broker"))
	require.False(t, c.CertPolicy().Workers.Set())
	require.Equal(t, true, c.Redacted()["API_AUTH"])
}
