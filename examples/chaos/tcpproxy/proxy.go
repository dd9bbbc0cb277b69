// Package tcpproxy is the chaos suite's fault injector: a TCP proxy between
// a component and what it dials (Postgres, a broker) that can pause the
// traffic both ways (a partition: nothing is lost, bytes wait in socket
// buffers, the stream resumes intact when it heals), delay it (each
// direction's bytes held back by a latency, in order: a slow or distant
// link) and reset every connection (RST, as a crashed middlebox or a
// failover would).
package tcpproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Proxy forwards connections accepted on its listener to Target.
type Proxy struct {
	Target string

	ln     net.Listener
	mu     sync.Mutex
	paused bool
	heal   chan struct{} // closed when a pause ends
	delay  time.Duration
	// redelay is closed (and replaced) whenever the delay changes, so a
	// chunk being held re-reads it.
	redelay chan struct{}
	conns   map[net.Conn]struct{}
	closed  bool // Close began: a connection tracked from now on is reset at once
	wg      sync.WaitGroup
}

// Start listens on a free loopback port.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Target: target, ln: ln, conns: map[net.Conn]struct{}{},
		heal: make(chan struct{}), redelay: make(chan struct{})}
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

// Delay holds every byte back by d, in each direction, from the moment
// the proxy read it: a link with d of one-way latency (2d added to a round
// trip). Bytes keep their order. Delay(0) or Heal ends it; bytes held at
// that moment are released at once (a bigger d holds them longer).
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d != p.delay {
		p.delay = max(d, 0)
		close(p.redelay)
		p.redelay = make(chan struct{})
	}
}

// Heal resumes forwarding: it ends a pause and a delay.
func (p *Proxy) Heal() {
	p.Delay(0)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused {
		p.paused = false
		close(p.heal)
	}
}

// Reset closes every open connection with an RST, to both ends: the
// component sees its connection reset and dials again.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		abort(c)
	}
}

// abort closes c with an RST instead of a FIN.
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// Close stops the proxy and every connection, and waits for its
// goroutines. A connection accepted while Close runs is reset too.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.Heal()
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.Reset()
	p.wg.Wait()
}

func (p *Proxy) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.heal
}

func (p *Proxy) currentDelay() (time.Duration, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delay, p.redelay
}

// hold waits until read+delay, re-reading the delay when it changes.
func (p *Proxy) hold(read time.Time) {
	for {
		d, changed := p.currentDelay()
		wait := time.Until(read.Add(d))
		if wait <= 0 {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
			return
		case <-changed:
			t.Stop()
		}
	}
}

// track adds c to the connections Reset and Close end (on) or removes it;
// a connection tracked once Close began is reset at once.
func (p *Proxy) track(c net.Conn, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case !on:
		delete(p.conns, c)
	case p.closed:
		abort(c)
	default:
		p.conns[c] = struct{}{}
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

// serve forwards one connection both ways until both directions end. A
// direction that ends with EOF half-closes its destination (the other keeps
// flowing); one that ends with an error (a reset, a failed write) resets
// both connections, so a reset on one side reaches the other as a reset
// (also when Reset caught the connection before its target was dialed). A
// connection whose target cannot be dialed is reset.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	p.track(client, true)
	defer p.track(client, false)
	defer client.Close()
	<-p.gate() // a connection made during a partition waits for the heal
	server, err := net.Dial("tcp", p.Target)
	if err != nil {
		// The target refused (a restarting Postgres): the client, already
		// connected to the proxy, gets a reset, the nearest a proxy comes
		// to a refusal; a FIN would read as a server that answered and hung
		// up.
		abort(client)
		return
	}
	p.track(server, true)
	defer p.track(server, false)
	defer server.Close()
	ended := make(chan error, 2)
	go func() { ended <- p.pipe(server, client) }()
	go func() { ended <- p.pipe(client, server) }()
	for range 2 {
		if err := <-ended; err != nil {
			abort(client)
			abort(server)
		}
	}
}

// chunk is what one read from a connection returned, and when.
type chunk struct {
	b    []byte
	read time.Time
	err  error // the read's error: the last chunk of the direction
}

// pipe copies src to dst: a reader stamps each chunk with the time it was
// read and queues it; the writer (this goroutine) holds each one for the
// delay and while the proxy is paused, then writes it. One queue per
// direction keeps the bytes in order. It returns nil when src ended with
// EOF (dst is half-closed in turn) and an error otherwise.
func (p *Proxy) pipe(dst, src net.Conn) error {
	q := make(chan chunk, 256)
	go func() {
		defer close(q)
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{b: append([]byte(nil), buf[:n]...), read: time.Now()}
			}
			if err != nil {
				q <- chunk{read: time.Now(), err: err}
				return
			}
		}
	}()
	defer func() {
		for range q { // a failed write: unblock the reader (src is closed)
		}
	}()
	for c := range q {
		p.hold(c.read)
		<-p.gate()
		if c.err != nil {
			if errors.Is(c.err, io.EOF) {
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
				return nil
			}
			return c.err
		}
		if _, err := dst.Write(c.b); err != nil {
			// dst was reset (or closed): src gets a reset too, and its
			// reader unblocks. A plain Close would end src's stream with
			// a FIN, and its peer would read a clean end of stream.
			abort(src)
			return err
		}
	}
	return nil
}
