package tlsreload

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// ClientCheck verifies a connection's client certificate again on every
// request, against the client CA bundle and the clock of that moment. The
// handshake verified it once, but a connection outlives both: HTTP/2
// clients keep theirs open for as long as they talk (a worker for days),
// so without this a certificate whose CA was rotated out of the bundle, or
// that has expired since, kept opening sessions on the connection it
// already had. A request whose certificate no longer verifies is refused
// (401) and its connection closed (HTTP/2: GOAWAY), so the client dials
// again and presents its current certificate; the streams already open on
// it end as they would have.
//
// The verdict is kept per connection until the bundle changes or the
// chain's first expiry, so a request pays a verification only then.
type ClientCheck struct{ r *Reloader }

// ClientCheck is the per-request check of the client certificates this
// reloader's CA bundle verifies; nil without a CA file (no mutual TLS).
func (r *Reloader) ClientCheck() *ClientCheck {
	if r == nil || r.files.CAFile == "" {
		return nil
	}
	return &ClientCheck{r: r}
}

// Verify verifies the client certificate of a connection's handshake
// against the bundle of now; until is when the first certificate of its
// chain expires. A nil ClientCheck verifies nothing (no mutual TLS).
func (c *ClientCheck) Verify(cs *tls.ConnectionState) (until time.Time, err error) {
	if c == nil {
		return time.Time{}, nil
	}
	return verifyClient(cs, c.r.cur.Load().pool, time.Now())
}

// Changed is closed the next time the TLS material changes (nil, never
// closed, for a nil ClientCheck): what outlives a request — a worker's
// session — verifies its certificate again then (Verify).
func (c *ClientCheck) Changed() <-chan struct{} {
	if c == nil {
		return nil
	}
	return *c.r.changed.Load()
}

// Watch returns the verification error once the client certificate of cs
// no longer verifies, checking again whenever the material changes and when
// the chain expires; nil when ctx ends first. What outlives the request that
// opened it over the connection — a worker's session, an API websocket —
// watches this way and ends when it returns an error. A nil ClientCheck
// waits for ctx.
func (c *ClientCheck) Watch(ctx context.Context, cs *tls.ConnectionState) error {
	if c == nil {
		<-ctx.Done()
		return nil
	}
	for {
		changed := c.Changed()
		until, err := c.Verify(cs)
		if err != nil {
			return err
		}
		expiry := time.NewTimer(time.Until(until) + time.Second)
		select {
		case <-changed:
		case <-expiry.C:
		case <-ctx.Done():
			expiry.Stop()
			return nil
		}
		expiry.Stop()
	}
}

type verdictKey struct{}

// verdict is one connection's last check.
type verdict struct {
	mu    sync.Mutex
	of    *material // the bundle it was checked against
	until time.Time // when the chain's first certificate expires
	err   error
}

// ConnContext is the http.Server's ConnContext: it gives each connection
// its verdict.
func (c *ClientCheck) ConnContext(ctx context.Context, _ net.Conn) context.Context {
	return context.WithValue(ctx, verdictKey{}, &verdict{})
}

// Handler refuses the requests whose client certificate no longer verifies.
func (c *ClientCheck) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			next.ServeHTTP(w, r)
			return
		}
		if err := c.check(r); err != nil {
			w.Header().Set("Connection", "close") // HTTP/2: a GOAWAY once its streams end
			http.Error(w, err.Error()+": reconnect with a current certificate", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (c *ClientCheck) check(r *http.Request) error {
	v, _ := r.Context().Value(verdictKey{}).(*verdict)
	if v == nil {
		v = &verdict{}
	}
	m, now := c.r.cur.Load(), time.Now()
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.of == m && (v.err != nil || now.Before(v.until)) {
		return v.err
	}
	v.of = m
	v.until, v.err = verifyClient(r.TLS, m.pool, now)
	if v.err != nil {
		c.r.log.Warn().Err(v.err).Str("peer", r.RemoteAddr).Msg("client certificate refused on an open connection")
	}
	return v.err
}

// verifyClient verifies the certificate the handshake verified again; until
// is when the first certificate of the chain it verified by expires.
func verifyClient(cs *tls.ConnectionState, pool *x509.CertPool, now time.Time) (until time.Time, err error) {
	if len(cs.PeerCertificates) == 0 {
		return time.Time{}, errors.New("no client certificate")
	}
	leaf := cs.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, ic := range cs.PeerCertificates[1:] {
		inter.AddCert(ic)
	}
	chains, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		return time.Time{}, fmt.Errorf("client certificate %q no longer verifies against TLS_CLIENT_CA_FILE: %w",
			leaf.Subject.CommonName, err)
	}
	until = leaf.NotAfter
	for _, cert := range chains[0] {
		if cert.NotAfter.Before(until) {
			until = cert.NotAfter
		}
	}
	return until, nil
}
