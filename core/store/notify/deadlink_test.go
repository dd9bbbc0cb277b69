package notify_test

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/store/notify"
	"github.com/converge-run/converge/db/pgtest"
)

// A LISTEN connection whose network died without a reset would wait for a
// notification forever (TCP keepalive notices after minutes, or never):
// the listener probes a connection that has been silent for ProbeIdle, and
// one that does not answer within ProbeTimeout is re-made, with a
// Reconnected event to every subscriber.
func TestListener_ReconnectsFromASilentlyDeadConnection(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url := pgtest.URL(t)
	direct := pgtest.PoolFor(t, url)
	pool, link := pgtest.PoolThrough(t, url, 4)

	l := notify.NewListener(pool, zerolog.Nop())
	l.ProbeIdle, l.ProbeTimeout = 100*time.Millisecond, 500*time.Millisecond
	s := l.Subscribe("work_ready", 4)
	done := make(chan struct{})
	go func() { defer close(done); _ = l.Run(ctx) }()
	defer func() { cancel(); <-done }() // before the pool closes: the listener holds a connection
	<-l.Ready()

	link.Cut()
	require.True(t, recv(t, s, "the reconnect").Reconnected, "subscribers are told to re-read")
	_, err := direct.Exec(ctx, "SELECT pg_notify('work_ready', 'after')")
	require.NoError(t, err)
	require.Equal(t, "after", recv(t, s, "a notification after the reconnect").Payload)
}
