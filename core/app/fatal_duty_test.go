package app_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app"
	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/store/membership"
	"github.com/converge-run/converge/db/pgtest"
)

// A duty that fails fatally shuts the process down as a SIGTERM does: the
// member is marked leaving at once, so its peers take its shards while the
// other duties drain (a task held by its worker here), and /readyz says
// draining. Unmarked, its shards went unclaimed for the drain — until its
// last beat aged past the liveness window, or it deregistered at the end.
func TestProcess_AFatalDutyMarksTheMemberLeavingBeforeItDrains(t *testing.T) {
	t.Parallel()
	cfg := config.Defaults()
	cfg.DatabaseURL, cfg.ListenAddr, cfg.HealthAddr = pgtest.URL(t), "127.0.0.1:0", "127.0.0.1:0"
	cfg.HeartbeatEvery, cfg.ShutdownDrain = time.Second, 2*time.Minute
	require.NoError(t, cfg.Validate())
	fail := make(chan struct{})
	boom := errors.New("boom")
	mount := func(_ *http.ServeMux, p *app.Process) error {
		p.AddDuty(engine.Func{N: "doomed", F: func(ctx context.Context) error {
			select {
			case <-fail:
				return boom
			case <-ctx.Done():
				return nil
			}
		}})
		return nil
	}
	p, done := runConverge(t, context.Background(), cfg, mount)
	base := apptest.APIURL(p)
	release := holdATask(t, p)

	close(fail)
	apptest.WaitFor(t, 10*time.Second, "the member is marked leaving", func() bool {
		r, err := membership.New(p.Primary).PendingRequest(context.Background(), p.MemberID)
		require.NoError(t, err)
		return r.Action == membership.ActionDrain && r.By == membership.ActorSelf
	})
	code, body := probe(t, base, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code, "/readyz says draining: %s", body)
	select {
	case err := <-done:
		t.Fatalf("the process ended before its task finished, so the test proves nothing: %v", err)
	default:
	}

	close(release)
	select {
	case err := <-done:
		require.ErrorIs(t, err, boom, "the duty's error is the process's")
	case <-time.After(apptest.StopWithin):
		t.Fatalf("did not stop within %s", apptest.StopWithin)
	}
}
