package cli_test

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// tcpProxy forwards TCP connections to a target and can cut them all, to
// drop a client's websocket the way a network failure or a pod restart
// does.
type tcpProxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	cuts   int
	paused bool
	// refusedPOSTs counts the HTTP POSTs (GraphQL queries and mutations,
	// not websocket upgrades) refused while paused.
	refusedPOSTs int
	// upgradesRefused refuses the websocket upgrades (a GET), counted in
	// refusedGETs, and forwards everything else.
	upgradesRefused bool
	refusedGETs     int
	closed          bool
	wg              sync.WaitGroup
}

func startProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &tcpProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// URL is the proxy's http:// base URL.
func (p *tcpProxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *tcpProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		paused, upgradesRefused := p.paused, p.upgradesRefused
		p.mu.Unlock()
		switch {
		case paused: // the network is down: refuse
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.refuse(c)
			}()
		case upgradesRefused:
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.refuseUpgrade(c)
			}()
		default:
			p.forward(c, nil)
		}
	}
}

// forward pipes c to a new connection to the target, which gets sent
// first.
func (p *tcpProxy) forward(c net.Conn, sent []byte) {
	up, err := net.Dial("tcp", p.target)
	if err == nil && len(sent) > 0 {
		_, err = up.Write(sent)
	}
	if err != nil {
		_ = c.Close()
		if up != nil {
			_ = up.Close()
		}
		return
	}
	p.mu.Lock()
	if p.closed { // after close's cut: nothing would end these pipes
		p.mu.Unlock()
		_, _ = c.Close(), up.Close()
		return
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.wg.Add(2)
	p.mu.Unlock()
	go p.pipe(c, up)
	go p.pipe(up, c)
}

// refuseUpgrade closes c when it opens with a GET (a websocket upgrade),
// counting it, and forwards it otherwise.
func (p *tcpProxy) refuseUpgrade(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	var b [4]byte
	n, err := io.ReadFull(c, b[:])
	_ = c.SetReadDeadline(time.Time{})
	if err != nil || string(b[:n]) == "GET " {
		_ = c.Close()
		p.mu.Lock()
		p.refusedGETs++
		p.mu.Unlock()
		return
	}
	p.forward(c, b[:n])
}

// refuseUpgrades refuses the websocket upgrades (on) or stops (off).
func (p *tcpProxy) refuseUpgrades(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.upgradesRefused = on
}

// refusedGETCount is how many websocket upgrades were refused.
func (p *tcpProxy) refusedGETCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refusedGETs
}

func (p *tcpProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// refuse reads what c sends first and closes it, counting a POST.
func (p *tcpProxy) refuse(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	var b [4]byte
	n, _ := io.ReadFull(c, b[:])
	_ = c.Close()
	if string(b[:n]) == "POST" {
		p.mu.Lock()
		p.refusedPOSTs++
		p.mu.Unlock()
	}
}

// refusedPOSTCount is how many POSTs were refused while paused.
func (p *tcpProxy) refusedPOSTCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refusedPOSTs
}

// cut closes every open connection (new ones are still accepted).
func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cuts++
	for c := range p.conns {
		_ = c.Close()
	}
}

// pause cuts every connection and refuses new ones until resume.
func (p *tcpProxy) pause() {
	p.mu.Lock()
	p.paused = true
	p.mu.Unlock()
	p.cut()
}

func (p *tcpProxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = false
}

func (p *tcpProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.cut()
	p.wg.Wait()
}
