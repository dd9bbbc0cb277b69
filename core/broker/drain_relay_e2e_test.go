package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/testlog"
	"github.com/converge-run/converge/core/worker"
)

// TestBrokerShutdown_RelayedStagesWaitNoLongerThanTheDrain: a broker whose
// worker runs stages a peer relayed to it keeps each session open, after its
// own drain, until those stages finish (they are the peer's, which outlive
// this broker's drain) — but no longer than SHUTDOWN_DRAIN, counted from the
// drain's start. What is left then is logged once and handed back to the
// peer, and the broker exits. The wait was unbounded by the drain: the
// listener's shutdown grace (10s) cut the sessions, well after the budget.
func TestBrokerShutdown_RelayedStagesWaitNoLongerThanTheDrain(t *testing.T) {
	t.Parallel()
	const drain = 2 * time.Second
	routeHeld := `{"kind":"route","spec_schema":{"type":"object"},"task_deadline_secs":120,
 "reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`
	s := apptest.Start(t, apptest.Options{Manifests: []string{routeHeld},
		Config: func(c *config.Config) { c.ShutdownDrain = drain }})
	var logs testlog.Buffer
	s.Log = zerolog.New(io.MultiWriter(&logs, zerolog.ConsoleWriter{Out: testlog.Writer(t), NoColor: true})).
		Level(zerolog.InfoLevel).With().Timestamp().Logger()
	peer, stopPeer := s.StartProcess(config.RoleBroker)

	// The only worker is the second broker's: the first relays its shards'
	// stages there. Every handler holds its task until its context ends.
	relayed := make(chan struct{}, 64)
	apptest.StartWorker(t, apptest.BrokerURL(peer), worker.Options{DrainTimeout: time.Second},
		apptest.NewProvider("route", func(ctx context.Context, _ worker.Request) (worker.Outcome, error) {
			if c, ok := worker.ClaimFrom(ctx); ok && c.Broker == s.Process.MemberID {
				relayed <- struct{}{}
			}
			<-ctx.Done()
			return worker.Outcome{}, ctx.Err()
		}))
	// One resource at a time until one's stage is relayed: until the two
	// members' shard ranges are re-tiled apart and the first sees the
	// second serve the kind, the second claims them itself.
	deadline := time.After(time.Minute)
	for i := 0; ; i++ {
		_, _, err := s.Store.ApplyResource(context.Background(), store.ApplyResourceInput{Kind: "route",
			Name: fmt.Sprintf("r%d", i), Spec: json.RawMessage(`{}`)})
		require.NoError(t, err)
		select {
		case <-relayed:
		case <-time.After(200 * time.Millisecond):
			select {
			case <-deadline:
				t.Fatal("no stage was relayed to the second broker's worker")
			default:
			}
			continue
		}
		break
	}

	began := time.Now()
	stopPeer()
	took := time.Since(began)
	// The drain, plus the listener closing and deregistering; the
	// listener's own grace (10s) is what the wait took before.
	require.Less(t, took, drain+4*time.Second, "the broker's shutdown outlasted its drain budget")
	require.Equal(t, 1, logs.Count("relayed stages still running"), "what the budget left is logged once:\n%s", logs.String())
}
