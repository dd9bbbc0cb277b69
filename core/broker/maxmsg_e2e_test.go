package broker_test

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/testlog"
	"github.com/converge-run/converge/core/worker"
)

// TestWorkerResult_OverTheBrokersMessageLimitFailsItsTask: a worker whose
// WORKER_MAX_MESSAGE_BYTES is above its broker's sends a result sized
// between the two. The broker's Subscribed names its limit, and the worker
// holds its results to the smaller of the two: the task fails, terminally,
// naming the size and the limit, as a result over the worker's own limit
// does. The broker refused the message before, the session broke, and the
// worker reconnected and sent it again, forever.
func TestWorkerResult_OverTheBrokersMessageLimitFailsItsTask(t *testing.T) {
	t.Parallel()
	const brokerLimit = 64 << 10
	s := apptest.Start(t, apptest.Options{Manifests: []string{routeKind},
		Config: func(c *config.Config) { c.WorkerMaxMsg = brokerLimit }})
	var logs testlog.Buffer
	log := zerolog.New(io.MultiWriter(&logs, zerolog.ConsoleWriter{Out: testlog.Writer(t), NoColor: true})).
		Level(zerolog.InfoLevel).With().Timestamp().Logger()
	big := json.RawMessage(`{"blob":"` + strings.Repeat("x", 200<<10) + `"}`)
	s.StartWorker(apptest.Worker{Options: worker.Options{MaxMessageBytes: 1 << 20, Logger: log},
		Providers: []worker.Provider{apptest.NewProvider("route",
			func(context.Context, worker.Request) (worker.Outcome, error) {
				return worker.Outcome{Status: big}, nil
			})}})
	_, _, err := s.Store.ApplyResource(context.Background(), store.ApplyResourceInput{Kind: "route", Name: "big", Spec: json.RawMessage(`{}`)})
	require.NoError(t, err)

	s.WaitPhase("route", "big", resource.PhaseFailed, 30*time.Second)
	require.Equal(t, 1, logs.Count("result too large to send; failing its task"), logs.String())
	require.Contains(t, logs.String(), `"limit":65536`)
	require.Contains(t, logs.String(), `"limit_of":"the broker's WORKER_MAX_MESSAGE_BYTES"`)
	require.Zero(t, logs.Count("broker stream lost"), "the result never broke the session")
}
