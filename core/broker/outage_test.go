package broker

import (
	"context"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/lifecycle"
	"github.com/converge-run/converge/core/testlog"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// quietOutage is an outage reporter and a service log that share one sink:
// what an outage makes the broker log, all of it.
func quietOutage(t *testing.T) (*engine.Outage, zerolog.Logger, *testlog.Buffer) {
	t.Helper()
	buf := &testlog.Buffer{}
	log := zerolog.New(buf)
	return &engine.Outage{Log: log}, log, buf
}

// While the database is unreachable, the broker's database reads and writes
// that repeat — a worker's providerconfig read, the lease-key re-reads, a
// reactor delivery's ack — are the process's outage: one WARN when it
// starts, nothing per failure.
func TestBroker_AnOutageIsLoggedOnce(t *testing.T) {
	t.Parallel()
	const tries = 5

	t.Run("ProviderConfigReads", func(t *testing.T) {
		t.Parallel()
		outage, log, buf := quietOutage(t)
		b := setupHandlerAuth(t, nil, func(h *workerService) { h.outage, h.log = outage, log })
		b.configs.DefaultFn = func(context.Context, string) (store.ProviderConfig, bool, error) {
			return store.ProviderConfig{}, false, syscall.ECONNREFUSED
		}
		for range tries {
			_, err := b.clients()["Connect"].GetProviderConfig(context.Background(),
				connect.NewRequest(&workerv1.GetProviderConfigRequest{Kind: "vpc"}))
			require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "the worker is told to retry")
		}
		require.Equal(t, 1, buf.Count(`"level":`), "one line for the outage:\n%s", buf.String())
		require.Equal(t, 1, buf.Count("database unreachable"))
	})

	t.Run("LeaseKeyReads", func(t *testing.T) {
		t.Parallel()
		outage, log, buf := quietOutage(t)
		reads := make(chan struct{}, tries)
		l := newLeaseKeys(nil)
		l.every, l.log, l.outage = time.Millisecond, log, outage
		l.source = func(context.Context) ([][]byte, error) {
			select {
			case reads <- struct{}{}:
			default:
			}
			return nil, syscall.ECONNREFUSED
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = l.Run(ctx)
		}()
		for range tries {
			select {
			case <-reads:
			case <-time.After(10 * time.Second):
				t.Fatal("the lease keys were not re-read")
			}
		}
		cancel()
		<-done
		l.reloaded = time.Time{} // a secret no key verifies: a re-read is due
		require.False(t, l.reload())
		require.Equal(t, 1, buf.Count(`"level":`), "one line for the outage:\n%s", buf.String())
	})

	t.Run("ReactorAcks", func(t *testing.T) {
		t.Parallel()
		outage, log, buf := quietOutage(t)
		r, _, ds, _ := setupReactors(t)
		r.outage, r.log = outage, log
		ds.AckFn = func(context.Context, lifecycle.Delivery) (bool, error) { return false, syscall.ECONNREFUSED }
		for range tries {
			require.False(t, r.deliver(context.Background(), delivery(`{"id":"x"}`)), "not acked: re-armed when its claim lapses")
		}
		require.Equal(t, 1, buf.Count(`"level":`), "one line for the outage:\n%s", buf.String())
	})
}
