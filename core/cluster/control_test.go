package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/cluster"
	"github.com/converge-run/converge/core/store/membership"
	"github.com/converge-run/converge/core/testlog"
)

// TestControlWatcher_ActsOnTheWakeDrainOnceThenKill: with the poll an hour
// away, the request's own cluster_changed wake makes the member act; a
// drain is acted on once (heartbeats and other wakes do not repeat it), a
// later kill is acted on and ends the watcher.
func TestControlWatcher_ActsOnTheWakeDrainOnceThenKill(t *testing.T) {
	t.Parallel()
	ctx, pool, l := clusterDB(t)
	reg := membership.New(pool)
	select {
	case <-l.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("listener not ready")
	}
	_, err := reg.Upsert(ctx, membership.Member{ID: "b-1", Role: membership.RoleBroker})
	require.NoError(t, err)

	drains, kills := make(chan membership.Request, 4), make(chan membership.Request, 4)
	w := &cluster.ControlWatcher{Registry: reg, ID: "b-1", Listener: l, Every: time.Hour, Log: zerolog.Nop(),
		OnDrain: func(r membership.Request) { drains <- r }, OnKill: func(r membership.Request) { kills <- r }}
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()

	// The request is repeated (idempotent) until the watcher has subscribed:
	// only a wake can deliver it within 2 s, the poll is an hour away.
	require.Eventually(t, func() bool {
		_, err := reg.RequestControl(ctx, "b-1", membership.ActionDrain, "admin:ops")
		require.NoError(t, err)
		select {
		case r := <-drains:
			require.Equal(t, "admin:ops", r.By)
			return true
		case <-time.After(2 * time.Second):
			return false
		}
	}, 20*time.Second, 10*time.Millisecond, "the drain is acted on through the wake")
	_, err = reg.Upsert(ctx, membership.Member{ID: "b-2", Role: membership.RoleBroker}) // another join wakes it again
	require.NoError(t, err)

	_, err = reg.RequestControl(ctx, "b-1", membership.ActionKill, "admin:oncall")
	require.NoError(t, err)
	select {
	case r := <-kills:
		require.Equal(t, membership.ActionKill, r.Action)
	case <-time.After(10 * time.Second):
		t.Fatal("the kill was not acted on")
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the watcher did not stop after the kill")
	}
	require.Empty(t, drains, "the drain was acted on once")
}

type controlReaderFn func(ctx context.Context, id string) (membership.Request, error)

func (f controlReaderFn) PendingRequest(ctx context.Context, id string) (membership.Request, error) {
	return f(ctx, id)
}

// The drain a member records on itself as it shuts down (membership.Store.
// Leave) is acted on like an admin's — the shard set emptied, the drain
// started, once — but not logged as an admin's request: the host said it
// is shutting down.
func TestControlWatcher_TheMembersOwnShutdownMarkIsNotLoggedAsARequest(t *testing.T) {
	t.Parallel()
	var logs testlog.Buffer
	drains := make(chan membership.Request, 4)
	read := make(chan struct{}, 8)
	w := &cluster.ControlWatcher{ID: "b-1", Every: time.Millisecond, Log: zerolog.New(&logs),
		Registry: controlReaderFn(func(context.Context, string) (membership.Request, error) {
			read <- struct{}{}
			return membership.Request{Action: membership.ActionDrain, By: membership.ActorSelf}, nil
		}),
		OnDrain: func(r membership.Request) { drains <- r }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	for range 3 { // three reads: the drain and two more
		select {
		case <-read:
		case <-time.After(10 * time.Second):
			t.Fatal("the watcher did not read its row")
		}
	}
	cancel()
	<-done
	require.Len(t, drains, 1, "acted on once")
	require.Equal(t, 0, logs.Count("drain requested"), logs.String())
}
