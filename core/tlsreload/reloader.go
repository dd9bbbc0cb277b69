// Package tlsreload keeps TLS material fresh without restarts: it re-reads
// the certificate, key and CA files every interval, compares them by
// content, and atomically swaps the in-memory material only when it really
// changed. A half-written file mid-rotation fails to parse; the last good
// material stays in use until the write completes. Polling rather than
// inotify is deliberate: a Kubernetes secret mount rotates by an atomic
// symlink swap of its ..data directory, which leaf-file watches miss.
package tlsreload

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/converge-run/converge/core/engine"

	"github.com/rs/zerolog"
)

// Files names the PEM files to watch. CertFile/KeyFile are this side's
// keypair (server, or client for mTLS); CAFile is the CA bundle to verify the
// peer with (the client CA on a server, the server CA on a client).
type Files struct {
	CertFile string
	KeyFile  string
	CAFile   string
}

type material struct {
	cert    *tls.Certificate
	pool    *x509.CertPool
	certRaw []byte
	keyRaw  []byte
	caRaw   []byte
}

// Reloader holds the current material and refreshes it.
type Reloader struct {
	files    Files
	interval time.Duration
	log      zerolog.Logger
	cur      atomic.Pointer[material]
	mu       sync.Mutex
	swaps    atomic.Int64
	// changed is closed, and replaced, when the material changes.
	changed atomic.Pointer[chan struct{}]
}

// MinInterval is the shortest reload cadence a process accepts (converge's
// and the Go worker SDK's TLS_RELOAD_INTERVAL): each reload reads every
// certificate, key and token file.
const MinInterval = time.Second

// New loads the files once (failing fast when they are unusable) and
// returns a reloader that refreshes every interval once Run is started.
func New(files Files, interval time.Duration, log zerolog.Logger) (*Reloader, error) {
	if interval <= 0 {
		interval = 3 * time.Minute
	}
	r := &Reloader{files: files, interval: interval, log: log.With().Str("component", "tls-reload").Logger()}
	m, err := r.load()
	if err != nil {
		return nil, err
	}
	r.cur.Store(m)
	ch := make(chan struct{})
	r.changed.Store(&ch)
	return r, nil
}

// Swaps counts material changes picked up since New.
func (r *Reloader) Swaps() int64 { return r.swaps.Load() }

func (r *Reloader) load() (*material, error) {
	m := &material{}
	var err error
	if r.files.CertFile != "" || r.files.KeyFile != "" {
		if m.certRaw, err = os.ReadFile(r.files.CertFile); err != nil {
			return nil, fmt.Errorf("read certificate %s: %w", r.files.CertFile, err)
		}
		if m.keyRaw, err = os.ReadFile(r.files.KeyFile); err != nil {
			return nil, fmt.Errorf("read key %s: %w", r.files.KeyFile, err)
		}
		c, err := tls.X509KeyPair(m.certRaw, m.keyRaw)
		if err != nil {
			return nil, fmt.Errorf("parse keypair %s + %s: %w", r.files.CertFile, r.files.KeyFile, err)
		}
		m.cert = &c
	}
	if r.files.CAFile != "" {
		if m.caRaw, err = os.ReadFile(r.files.CAFile); err != nil {
			return nil, fmt.Errorf("read CA bundle %s: %w", r.files.CAFile, err)
		}
		m.pool = x509.NewCertPool()
		if !m.pool.AppendCertsFromPEM(m.caRaw) {
			return nil, fmt.Errorf("CA bundle %s holds no PEM certificate", r.files.CAFile)
		}
	}
	return m, nil
}

// Reload re-reads the files now; it swaps only on a content change and keeps
// the last good material when the new files do not parse.
func (r *Reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, err := r.load()
	if err != nil {
		return err
	}
	old := r.cur.Load()
	if bytes.Equal(old.certRaw, m.certRaw) && bytes.Equal(old.keyRaw, m.keyRaw) && bytes.Equal(old.caRaw, m.caRaw) {
		return nil
	}
	r.cur.Store(m)
	r.swaps.Add(1)
	next := make(chan struct{})
	close(*r.changed.Swap(&next))
	r.log.Info().Str("cert", r.files.CertFile).Str("ca", r.files.CAFile).Msg("TLS material rotated")
	return nil
}

// Run refreshes every interval until ctx ends.
func (r *Reloader) Run(ctx context.Context) error {
	return engine.Every(ctx, r.interval, func() {
		if err := r.Reload(); err != nil {
			r.log.Warn().Err(err).Msg("TLS files unreadable (mid-rotation?); keeping the last good material")
		}
	})
}

// Name implements engine.Duty.
func (r *Reloader) Name() string { return "tls-reload" }

// ServerConfig is a server tls.Config that always serves the current
// keypair; with a CA file it requires and verifies client certificates
// against the current bundle (mutual TLS).
func (r *Reloader) ServerConfig() *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		m := r.cur.Load()
		if m.cert == nil {
			return nil, errors.New("no server certificate loaded")
		}
		c := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"},
			Certificates: []tls.Certificate{*m.cert}}
		if m.pool != nil {
			c.ClientAuth = tls.RequireAndVerifyClientCert
			c.ClientCAs = m.pool
		}
		return c, nil
	}
	return base
}

// ClientConfig is a client tls.Config presenting the current keypair (if
// any) and verifying the server against the current CA bundle (if any; else
// the system roots).
func (r *Reloader) ClientConfig() *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if r.files.CertFile != "" {
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return r.cur.Load().cert, nil
		}
	}
	if r.files.CAFile != "" {
		// Verify by hand so a rotated CA applies to new handshakes.
		c.InsecureSkipVerify = true //nolint:gosec // verified below against the live pool
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("server presented no certificate")
			}
			inter := x509.NewCertPool()
			for _, ic := range cs.PeerCertificates[1:] {
				inter.AddCert(ic)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
				Roots: r.cur.Load().pool, Intermediates: inter, DNSName: cs.ServerName,
			})
			return err
		}
	}
	return c
}
