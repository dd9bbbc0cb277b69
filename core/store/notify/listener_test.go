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

func TestMain(m *testing.M) { pgtest.Main(m) }

func recv(t *testing.T, s *notify.Subscription, what string) notify.Event {
	t.Helper()
	select {
	case e := <-s.C:
		return e
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		return notify.Event{}
	}
}

func TestListener_FansOutAndSurvivesATerminatedConnection(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := pgtest.Pool(t)
	l := notify.NewListener(pool, zerolog.Nop())
	a := l.Subscribe("work_ready", 4)
	b := l.Subscribe("work_ready", 4)
	other := l.Subscribe("outbox_ready", 4)
	done := make(chan struct{})
	go func() { defer close(done); _ = l.Run(ctx) }()
	<-l.Ready()

	_, err := pool.Exec(ctx, "SELECT pg_notify('work_ready', 'p1')")
	require.NoError(t, err)
	require.Equal(t, "p1", recv(t, a, "a").Payload)
	require.Equal(t, "p1", recv(t, b, "b").Payload, "every subscriber of the channel gets it")
	select {
	case e := <-other.C:
		t.Fatalf("a subscriber of another channel got %+v", e)
	default:
	}

	// A channel subscribed while running is LISTENed on the live connection.
	late := l.Subscribe("cluster_changed", 1)
	require.Eventually(t, func() bool {
		_, err := pool.Exec(ctx, "SELECT pg_notify('cluster_changed', '')")
		require.NoError(t, err)
		select {
		case <-late.C:
			return true
		default:
			return false
		}
	}, 10*time.Second, 20*time.Millisecond)

	// Kill the LISTEN backend: the listener reconnects and tells everyone to re-read.
	_, err = pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN %' AND pid <> pg_backend_pid()`)
	require.NoError(t, err)
	require.True(t, recv(t, a, "reconnect").Reconnected)
	require.True(t, recv(t, other, "reconnect").Reconnected)
	require.EqualValues(t, 1, l.Reconnects())

	_, err = pool.Exec(ctx, "SELECT pg_notify('outbox_ready', 'after')")
	require.NoError(t, err)
	require.Equal(t, "after", recv(t, other, "after reconnect").Payload)

	cancel()
	<-done
}

func TestListener_FullBufferCoalescesAndMarksLost(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := pgtest.Pool(t)
	l := notify.NewListener(pool, zerolog.Nop())
	s := l.Subscribe("outbox_ready", 1)
	go func() { _ = l.Run(ctx) }()
	<-l.Ready()
	_, err := pool.Exec(ctx, "SELECT pg_notify('outbox_ready', '1'); SELECT pg_notify('outbox_ready', '2'); SELECT pg_notify('outbox_ready', '3')")
	require.NoError(t, err)
	require.Equal(t, "1", recv(t, s, "first").Payload)
	require.Eventually(t, s.TakeLost, 10*time.Second, 10*time.Millisecond, "overflow is reported so the consumer re-reads")
	require.False(t, s.TakeLost(), "TakeLost clears the flag")
}

// Subscribe returns before its channel is LISTENed; Listening says when it
// is, and from then on a notification reaches the subscriber. A channel
// already LISTENed is listening at once.
func TestListener_ListeningClosesOnceTheChannelIsListened(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := pgtest.Pool(t)
	l := notify.NewListener(pool, zerolog.Nop())
	early := l.Subscribe("work_ready", 1)
	select {
	case <-early.Listening():
		t.Fatal("listening before the listener ran")
	default:
	}
	go func() { _ = l.Run(ctx) }()
	late := l.Subscribe("cluster_changed", 1)
	for _, s := range []*notify.Subscription{early, late} {
		select {
		case <-s.Listening():
		case <-time.After(10 * time.Second):
			t.Fatal("the channel was never LISTENed")
		}
	}
	_, err := pool.Exec(ctx, "SELECT pg_notify('cluster_changed', 'c1')")
	require.NoError(t, err)
	require.Equal(t, "c1", recv(t, late, "a notification sent once listening").Payload)
	select {
	case <-l.Subscribe("cluster_changed", 1).Listening():
	default:
		t.Fatal("a channel already LISTENed is listening at once")
	}
}
