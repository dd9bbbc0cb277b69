package app_test

import (
	"context"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app"
	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store/membership"
	"github.com/converge-run/converge/core/worker"
)

// balancer forwards each TCP connection to its targets in turn, as a
// Service in front of the brokers does; a target added later takes the
// next connection.
type balancer struct {
	mu      sync.Mutex
	targets []string
	next    int
	conns   atomic.Int32 // the connections it took
}

func (b *balancer) add(target string) {
	b.mu.Lock()
	b.targets = append(b.targets, target)
	b.next = len(b.targets) - 1
	b.mu.Unlock()
}

func (b *balancer) pick() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.targets[b.next%len(b.targets)]
	b.next++
	return t
}

// serve listens on a local port and returns its address.
func (b *balancer) serve(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			b.conns.Add(1)
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", b.pick())
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c) }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	return l.Addr().String()
}

func hostOf(t *testing.T, p *app.Process) string {
	t.Helper()
	u, err := url.Parse(apptest.BrokerURL(p))
	require.NoError(t, err)
	return u.Host
}

// Two workers connected through a balancer while one broker was up; a
// second broker joins. The first now serves more than its share, ends one
// session once its stages finish (a planned end, well before
// WORKER_SESSION_MAX_AGE), and the worker reconnects through the balancer to
// the broker that joined. Both membership rows report one worker each, and
// resources applied throughout are each reconciled exactly once.
func TestSpread_WorkersMoveToABrokerThatJoins(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{Tune: fastLeases})
	first := s.Process
	require.Equal(t, 30*time.Minute, first.Broker.SessionMaxAge, "the age alone would not move a worker within the test")
	applyManifest(t, first.Store, leafKind)
	lb := &balancer{}
	lb.add(hostOf(t, first))
	via := "http://" + lb.serve(t)
	planned := &lineCounter{phrase: []byte("broker ended the session")}
	lost := &lineCounter{phrase: []byte("broker stream lost")}
	var calls leafCalls
	for range 2 {
		apptest.StartWorker(t, via, worker.Options{Logger: zerolog.New(zerolog.MultiLevelWriter(planned, lost))},
			calls.provider())
	}
	apptest.WaitFor(t, 30*time.Second, "both workers on the first broker", func() bool { return first.Broker.Workers() == 2 })

	const n = 20
	apply := func(from int) {
		for i := from; i < from+n/2; i++ {
			applyResource(t, first.Store, "leaf", "spread-"+strconv.Itoa(i), `{}`)
		}
	}
	apply(0)
	second, _ := s.StartProcess(config.RoleBroker)
	lb.add(hostOf(t, second))
	apply(n / 2)

	apptest.WaitFor(t, 30*time.Second, "one worker on each broker", func() bool {
		return first.Broker.Workers() == 1 && second.Broker.Workers() == 1
	})
	apptest.WaitFor(t, 30*time.Second, "each broker's row reports one worker", func() bool {
		rows, err := first.Members.ListLive(context.Background(), time.Minute)
		if err != nil {
			return false
		}
		brokers := 0
		for _, m := range rows {
			if m.Role == membership.RoleControl {
				continue
			}
			if m.Workers != 1 {
				return false
			}
			brokers++
		}
		return brokers == 2
	})
	require.Equal(t, 1, planned.count(), "one session ended, as planned")
	require.Zero(t, lost.count(), "a planned end is not logged as a lost stream")
	for i := range n {
		apptest.WaitPhase(t, first.Store, "leaf", "spread-"+strconv.Itoa(i), resource.PhaseReady, 60*time.Second)
	}
	calls.requireEachOnce(t, n)
}
