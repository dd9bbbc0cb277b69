// Package loopback finds free TCP ports for processes a harness starts and
// must address before they listen (a converge child's LISTEN_ADDR, its
// peers' BROKER_URL).
//
// Asking the kernel for port 0 and closing the listener again hands out a
// port from the ephemeral range, the same range every outgoing connection
// is bound from: in the moment before the child binds it, a connection to
// Postgres or a peer may take it, and the child fails with "address already
// in use" (seen in the CI's chaos smoke). The ports handed out here lie
// below that range, which the kernel never picks for a connection.
package loopback

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// below is the lowest port handed out; the highest is one under the
// ephemeral range.
const below = 10000

// given are the ports this process handed out: a port is given once. Its
// user binds it only later (a child process, after its start-up), and
// until then it is free to bind again here.
var given = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreePort returns a TCP port free on host ("127.0.0.1" when empty) at the
// time of the call and never handed out before by this process, outside the
// kernel's ephemeral range when the range leaves room below it; otherwise
// one the kernel picks.
func FreePort(host string) (int, error) {
	if host == "" {
		host = "127.0.0.1"
	}
	lo, hi := below, ephemeralLow()
	if hi <= below+1000 {
		lo, hi = 0, 0 // no room below the ephemeral range: the kernel picks
	}
	return freePortIn(host, lo, hi)
}

// freePortIn is FreePort drawing from [lo, hi): a port free on host and not
// handed out before, or, when 64 draws find none (or the range is empty),
// one the kernel picks.
func freePortIn(host string, lo, hi int) (int, error) {
	given.Lock()
	defer given.Unlock()
	if hi > lo {
		for range 64 {
			p := lo + rand.IntN(hi-lo)
			if given.ports[p] {
				continue
			}
			if l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p))); err == nil {
				_ = l.Close()
				given.ports[p] = true
				return p, nil
			}
		}
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("find a free port on %s: %w", host, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Addr is FreePort on 127.0.0.1, as host:port.
func Addr() (string, error) {
	p, err := FreePort("")
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// ip_local_port_range; 32768, its default, elsewhere or when unreadable).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return lo
}
