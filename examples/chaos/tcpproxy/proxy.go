// Package tcpproxy is the chaos suite's fault injector: a TCP proxy between
// a component and what it dials (Postgres, a broker) that can pause the
// traffic both ways (a partition: nothing is lost, bytes wait in socket
// buffers, the stream resumes intact when it heals) and reset every
// connection (RST, as a crashed middlebox or a failover would).
package tcpproxy

import (
	"errors"
	"io"
	"net"
	"sync"
)

// Proxy forwards connections accepted on its listener to Target.
type Proxy struct {
	Target string

	ln     net.Listener
	mu     sync.Mutex
	paused bool
	heal   chan struct{} // closed when a pause ends
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// Start listens on a free loopback port.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Target: target, ln: ln, conns: map[net.Conn]struct{}{}, heal: make(chan struct{})}
	close(p.heal)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listen address (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's listen port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Pause stops forwarding in both directions (and holds new connections
// before they reach the target) until Heal.
func (p *Proxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.paused {
		p.paused, p.heal = true, make(chan struct{})
	}
}

// Heal resumes forwarding.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused {
		p.paused = false
		close(p.heal)
	}
}

// Reset closes every open connection with an RST.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}

// Close stops the proxy and every connection.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.Heal()
	p.Reset()
	p.wg.Wait()
}

func (p *Proxy) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.heal
}

func (p *Proxy) track(c net.Conn, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	p.track(client, true)
	defer p.track(client, false)
	defer client.Close()
	<-p.gate() // a connection made during a partition waits for the heal
	server, err := net.Dial("tcp", p.Target)
	if err != nil {
		return
	}
	p.track(server, true)
	defer p.track(server, false)
	defer server.Close()
	done := make(chan struct{}, 2)
	go func() { p.pipe(server, client); done <- struct{}{} }()
	go func() { p.pipe(client, server); done <- struct{}{} }()
	<-done
}

// pipe copies src to dst, holding each chunk while the proxy is paused.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			<-p.gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				_ = dst.Close()
			}
			if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			return
		}
	}
}
