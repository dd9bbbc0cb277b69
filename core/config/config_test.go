package config

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParse(t *testing.T) {
	t.Parallel()
	base := map[string]string{"DATABASE_URL": "postgres://u:secret@db/converge", "API_AUTH": "none", "WORKER_AUTH": "none"}
	strict := map[string]string{"DATABASE_URL": "postgres://u:secret@db/converge"}
	withStrict := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range strict {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
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
	cases := map[string]struct {
		reason  string
		env     map[string]string
		wantErr string
		check   func(t *testing.T, c Config)
	}{
		"defaults": {reason: "only DATABASE_URL is required", env: base, check: func(t *testing.T, c Config) {
			require.Equal(t, RoleAll, c.Role)
			require.Equal(t, ":8080", c.ListenAddr)
			require.Equal(t, 45*time.Second, c.ShutdownDrain)
			require.Equal(t, 10*time.Second, c.HeartbeatEvery)
			require.Equal(t, 30*time.Second, c.RedeliveryWait)
			require.Equal(t, 10*time.Second, c.WorkerSilence)
			require.Equal(t, 30*time.Minute, c.WorkerSessionMaxAge)
			require.Equal(t, 168*time.Hour, c.EventRetention)
			require.True(t, c.HasBroker())
			require.True(t, c.HasControl())
		}},
		"missing db":   {reason: "no DATABASE_URL fails fast", env: map[string]string{}, wantErr: "DATABASE_URL is required"},
		"bad role":     {reason: "unknown roles are rejected", env: with("ROLE", "worker"), wantErr: `ROLE="worker"`},
		"broker role":  {reason: "a broker has no control bundle", env: with("ROLE", "BROKER"), check: func(t *testing.T, c Config) { require.False(t, c.HasControl()) }},
		"bad duration": {reason: "durations are validated", env: with("SHUTDOWN_DRAIN", "soon"), wantErr: "SHUTDOWN_DRAIN"},
		"heartbeat spins": {reason: "a beat of 1ns would write the member's row in a loop",
			env: with("MEMBER_HEARTBEAT_EVERY", "1ns"), wantErr: `MEMBER_HEARTBEAT_EVERY="1ns": want at least 1s`},
		"heartbeat at the floor": {reason: "the floor itself is accepted", env: with("MEMBER_HEARTBEAT_EVERY", "1s"),
			check: func(t *testing.T, c Config) { require.Equal(t, time.Second, c.HeartbeatEvery) }},
		"tls reload spins": {reason: "a reload of 1ns would read the TLS and token files in a loop",
			env: with("TLS_RELOAD_INTERVAL", "1ns"), wantErr: `TLS_RELOAD_INTERVAL="1ns": want at least 1s`},
		"unclaimed swept at once": {reason: "a window of 1ns would delete every pending task the reaper sees",
			env: with("SWEEPER_UNCLAIMED_DELETE_AFTER", "1ns"), wantErr: `SWEEPER_UNCLAIMED_DELETE_AFTER="1ns": want at least 10m0s`},
		"unclaimed swept after an hour": {reason: "above the floor is accepted", env: with("SWEEPER_UNCLAIMED_DELETE_AFTER", "1h"),
			check: func(t *testing.T, c Config) { require.Equal(t, time.Hour, c.UnclaimedAfter) }},
		"silence of a millisecond": {reason: "workers would be asked for a keepalive every third of a millisecond",
			env: with("WORKER_SILENCE_TIMEOUT", "1ms"), wantErr: `WORKER_SILENCE_TIMEOUT="1ms": want at least 3s`},
		"sessions never age": {reason: "0 turns the session age off", env: with("WORKER_SESSION_MAX_AGE", "0s"), check: func(t *testing.T, c Config) {
			require.Zero(t, c.WorkerSessionMaxAge)
		}},
		"sessions age fast": {reason: "a session ended every few seconds would spend its life reconnecting",
			env: with("WORKER_SESSION_MAX_AGE", "30s"), wantErr: "WORKER_SESSION_MAX_AGE=30s: want 0 (never) or at least 1m0s"},
		"sessions age backwards": {reason: "a negative age is a typo", env: with("WORKER_SESSION_MAX_AGE", "-5m"),
			wantErr: `WORKER_SESSION_MAX_AGE="-5m": want 0 (never) or a duration like 30m`},
		"events kept forever": {reason: "0 turns event retention off", env: with("EVENT_RETENTION", "0"), check: func(t *testing.T, c Config) {
			require.Zero(t, c.EventRetention)
		}},
		"events kept a day": {reason: "a retention is a duration", env: with("EVENT_RETENTION", "24h"), check: func(t *testing.T, c Config) {
			require.Equal(t, 24*time.Hour, c.EventRetention)
		}},
		"events kept backwards": {reason: "a negative retention is a typo", env: with("EVENT_RETENTION", "-1h"),
			wantErr: `EVENT_RETENTION="-1h": want 0 (keep events forever) or a duration like 168h`},
		"events kept for a while": {reason: "a retention needs a unit", env: with("EVENT_RETENTION", "7"),
			wantErr: `EVENT_RETENTION="7": want 0 (keep events forever) or a duration like 168h`},
		"https no cert": {reason: "https:// needs the cert/key pair", env: with("LISTEN_ADDR", "https://:8443"), wantErr: "TLS_CERT_FILE and TLS_KEY_FILE"},
		"cert no https": {reason: "a cert with plain http is refused", env: with("TLS_CERT_FILE", "c.pem", "TLS_KEY_FILE", "k.pem"), wantErr: "not https://"},
		"ca no https":   {reason: "mTLS without https is refused", env: with("TLS_CLIENT_CA_FILE", "ca.pem"), wantErr: "TLS_CLIENT_CA_FILE"},
		"https ok": {reason: "https with a pair is accepted", env: with("LISTEN_ADDR", "https://0.0.0.0:8443", "TLS_CERT_FILE", "c", "TLS_KEY_FILE", "k"), check: func(t *testing.T, c Config) {
			require.True(t, c.Secure())
			require.Equal(t, "0.0.0.0:8443", c.ListenHostPort())
		}},
		"pprof public": {reason: "profiles are never served to the network", env: with("PPROF_ADDR", "0.0.0.0:6060"), wantErr: "loopback only"},
		"pprof loopback": {reason: "a loopback profiler is accepted", env: with("PPROF_ADDR", "127.0.0.1:6060"), check: func(t *testing.T, c Config) {
			require.Equal(t, "127.0.0.1:6060", c.PprofAddr)
		}},
		"open api off loopback": {reason: "an open API on every interface is refused", env: withStrict("WORKER_AUTH", "none"),
			wantErr: "API_AUTH=none"},
		"open worker plane off loopback": {reason: "an open worker plane on every interface is refused",
			env: withStrict("API_AUTH", "none"), wantErr: "WORKER_AUTH=none"},
		"open worker plane beside api tokens": {reason: "API tokens with an open worker plane would let results be forged",
			env: withStrict("LISTEN_ADDR", "127.0.0.1:8080", "API_TOKENS_FILE", "t"), wantErr: "WORKER_TOKENS_FILE"},
		"loopback open": {reason: "a loopback-only process may run open", env: withStrict("LISTEN_ADDR", "127.0.0.1:8080"),
			check: func(t *testing.T, c Config) { require.False(t, c.WorkerPlaneAuth()) }},
		"authenticated": {reason: "tokens for both planes satisfy the checks on any address",
			env: withStrict("API_TOKENS_FILE", "a", "WORKER_TOKENS_FILE", "w", "MESH_TOKENS_FILE", "m"),
			check: func(t *testing.T, c Config) {
				require.True(t, c.WorkerPlaneAuth())
				require.Equal(t, 16<<20, c.WorkerMaxMsg)
				require.Zero(t, c.WorkerCompress, "stream compression is off unless asked for")
				require.Equal(t, 1024, c.WorkerMaxInFlight)
			}},
		"compression floor": {reason: "a worker stream may be compressed past a floor", env: with("WORKER_COMPRESS_MIN_BYTES", "65536"),
			check: func(t *testing.T, c Config) { require.Equal(t, 65536, c.WorkerCompress) }},
		"bad compression floor": {reason: "the floor is a byte count", env: with("WORKER_COMPRESS_MIN_BYTES", "-1"),
			wantErr: "WORKER_COMPRESS_MIN_BYTES"},
		"contradiction":  {reason: "API_AUTH=none with a tokens file is ambiguous", env: with("API_TOKENS_FILE", "t"), wantErr: "contradicts"},
		"bad auth value": {reason: "API_AUTH has one value", env: with("API_AUTH", "off"), wantErr: `API_AUTH="off"`},
		"in-flight bound": {reason: "the broker bounds a worker's max_in_flight", env: with("WORKER_MAX_IN_FLIGHT", "4096"),
			check: func(t *testing.T, c Config) { require.Equal(t, 4096, c.WorkerMaxInFlight) }},
		"bad in-flight bound": {reason: "the bound is a positive count", env: with("WORKER_MAX_IN_FLIGHT", "0"),
			wantErr: `WORKER_MAX_IN_FLIGHT="0": want a positive number of tasks`},
		"bad max message": {reason: "message limits are validated", env: with("WORKER_MAX_MESSAGE_BYTES", "12"),
			wantErr: "WORKER_MAX_MESSAGE_BYTES"},
		"bad scheme": {reason: "only http/https schemes", env: with("LISTEN_ADDR", "ftp://x:1"), wantErr: "LISTEN_ADDR"},
		"listen without port": {reason: "a bare port is refused at boot, naming the variable, not when the listener binds after the migrations",
			env: with("LISTEN_ADDR", "8080"), wantErr: `LISTEN_ADDR="8080": want host:port, http://host:port or https://host:port`},
		"listen url without port": {reason: "the URL form needs a port too", env: with("LISTEN_ADDR", "http://0.0.0.0"),
			wantErr: `LISTEN_ADDR="http://0.0.0.0": want host:port, http://host:port or https://host:port`},
		"health without port": {reason: "a broker's probe listener is a host:port", env: with("ROLE", "broker", "HEALTH_ADDR", "8081"),
			wantErr: `HEALTH_ADDR="8081": want host:port`},
		"broker addr with scheme": {reason: "BROKER_ADDR is a host:port (TLS follows LISTEN_ADDR)", env: with("BROKER_ADDR", "http://0.0.0.0:9090"),
			wantErr: `BROKER_ADDR="http://0.0.0.0:9090": want host:port`},
		"broker url without scheme": {reason: "peers dial BROKER_URL as a URL: a bare host:port is refused at boot, not warned about by every peer",
			env: with("BROKER_URL", "10.0.0.5:8080"), wantErr: `BROKER_URL="10.0.0.5:8080": want http://host:port or https://host:port`},
		"broker url other scheme": {reason: "only http/https", env: with("BROKER_URL", "grpc://broker-1:8080"),
			wantErr: `BROKER_URL="grpc://broker-1:8080": want http://host:port or https://host:port`},
		"broker url plain beside tls": {reason: "peers would speak plain HTTP to a TLS listener",
			env:     with("LISTEN_ADDR", "https://0.0.0.0:8443", "TLS_CERT_FILE", "c", "TLS_KEY_FILE", "k", "BROKER_URL", "http://broker-1:8443"),
			wantErr: `BROKER_URL="http://broker-1:8443" is http:// but the broker listens with TLS (LISTEN_ADDR is https://): want https://`},
		"broker url": {reason: "a pod's address, as the chart sets it", env: with("BROKER_URL", "http://10.0.0.5:8080"),
			check: func(t *testing.T, c Config) { require.Equal(t, "http://10.0.0.5:8080", c.BrokerURL) }},
		"broker tls server name": {reason: "a pod's address with TLS, verified as the peers' Service name, as the chart sets it",
			env: with("LISTEN_ADDR", "https://0.0.0.0:8443", "TLS_CERT_FILE", "c", "TLS_KEY_FILE", "k",
				"BROKER_URL", "https://10.0.0.5:8443", "BROKER_TLS_SERVER_NAME", "converge-peers.ns.svc"),
			check: func(t *testing.T, c Config) {
				require.Equal(t, "converge-peers.ns.svc", c.BrokerTLSServerName)
				require.Equal(t, "converge-peers.ns.svc", c.Redacted()["BROKER_TLS_SERVER_NAME"], "advertised to the peers")
			}},
		"broker tls server name without tls": {reason: "it names a certificate: meaningless beside plain HTTP",
			env:     with("BROKER_URL", "http://10.0.0.5:8080", "BROKER_TLS_SERVER_NAME", "converge-peers.ns.svc"),
			wantErr: `BROKER_TLS_SERVER_NAME="converge-peers.ns.svc" needs an https:// BROKER_URL`},
		"broker tls server name with a port": {reason: "a host name, not an address",
			env: with("LISTEN_ADDR", "https://0.0.0.0:8443", "TLS_CERT_FILE", "c", "TLS_KEY_FILE", "k",
				"BROKER_URL", "https://10.0.0.5:8443", "BROKER_TLS_SERVER_NAME", "converge-peers.ns.svc:8443"),
			wantErr: `BROKER_TLS_SERVER_NAME="converge-peers.ns.svc:8443": want a host name`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, err := Parse(env(tc.env), "v1")
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr, tc.reason)
				return
			}
			require.NoError(t, err, tc.reason)
			tc.check(t, c)
		})
	}
}

func TestRedacted_HidesPasswords(t *testing.T) {
	t.Parallel()
	c, err := Parse(env(map[string]string{
		"DATABASE_URL":      "postgres://app:hunter2@db:5432/converge",
		"DATABASE_READ_URL": "postgres://db-ro/converge?user=app&password=hunter2",
		"LISTEN_ADDR":       "127.0.0.1:8080",
	}), "v1")
	require.NoError(t, err)
	for k, v := range c.Redacted() {
		if s, ok := v.(string); ok {
			require.False(t, strings.Contains(s, "hunter2"), "%s leaks the password: %s", k, s)
		}
	}
	require.Contains(t, c.Redacted()["DATABASE_URL"], "app:REDACTED@db")

	// The client key's passphrase is a secret too (libpq's sslpassword).
	c.DatabaseURL = "postgres://app@db/converge?sslmode=verify-full&sslcert=/c.pem&sslkey=/k.pem&sslpassword=hunter2"
	require.NotContains(t, c.Redacted()["DATABASE_URL"], "hunter2", "sslpassword leaks into the cluster view")
	require.Contains(t, c.Redacted()["DATABASE_URL"], "sslpassword=REDACTED")

	// pgx also takes libpq's keyword/value form, quoted values included.
	for dsn, want := range map[string]string{
		"host=db user=app password=hunter2 dbname=converge":            "host=db user=app password=REDACTED dbname=converge",
		"host=db password = 'hunter2 with spaces' sslpassword=hunter2": "host=db password=REDACTED sslpassword=REDACTED",
	} {
		c.DatabaseURL = dsn
		require.Equal(t, want, c.Redacted()["DATABASE_URL"], "a keyword/value DSN's passwords are redacted")
	}
}

func TestDefaults_AreWhatParseStartsFrom(t *testing.T) {
	t.Parallel()
	got, err := Parse(env(map[string]string{"DATABASE_URL": "postgres://db/converge", "API_AUTH": "none", "WORKER_AUTH": "none"}), "v1")
	require.NoError(t, err)
	want := Defaults()
	want.DatabaseURL, want.Version, want.APIAuth, want.WorkerAuth = "postgres://db/converge", "v1", "none", "none"
	require.Equal(t, want, got, "an environment with only the required variables parses to Defaults()")
	require.NoError(t, want.Validate(), "Defaults() with a database, run open deliberately, is a valid configuration")
	want.APIAuth, want.WorkerAuth = "", ""
	require.ErrorContains(t, want.Validate(), "API_AUTH=none", "Defaults() alone listen on every interface: credentials are required")
	require.ErrorContains(t, Defaults().Validate(), "DATABASE_URL is required")
}

func TestValidate_RejectsAConfigValueParseWouldReject(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason  string
		edit    func(*Config)
		wantErr string
	}{
		"role":  {reason: "a built value gets the same role check", edit: func(c *Config) { c.Role = "worker" }, wantErr: "ROLE"},
		"drain": {reason: "a zero duration would spin a cadence", edit: func(c *Config) { c.ShutdownDrain = 0 }, wantErr: "SHUTDOWN_DRAIN"},
		"beat":  {reason: "a zero heartbeat is refused", edit: func(c *Config) { c.HeartbeatEvery = 0 }, wantErr: "MEMBER_HEARTBEAT_EVERY"},
		"redelivery": {reason: "a zero redelivery wait is refused", edit: func(c *Config) { c.RedeliveryWait = 0 },
			wantErr: "WORKER_REDELIVERY_WAIT"},
		"silence": {reason: "a zero silence timeout would end every session", edit: func(c *Config) { c.WorkerSilence = 0 },
			wantErr: "WORKER_SILENCE_TIMEOUT"},
		"tls": {reason: "https without a keypair", edit: func(c *Config) { c.ListenAddr = "https://:8443" }, wantErr: "TLS_CERT_FILE"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := Defaults()
			c.DatabaseURL = "postgres://db/converge"
			tc.edit(&c)
			require.ErrorContains(t, c.Validate(), tc.wantErr, tc.reason)
		})
	}
}

// DATABASE_URL may be a libpq keyword/value string as well as a URL, and a
// client key's passphrase (sslpassword) is as secret as the password: the
// cluster view, which every API viewer reads, shows neither.
func TestRedacted_HidesPasswordsInEveryDSNForm(t *testing.T) {
	t.Parallel()
	for name, dsn := range map[string]string{
		"keyword/value":        "host=db user=app password=hunter2 dbname=converge",
		"keyword/value quoted": "host=db user=app password='hunter2 with spaces' dbname=converge",
		"spaces around =":      "host=db password = hunter2 dbname=converge",
		"URL sslpassword":      "postgres://app@db/converge?sslmode=verify-full&sslpassword=hunter2",
		"keyword sslpassword":  "host=db sslpassword=hunter2",
	} {
		c := Defaults()
		c.DatabaseURL = dsn
		got, _ := c.Redacted()["DATABASE_URL"].(string)
		require.NotContains(t, got, "hunter2", "%s: %s", name, got)
		require.Contains(t, got, "db", "%s: the rest stays readable: %s", name, got)
	}
}
