package cli

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/Khan/genqlient/graphql"
	"github.com/gorilla/websocket"
)

// DefaultServer is where conctl talks when neither --server nor
// CONVERGE_SERVER says otherwise.
const DefaultServer = "http://localhost:8080"

// connFlags are the global connection flags.
type connFlags struct {
	server   string
	token    string
	tlsCA    string
	tlsCert  string
	tlsKey   string
	insecure bool
}

// Conn is a configured connection to one converge API: a genqlient client
// over HTTP and a factory of websocket clients for subscriptions.
type Conn struct {
	// GQL runs queries and mutations.
	GQL graphql.Client
	// HTTPEndpoint and WSEndpoint are the GraphQL URLs.
	HTTPEndpoint, WSEndpoint string

	token     string
	tls       *tls.Config
	header    http.Header
	transport *http.Transport
}

// close drops the idle keep-alive connections.
func (c *Conn) close() { c.transport.CloseIdleConnections() }

// dial builds a Conn from the flags (nothing is contacted yet).
func (f connFlags) dial(version string) (*Conn, error) {
	httpURL, wsURL, err := endpoints(f.server)
	if err != nil {
		return nil, usageError{err}
	}
	tlsCfg, err := f.tlsConfig()
	if err != nil {
		return nil, err
	}
	if i := strings.IndexFunc(f.token, func(r rune) bool { return r < 0x20 || r == 0x7f }); i >= 0 {
		// A header cannot carry it: net/http would refuse every request
		// with "invalid header field value", naming neither flag nor cause.
		return nil, usageError{fmt.Errorf("the token (--token or CONVERGE_TOKEN) contains a control character (%q at byte %d): a trailing newline from a file?", f.token[i], i)}
	}
	header := http.Header{}
	header.Set("User-Agent", "conctl/"+version)
	if f.token != "" {
		header.Set("Authorization", "Bearer "+f.token)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsCfg
	u, err := url.Parse(httpURL)
	if err != nil {
		return nil, usageError{fmt.Errorf("--server %q: %w", redactServer(f.server), err)}
	}
	hc := &http.Client{Transport: headerTransport{header: header, origin: u.Scheme + "://" + u.Host, next: tr},
		Timeout: 60 * time.Second}
	return &Conn{GQL: graphql.NewClient(httpURL, hc), HTTPEndpoint: httpURL, WSEndpoint: wsURL,
		token: f.token, tls: tlsCfg, header: header, transport: tr}, nil
}

// NewWS returns an unstarted websocket client for subscriptions on this
// connection (the token rides both the upgrade and connection_init).
func (c *Conn) NewWS() *WSClient {
	d := *websocket.DefaultDialer
	d.TLSClientConfig = c.tls
	d.HandshakeTimeout = 15 * time.Second
	var init map[string]any
	if c.token != "" {
		init = map[string]any{"Authorization": "Bearer " + c.token}
	}
	return NewWSClient(WSOptions{Endpoint: c.WSEndpoint, Dialer: &d, Header: c.header.Clone(), InitPayload: init})
}

// endpoints derives the GraphQL HTTP and websocket URLs from --server: a
// base URL (http://host:8080) gets /graphql appended; a URL that already
// ends in /graphql is used as is. A URL carrying credentials
// (user:password@host) is refused: conctl authenticates with a bearer
// token, and an error must never print a password.
func endpoints(server string) (string, string, error) {
	shown := redactServer(server)
	u, err := url.Parse(strings.TrimSpace(server))
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the URL as given
		}
		return "", "", fmt.Errorf("--server %q: %w", shown, err)
	}
	switch u.Scheme {
	case "http", "https":
	case "":
		return "", "", fmt.Errorf("--server %q: needs a scheme (http:// or https://)", shown)
	default:
		return "", "", fmt.Errorf("--server %q: scheme %q is not http or https", shown, u.Scheme)
	}
	if u.User != nil {
		return "", "", fmt.Errorf("--server %q: credentials in the URL are not supported: drop the user:password@ "+
			"and pass a bearer token with --token or CONVERGE_TOKEN", u.Redacted())
	}
	if u.Host == "" {
		return "", "", fmt.Errorf("--server %q: no host", shown)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	if !strings.HasSuffix(u.Path, "/graphql") {
		u.Path += "/graphql"
	}
	u.RawQuery, u.Fragment = "", ""
	httpURL := u.Redacted() // no userinfo: the same as u.String()
	if u.Scheme == "https" {
		u.Scheme = "wss"
	} else {
		u.Scheme = "ws"
	}
	return httpURL, u.Redacted(), nil
}

// redactServer hides what could be a password in a --server value an error
// repeats: everything between the scheme and the last @ before the path.
func redactServer(s string) string {
	start := 0
	if i := strings.Index(s, "://"); i >= 0 {
		start = i + len("://")
	}
	end := len(s)
	if i := strings.IndexAny(s[start:], "/?#"); i >= 0 {
		end = start + i
	}
	at := strings.LastIndex(s[start:end], "@")
	if at < 0 {
		return s
	}
	return s[:start] + "xxxxx" + s[start+at:]
}

// tlsConfig builds the client TLS settings; nil when none are set.
func (f connFlags) tlsConfig() (*tls.Config, error) {
	if f.tlsCA == "" && f.tlsCert == "" && f.tlsKey == "" && !f.insecure {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: f.insecure} //nolint:gosec // opt-in flag
	if f.tlsCA != "" {
		pem, err := os.ReadFile(f.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("read --tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s: no PEM certificates found", f.tlsCA)
		}
		cfg.RootCAs = pool
	}
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return nil, usageError{errors.New("--tls-cert and --tls-key go together")}
	}
	if f.tlsCert != "" {
		pair, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("load client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// headerTransport adds fixed headers to every request, the bearer token
// (Authorization) only to requests for origin, the API's scheme and host: a
// redirect to another host, or from https to http, never carries it.
type headerTransport struct {
	header http.Header
	origin string
	next   http.RoundTripper
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, vs := range t.header {
		r.Header[k] = vs
	}
	if r.URL.Scheme+"://"+r.URL.Host != t.origin {
		r.Header.Del("Authorization")
	}
	return t.next.RoundTrip(r)
}
