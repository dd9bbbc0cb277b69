package app_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app"
	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/db/pgtest"
)

// freezer is a TCP proxy to Postgres that can go silent as a frozen or
// partitioned database does: once frozen it forwards nothing either way and
// answers nothing on new connections, but closes none (no reset, no EOF:
// every wait on the database is a wait for a reply that never comes).
type freezer struct {
	ln     net.Listener
	frozen atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

// newFreezer proxies to the database of dbURL and returns the URL through it.
func newFreezer(t *testing.T, dbURL string) (*freezer, string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &freezer{ln: ln}
	target := u.Host
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.track(c)
			if f.frozen.Load() {
				continue // accepted by the kernel's backlog, answered by nobody
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			f.track(up)
			f.wg.Add(2)
			go f.pump(up, c)
			go f.pump(c, up)
		}
	}()
	t.Cleanup(f.close)
	u.Host = ln.Addr().String()
	return f, u.String()
}

func (f *freezer) track(c net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.conns = append(f.conns, c)
}

// pump copies src to dst until src ends, dropping what it reads once frozen.
func (f *freezer) pump(dst, src net.Conn) {
	defer f.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !f.frozen.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) || !f.frozen.Load() {
				dst.Close()
			}
			return
		}
	}
}

func (f *freezer) freeze() { f.frozen.Store(true) }

// close ends the proxy and every connection through it.
func (f *freezer) close() {
	f.ln.Close()
	f.mu.Lock()
	for _, c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// A member shut down while its database does not answer (frozen, or cut
// off by a partition that drops packets) exits within its shutdown budget:
// the deregistration and closing the connection pools get
// app.TeardownWithin together (the process's exit closes the connections). Closing the pools waited for the driver's abandoned pings
// and cancel requests to time out, over a minute, past Kubernetes'
// terminationGracePeriodSeconds.
func TestProcess_ShutdownWithAnUnansweringDatabaseEndsWithinItsBudget(t *testing.T) {
	t.Parallel()
	f, dbURL := newFreezer(t, pgtest.URL(t))
	cfg := config.Defaults()
	cfg.DatabaseURL, cfg.ListenAddr, cfg.HealthAddr = dbURL, "127.0.0.1:0", "127.0.0.1:0"
	cfg.HeartbeatEvery = time.Second
	require.NoError(t, cfg.Validate())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, done := runConverge(t, ctx, cfg)
	base := apptest.APIURL(p)
	f.freeze()
	apptest.WaitFor(t, 30*time.Second, "the member sees the database gone", func() bool {
		code, _ := probe(t, base, "/readyz")
		return code == 503
	})

	const budget = app.TeardownWithin + 5*time.Second // deregistration and pools, slack
	began := time.Now()
	cancel()
	select {
	case err := <-done:
		t.Logf("stopped %s after the signal", time.Since(began))
		require.NoError(t, err)
	case <-time.After(budget):
		t.Fatalf("still shutting down %s after the signal", budget)
	}
}
