// Package config reads the converge server's configuration from the
// environment, validates it at boot (fail fast) and renders a redacted copy
// for the cluster view.
package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/converge-run/converge/core/auth"
	"github.com/converge-run/converge/core/server"
	"github.com/converge-run/converge/core/tlsreload"
)

// Role selects a pod's duties.
type Role string

// Roles.
const (
	RoleAll     Role = "all"     // control + broker + HTTP API
	RoleControl Role = "control" // control bundle + HTTP API, no broker
	RoleBroker  Role = "broker"  // broker only; probes on HEALTH_ADDR
)

// MinWorkerSessionMaxAge is the shortest WORKER_SESSION_MAX_AGE: a worker's
// session that ended more often would spend more of its life reconnecting.
const MinWorkerSessionMaxAge = time.Minute

// The floors of the cadences and windows read from the environment (Parse):
// below them a loop spins or a window closes before what it waits for could
// happen. A Config built in code (a test stack's fast cadences) is held only
// to positive values (Validate).
const (
	// MinHeartbeatEvery is the shortest MEMBER_HEARTBEAT_EVERY: every beat
	// is a write to the primary, and the peers judge the beats in whole
	// seconds.
	MinHeartbeatEvery = time.Second
	// MinTLSReload is the shortest TLS_RELOAD_INTERVAL: each reload reads
	// every certificate, key and token file. The Go worker SDK holds its
	// own TLS_RELOAD_INTERVAL to the same floor.
	MinTLSReload = tlsreload.MinInterval
	// MinWorkerSilence is the shortest WORKER_SILENCE_TIMEOUT: workers are
	// asked for a keepalive every third of it, and a shorter one ends the
	// sessions of healthy workers on a slow link or a pause.
	MinWorkerSilence = 3 * time.Second
	// MinUnclaimedAfter is the shortest SWEEPER_UNCLAIMED_DELETE_AFTER: the
	// sweep is the GC of work whose kind lost its workers, and a shorter
	// window deletes work still waiting its turn behind a large fleet's
	// backlog (re-queued by the reaper, then deleted again).
	MinUnclaimedAfter = 10 * time.Minute
)

// Config is the server configuration.
type Config struct {
	DatabaseURL     string // DATABASE_URL (required)
	DatabaseReadURL string // DATABASE_READ_URL: a streaming replica for UI/API reads
	Role            Role   // ROLE: all | control | broker (default all)
	ListenAddr      string // LISTEN_ADDR: host:port, http://host:port or https://host:port (default :8080)
	HealthAddr      string // HEALTH_ADDR: probes on broker pods (default :8081)
	BrokerAddr      string // BROKER_ADDR: the broker's Connect listener; empty = on LISTEN_ADDR
	BrokerURL       string // BROKER_URL: how peers/workers reach this broker (advertised); default derived
	// BrokerTLSServerName (BROKER_TLS_SERVER_NAME) is the name peers verify
	// this broker's certificate against when they dial BROKER_URL (advertised
	// with it); empty: BROKER_URL's host. For a BROKER_URL by address (a pod
	// IP) that no certificate names.
	BrokerTLSServerName string
	LogFormat           string        // LOG_FORMAT: json | text
	LogLevel            string        // LOG_LEVEL: debug | info | warn | error
	ShutdownDrain       time.Duration // SHUTDOWN_DRAIN: broker drain budget (default 45s)
	HeartbeatEvery      time.Duration // MEMBER_HEARTBEAT_EVERY (default 10s)
	RedeliveryWait      time.Duration // WORKER_REDELIVERY_WAIT: a lost worker's stage waits this long for it when no other worker serves the kind (default 30s)
	WorkerSilence       time.Duration // WORKER_SILENCE_TIMEOUT: a keepalive worker silent this long loses its session (default 10s)
	// WORKER_SESSION_MAX_AGE: a worker's session is ended, once its stages
	// have finished, after about this long (±10%), so workers spread over
	// brokers added since (default 30m; 0: never).
	WorkerSessionMaxAge time.Duration
	UnclaimedAfter      time.Duration // SWEEPER_UNCLAIMED_DELETE_AFTER (default 24h)
	EventRetention      time.Duration // EVENT_RETENTION: events older than this are deleted (default 168h; 0: kept forever)
	TLSCertFile         string        // TLS_CERT_FILE (with https://)
	TLSKeyFile          string        // TLS_KEY_FILE (with https://)
	TLSClientCAFile     string        // TLS_CLIENT_CA_FILE: require client certs (mTLS)
	TLSReload           time.Duration // TLS_RELOAD_INTERVAL (default 3m)
	DBIAMAuth           bool          // DB_IAM_AUTH: RDS/Aurora IAM auth tokens
	APITokensFile       string        // API_TOKENS_FILE: bearer tokens → roles; empty = open API
	PprofAddr           string        // PPROF_ADDR: a loopback host:port serving net/http/pprof; empty = off
	APIAuth             string        // API_AUTH: "none" runs the API open deliberately (else it needs API_TOKENS_FILE off loopback)
	WorkerTokens        string        // WORKER_TOKENS_FILE: the workers' bearer tokens (worker plane auth)
	MeshTokens          string        // MESH_TOKENS_FILE: the peer brokers' bearer tokens (mesh auth)
	WorkerAuth          string        // WORKER_AUTH: "none" runs the worker plane open deliberately
	WorkerMaxMsg        int           // WORKER_MAX_MESSAGE_BYTES: one WorkerService message (default 16 MiB)
	WorkerRate          int           // WORKER_MAX_STREAM_RATE: messages per second one worker stream may send (default 20000)
	WorkerCompress      int           // WORKER_COMPRESS_MIN_BYTES: stream messages this big are gzipped for workers that accept it; 0 = never (default)
	WorkerMaxInFlight   int           // WORKER_MAX_IN_FLIGHT: the largest max_in_flight a worker's Subscribe may ask for (default 1024)
	// Identity per audience with mTLS (core/auth identities.go): allow-lists
	// of client-certificate identities (SPIFFE IDs or CN=…), comma-separated.
	APIClientIDs    string // API_CLIENT_IDENTITIES: ROLE:IDENTITY entries that may call the API
	WorkerClientIDs string // WORKER_CLIENT_IDENTITIES: identities that may serve work
	MeshClientIDs   string // MESH_CLIENT_IDENTITIES: identities of peer brokers that may relay
	Version         string // build version (not from env)
}

// Secure reports whether LISTEN_ADDR asks for TLS.
func (c Config) Secure() bool { return strings.HasPrefix(c.ListenAddr, "https://") }

// ListenHostPort is LISTEN_ADDR without its scheme.
func (c Config) ListenHostPort() string {
	a := strings.TrimPrefix(strings.TrimPrefix(c.ListenAddr, "https://"), "http://")
	return strings.TrimSuffix(a, "/")
}

// HasControl reports whether the role runs the control bundle and HTTP API.
func (c Config) HasControl() bool { return c.Role == RoleAll || c.Role == RoleControl }

// HasBroker reports whether the role runs a broker.
func (c Config) HasBroker() bool { return c.Role == RoleAll || c.Role == RoleBroker }

// Defaults is the configuration with nothing set: what Parse starts from
// before reading the environment. Tests build a Config from it instead of
// faking the environment; DatabaseURL is still required (Validate).
func Defaults() Config {
	return Config{
		Role:                RoleAll,
		ListenAddr:          ":8080",
		HealthAddr:          ":8081",
		ShutdownDrain:       45 * time.Second,
		HeartbeatEvery:      10 * time.Second,
		RedeliveryWait:      30 * time.Second,
		WorkerSilence:       10 * time.Second,
		UnclaimedAfter:      24 * time.Hour,
		EventRetention:      7 * 24 * time.Hour,
		WorkerSessionMaxAge: 30 * time.Minute,
		TLSReload:           3 * time.Minute,
		WorkerMaxMsg:        16 << 20,
		WorkerRate:          20000,
		WorkerMaxInFlight:   1024,
	}
}

// FromEnv reads the configuration from the process environment.
func FromEnv(version string) (Config, error) { return Parse(os.Getenv, version) }

// zeroOrDuration reads the duration name into dst, when set: unlike the
// other durations, 0 is a value (zero says what it means, e.g. "never").
func zeroOrDuration(getenv func(string) string, dst *time.Duration, name, zero, like string) error {
	v := getenv(name)
	if v == "" {
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return fmt.Errorf("%s=%q: want 0 (%s) or a duration like %s", name, v, zero, like)
	}
	*dst = d
	return nil
}

// Parse reads the configuration through getenv over Defaults and validates
// it.
func Parse(getenv func(string) string, version string) (Config, error) {
	c := Defaults()
	c.Version = version
	var errs []error
	str := func(dst *string, name string) {
		if v := getenv(name); v != "" {
			*dst = v
		}
	}
	str(&c.DatabaseURL, "DATABASE_URL")
	str(&c.DatabaseReadURL, "DATABASE_READ_URL")
	if v := getenv("ROLE"); v != "" {
		c.Role = Role(strings.ToLower(v))
	}
	str(&c.ListenAddr, "LISTEN_ADDR")
	str(&c.HealthAddr, "HEALTH_ADDR")
	str(&c.BrokerAddr, "BROKER_ADDR")
	str(&c.BrokerURL, "BROKER_URL")
	str(&c.BrokerTLSServerName, "BROKER_TLS_SERVER_NAME")
	str(&c.LogFormat, "LOG_FORMAT")
	str(&c.LogLevel, "LOG_LEVEL")
	str(&c.TLSCertFile, "TLS_CERT_FILE")
	str(&c.TLSKeyFile, "TLS_KEY_FILE")
	str(&c.TLSClientCAFile, "TLS_CLIENT_CA_FILE")
	str(&c.APITokensFile, "API_TOKENS_FILE")
	str(&c.PprofAddr, "PPROF_ADDR")
	str(&c.APIAuth, "API_AUTH")
	str(&c.WorkerTokens, "WORKER_TOKENS_FILE")
	str(&c.MeshTokens, "MESH_TOKENS_FILE")
	str(&c.WorkerAuth, "WORKER_AUTH")
	str(&c.APIClientIDs, "API_CLIENT_IDENTITIES")
	str(&c.WorkerClientIDs, "WORKER_CLIENT_IDENTITIES")
	str(&c.MeshClientIDs, "MESH_CLIENT_IDENTITIES")
	errs = append(errs, c.parseWorkerLimits(getenv)...)
	// dur reads a positive duration, at least floor (0: any).
	dur := func(dst *time.Duration, name string, floor time.Duration) {
		v := getenv(name)
		if v == "" {
			return
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("%s=%q: want a positive duration like %s", name, v, *dst))
			return
		}
		if d < floor {
			errs = append(errs, fmt.Errorf("%s=%q: want at least %s", name, v, floor))
			return
		}
		*dst = d
	}
	dur(&c.ShutdownDrain, "SHUTDOWN_DRAIN", 0)
	dur(&c.HeartbeatEvery, "MEMBER_HEARTBEAT_EVERY", MinHeartbeatEvery)
	dur(&c.RedeliveryWait, "WORKER_REDELIVERY_WAIT", 0)
	dur(&c.WorkerSilence, "WORKER_SILENCE_TIMEOUT", MinWorkerSilence)
	if err := zeroOrDuration(getenv, &c.WorkerSessionMaxAge, "WORKER_SESSION_MAX_AGE", "never", "30m"); err != nil {
		errs = append(errs, err)
	}
	if err := zeroOrDuration(getenv, &c.EventRetention, "EVENT_RETENTION", "keep events forever", "168h"); err != nil {
		errs = append(errs, err)
	}
	dur(&c.UnclaimedAfter, "SWEEPER_UNCLAIMED_DELETE_AFTER", MinUnclaimedAfter)
	dur(&c.TLSReload, "TLS_RELOAD_INTERVAL", MinTLSReload)
	if v := getenv("DB_IAM_AUTH"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("DB_IAM_AUTH=%q: want true or false", v))
		}
		c.DBIAMAuth = b
	}
	if err := c.Validate(); err != nil {
		errs = append(errs, err)
	}
	return c, errors.Join(errs...) // nil when errs is empty
}

// parseWorkerLimits reads the worker plane's numeric limits into c.
func (c *Config) parseWorkerLimits(getenv func(string) string) []error {
	var errs []error
	atLeast := func(dst *int, name string, floor int, want string) {
		v := getenv(name)
		if v == "" {
			return
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < floor {
			errs = append(errs, fmt.Errorf("%s=%q: want %s", name, v, want))
			return
		}
		*dst = n
	}
	atLeast(&c.WorkerMaxMsg, "WORKER_MAX_MESSAGE_BYTES", 1024, "a byte count of at least 1024")
	atLeast(&c.WorkerRate, "WORKER_MAX_STREAM_RATE", 1, "a positive number of messages per second")
	atLeast(&c.WorkerCompress, "WORKER_COMPRESS_MIN_BYTES", 0, "a byte count, 0 to compress nothing")
	atLeast(&c.WorkerMaxInFlight, "WORKER_MAX_IN_FLIGHT", 1, "a positive number of tasks")
	return errs
}

// Validate checks a configuration the way Parse does after reading it,
// except the floors of the cadences (MinHeartbeatEvery and the others),
// which Parse applies to the environment: a Config built in code, as a test
// stack's is, may run faster cadences; its durations must still be positive.
func (c Config) Validate() error {
	var errs []error
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("DATABASE_URL is required"))
	}
	switch c.Role {
	case RoleAll, RoleControl, RoleBroker:
	default:
		errs = append(errs, fmt.Errorf("ROLE=%q: want all, control or broker", c.Role))
	}
	for name, d := range map[string]time.Duration{"SHUTDOWN_DRAIN": c.ShutdownDrain, "MEMBER_HEARTBEAT_EVERY": c.HeartbeatEvery,
		"SWEEPER_UNCLAIMED_DELETE_AFTER": c.UnclaimedAfter, "TLS_RELOAD_INTERVAL": c.TLSReload,
		"WORKER_REDELIVERY_WAIT": c.RedeliveryWait, "WORKER_SILENCE_TIMEOUT": c.WorkerSilence} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s=%s: want a positive duration", name, d))
		}
	}
	if a := c.WorkerSessionMaxAge; a != 0 && a < MinWorkerSessionMaxAge {
		errs = append(errs, fmt.Errorf("WORKER_SESSION_MAX_AGE=%s: want 0 (never) or at least %s", a, MinWorkerSessionMaxAge))
	}
	if c.EventRetention < 0 {
		errs = append(errs, fmt.Errorf("EVENT_RETENTION=%s: want 0 (keep events forever) or a positive duration", c.EventRetention))
	}
	errs = append(errs, c.validateListen()...)
	if err := server.CheckPprofAddr("PPROF_ADDR", c.PprofAddr); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.validateAuth()...)
	errs = append(errs, c.validateIdentities()...)
	return errors.Join(errs...)
}

// hostPort reports whether addr is a host:port a listener can bind (the host
// may be empty: every interface).
func hostPort(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 0 && n <= 65535
}

func (c Config) validateListen() []error {
	var errs []error
	a := c.ListenAddr
	if strings.Contains(a, "://") {
		u, err := url.Parse(a)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return []error{fmt.Errorf("LISTEN_ADDR=%q: want host:port, http://host:port or https://host:port", a)}
		}
	}
	if !hostPort(c.ListenHostPort()) {
		return []error{fmt.Errorf("LISTEN_ADDR=%q: want host:port, http://host:port or https://host:port", a)}
	}
	if c.Role == RoleBroker && !hostPort(c.HealthAddr) {
		errs = append(errs, fmt.Errorf("HEALTH_ADDR=%q: want host:port (the broker's probes and metrics)", c.HealthAddr))
	}
	if c.BrokerAddr != "" && !hostPort(c.BrokerAddr) {
		errs = append(errs, fmt.Errorf("BROKER_ADDR=%q: want host:port (its TLS follows LISTEN_ADDR's scheme)", c.BrokerAddr))
	}
	errs = append(errs, c.validateBrokerURL()...)
	hasPair := c.TLSCertFile != "" || c.TLSKeyFile != ""
	switch {
	case c.Secure() && (c.TLSCertFile == "" || c.TLSKeyFile == ""):
		errs = append(errs, errors.New("LISTEN_ADDR is https:// but TLS_CERT_FILE and TLS_KEY_FILE are not both set"))
	case !c.Secure() && hasPair:
		errs = append(errs, errors.New("TLS_CERT_FILE/TLS_KEY_FILE are set but LISTEN_ADDR is not https:// (refusing to serve plain HTTP with a certificate configured)"))
	}
	if c.TLSClientCAFile != "" && !c.Secure() {
		errs = append(errs, errors.New("TLS_CLIENT_CA_FILE is set but LISTEN_ADDR is not https:// (mTLS would silently not apply)"))
	}
	return errs
}

// validateBrokerURL refuses a BROKER_URL peers could not dial: it is
// advertised as is, and a bad one would only show as every peer's warning.
// The broker listener (LISTEN_ADDR or BROKER_ADDR) serves TLS exactly when
// LISTEN_ADDR is https://, so the scheme must say the same.
func (c Config) validateBrokerURL() []error {
	if c.BrokerURL == "" {
		scheme := "http" // the derived URL's (advertisedBrokerURL)
		if c.Secure() {
			scheme = "https"
		}
		return c.validateBrokerTLSServerName(scheme)
	}
	u, err := url.Parse(c.BrokerURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return []error{fmt.Errorf("BROKER_URL=%q: want http://host:port or https://host:port (how peer brokers reach this one)", c.BrokerURL)}
	}
	if (u.Scheme == "https") != c.Secure() {
		want, is := "http://", "plain (LISTEN_ADDR is not https://)"
		if c.Secure() {
			want, is = "https://", "with TLS (LISTEN_ADDR is https://)"
		}
		return []error{fmt.Errorf("BROKER_URL=%q is %s:// but the broker listens %s: want %s", c.BrokerURL, u.Scheme, is, want)}
	}
	return c.validateBrokerTLSServerName(u.Scheme)
}

// validateBrokerTLSServerName refuses a BROKER_TLS_SERVER_NAME peers could
// not use: a name only means something beside an https:// BROKER_URL, and
// it is a host name (no scheme, port or path).
func (c Config) validateBrokerTLSServerName(scheme string) []error {
	n := c.BrokerTLSServerName
	if n == "" {
		return nil
	}
	if scheme != "https" {
		return []error{fmt.Errorf("BROKER_TLS_SERVER_NAME=%q needs an https:// BROKER_URL (it names the certificate peers verify)", n)}
	}
	if strings.ContainsAny(n, ":/ ") || strings.HasPrefix(n, ".") || strings.HasSuffix(n, ".") {
		return []error{fmt.Errorf("BROKER_TLS_SERVER_NAME=%q: want a host name the broker's certificate covers (e.g. converge-peers.ns.svc)", n)}
	}
	return nil
}

// Redacted is the configuration as the cluster view shows it: secrets
// (database passwords, file contents) never leave the pod.
func (c Config) Redacted() map[string]any {
	return map[string]any{
		"DATABASE_URL":                   redactURL(c.DatabaseURL),
		"DATABASE_READ_URL":              redactURL(c.DatabaseReadURL),
		"ROLE":                           string(c.Role),
		"LISTEN_ADDR":                    c.ListenAddr,
		"HEALTH_ADDR":                    c.HealthAddr,
		"BROKER_ADDR":                    c.BrokerAddr,
		"BROKER_URL":                     c.BrokerURL,
		"BROKER_TLS_SERVER_NAME":         c.BrokerTLSServerName,
		"LOG_FORMAT":                     c.LogFormat,
		"LOG_LEVEL":                      c.LogLevel,
		"SHUTDOWN_DRAIN":                 c.ShutdownDrain.String(),
		"MEMBER_HEARTBEAT_EVERY":         c.HeartbeatEvery.String(),
		"WORKER_REDELIVERY_WAIT":         c.RedeliveryWait.String(),
		"WORKER_SILENCE_TIMEOUT":         c.WorkerSilence.String(),
		"WORKER_SESSION_MAX_AGE":         c.WorkerSessionMaxAge.String(),
		"SWEEPER_UNCLAIMED_DELETE_AFTER": c.UnclaimedAfter.String(),
		"EVENT_RETENTION":                c.EventRetention.String(),
		"TLS":                            c.Secure(),
		"TLS_CLIENT_CA":                  c.TLSClientCAFile != "",
		"TLS_RELOAD_INTERVAL":            c.TLSReload.String(),
		"DB_IAM_AUTH":                    c.DBIAMAuth,
		"API_AUTH":                       c.APIAuthenticated(),
		"API_CLIENT_IDENTITIES":          c.APIClientIDs,
		"WORKER_CLIENT_IDENTITIES":       c.WorkerClientIDs,
		"MESH_CLIENT_IDENTITIES":         c.MeshClientIDs,
		"PPROF_ADDR":                     c.PprofAddr,
		"WORKER_AUTH":                    c.WorkerPlaneAuth(),
		"MESH_AUTH":                      c.MeshTokens != "" || c.TLSClientCAFile != "",
		"WORKER_MAX_MESSAGE_BYTES":       c.WorkerMaxMsg,
		"WORKER_MAX_STREAM_RATE":         c.WorkerRate,
		"WORKER_COMPRESS_MIN_BYTES":      c.WorkerCompress,
		"WORKER_MAX_IN_FLIGHT":           c.WorkerMaxInFlight,
	}
}

// dsnPassword matches a password keyword of libpq's keyword/value form
// (password, sslpassword) with its value, quoted or not.
var dsnPassword = regexp.MustCompile(`(\b\w*password)\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)

func redactURL(raw string) string {
	if raw == "" {
		return ""
	}
	if !strings.Contains(raw, "://") {
		return dsnPassword.ReplaceAllString(raw, "${1}=REDACTED")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable)"
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "REDACTED")
	}
	// password, and libpq's sslpassword (the client key's passphrase).
	q := u.Query()
	redacted := false
	for k := range q {
		if strings.Contains(strings.ToLower(k), "password") {
			q.Set(k, "REDACTED")
			redacted = true
		}
	}
	if redacted {
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// WorkerPlaneAuth reports whether the WorkerService requires credentials
// (worker or mesh tokens, or client certificates).
func (c Config) WorkerPlaneAuth() bool {
	return c.WorkerTokens != "" || c.MeshTokens != "" || c.TLSClientCAFile != ""
}

// Loopback reports whether a listen address (host:port, with or without a
// scheme) binds only the loopback interface; ":8080" binds every interface.
func Loopback(addr string) bool {
	a := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(addr, "https://"), "http://"), "/")
	host, _, err := net.SplitHostPort(a)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// APIAuthenticated reports whether the API requires credentials: bearer
// tokens, certificate identities, or both.
func (c Config) APIAuthenticated() bool { return c.APITokensFile != "" || c.APIClientIDs != "" }

// CertPolicy is the worker plane's certificate policy from
// WORKER_CLIENT_IDENTITIES and MESH_CLIENT_IDENTITIES (validated by
// Validate; a list that does not parse is left unset here).
func (c Config) CertPolicy() auth.CertPolicy {
	w, _ := auth.ParseIdentityList("WORKER_CLIENT_IDENTITIES", c.WorkerClientIDs)
	m, _ := auth.ParseIdentityList("MESH_CLIENT_IDENTITIES", c.MeshClientIDs)
	return auth.CertPolicy{Workers: w, Mesh: m}
}

// APIIdentities is API_CLIENT_IDENTITIES, parsed (validated by Validate).
func (c Config) APIIdentities() auth.APIIdentities {
	a, _ := auth.ParseAPIIdentities(c.APIClientIDs)
	return a
}

// validateIdentities parses the allow-lists; each needs mutual TLS, since
// the identities come from verified client certificates.
func (c Config) validateIdentities() []error {
	var errs []error
	if _, err := auth.ParseAPIIdentities(c.APIClientIDs); err != nil {
		errs = append(errs, err)
	}
	for name, v := range map[string]string{"WORKER_CLIENT_IDENTITIES": c.WorkerClientIDs, "MESH_CLIENT_IDENTITIES": c.MeshClientIDs} {
		if _, err := auth.ParseIdentityList(name, v); err != nil {
			errs = append(errs, err)
		}
	}
	for name, v := range map[string]string{"API_CLIENT_IDENTITIES": c.APIClientIDs,
		"WORKER_CLIENT_IDENTITIES": c.WorkerClientIDs, "MESH_CLIENT_IDENTITIES": c.MeshClientIDs} {
		if v != "" && c.TLSClientCAFile == "" {
			errs = append(errs, fmt.Errorf("%s is set but TLS_CLIENT_CA_FILE is not: identities come from verified client certificates (mutual TLS)", name))
		}
	}
	return errs
}

// validateAuth refuses an unauthenticated API or worker plane where anyone
// but this host could reach it, unless API_AUTH=none / WORKER_AUTH=none ask
// for it explicitly, and a worker plane left open beside an authenticated
// API (a forged result would then bypass the API's tokens).
func (c Config) validateAuth() []error {
	var errs []error
	for name, v := range map[string]string{"API_AUTH": c.APIAuth, "WORKER_AUTH": c.WorkerAuth} {
		if v != "" && v != "none" {
			errs = append(errs, fmt.Errorf("%s=%q: the only value is none (run it open deliberately); unset it to require credentials", name, v))
		}
	}
	if c.APIAuth == "none" && c.APIAuthenticated() {
		errs = append(errs, errors.New("API_AUTH=none contradicts API_TOKENS_FILE/API_CLIENT_IDENTITIES: set one of them"))
	}
	if c.WorkerAuth == "none" && c.WorkerPlaneAuth() {
		errs = append(errs, errors.New("WORKER_AUTH=none contradicts WORKER_TOKENS_FILE/MESH_TOKENS_FILE/TLS_CLIENT_CA_FILE: set one of them"))
	}
	if c.HasControl() && !c.APIAuthenticated() && c.APIAuth != "none" && !Loopback(c.ListenAddr) {
		errs = append(errs, fmt.Errorf("LISTEN_ADDR=%s is reachable beyond this host but the API has no API_TOKENS_FILE: set one, or API_AUTH=none to serve it open deliberately", c.ListenAddr))
	}
	if !c.HasBroker() || c.WorkerPlaneAuth() || c.WorkerAuth == "none" {
		return errs
	}
	brokerAddr := c.ListenAddr
	if c.BrokerAddr != "" {
		brokerAddr = c.BrokerAddr
	}
	switch {
	case !Loopback(brokerAddr):
		errs = append(errs, fmt.Errorf("the broker listens on %s, reachable beyond this host, but the worker plane has no WORKER_TOKENS_FILE (or TLS_CLIENT_CA_FILE): set one, or WORKER_AUTH=none to serve it open deliberately", brokerAddr))
	case c.APIAuthenticated():
		errs = append(errs, errors.New("the API is authenticated but the worker plane is open (anyone who reaches the broker could forge task results): set WORKER_TOKENS_FILE, or WORKER_AUTH=none to run it open deliberately"))
	}
	return errs
}
