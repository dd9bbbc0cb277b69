// Package transport holds the HTTP/2 plumbing the broker and workers share
// for Connect: cleartext HTTP/2 (h2c) for http:// URLs and TLS (optionally
// mutual) for https://. Bidirectional streams need HTTP/2 end to end.
package transport

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"
)

// ClientFor returns an HTTP client for a Connect base URL: h2c for http://,
// HTTP/2 over TLS for https:// (tlsCfg may carry a client certificate and the
// CA to pin; nil = system roots, no client cert).
func ClientFor(baseURL string, tlsCfg *tls.Config) (*http.Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("parse broker url %q: %w", baseURL, err)
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		DialContext:         dialer.DialContext,
		ForceAttemptHTTP2:   true,
		TLSHandshakeTimeout: 10 * time.Second,
		IdleConnTimeout:     90 * time.Second,
		// Streams are long-lived: ping dead peers instead of hanging forever.
		HTTP2: &http.HTTP2Config{SendPingTimeout: 15 * time.Second, PingTimeout: 15 * time.Second},
	}
	var p http.Protocols
	switch u.Scheme {
	case "http":
		p.SetUnencryptedHTTP2(true)
	case "https":
		p.SetHTTP2(true)
		if tlsCfg != nil {
			tr.TLSClientConfig = tlsCfg.Clone()
		}
	default:
		return nil, fmt.Errorf("broker url %q: scheme must be http or https", baseURL)
	}
	tr.Protocols = &p
	return &http.Client{Transport: envelopeFrames{base: tr}}, nil
}

// ServerProtocols enables HTTP/1.1 and HTTP/2, including cleartext HTTP/2
// (h2c) so plain-mode Connect bidi streams work without TLS.
func ServerProtocols() *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	return &p
}
