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
	wg           sync.WaitGroup
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
		paused := p.paused
		p.mu.Unlock()
		if paused { // the network is down: refuse
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.refuse(c)
			}()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
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
	_ = p.ln.Close()
	p.cut()
	p.wg.Wait()
}
