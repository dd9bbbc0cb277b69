package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/testlog"
	"github.com/converge-run/converge/core/worker"
)

// TestStageTask_OverTheWorkersMessageLimitFailsItsTask: a worker whose
// WORKER_MAX_MESSAGE_BYTES is below its broker's is sent a task sized
// between the two. The worker names its limit in its Subscribe, and the
// broker holds what it sends the session to it: the task fails, terminally,
// naming the size and the limit, and the session goes on. The worker could
// not read the message before: its session broke, the stage was dispatched
// again and broke the next one, until the task's lost-worker attempts ran out.
func TestStageTask_OverTheWorkersMessageLimitFailsItsTask(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{Manifests: []string{routeKind}})
	var logs testlog.Buffer
	log := zerolog.New(io.MultiWriter(&logs, zerolog.ConsoleWriter{Out: testlog.Writer(t), NoColor: true})).
		Level(zerolog.InfoLevel).With().Timestamp().Logger()
	s.StartWorker(apptest.Worker{Options: worker.Options{MaxMessageBytes: 64 << 10, Logger: log},
		Providers: []worker.Provider{apptest.NewProvider("route",
			func(context.Context, worker.Request) (worker.Outcome, error) {
				return worker.Outcome{Status: json.RawMessage(`{}`)}, nil
			})}})
	big := json.RawMessage(`{"blob":"` + strings.Repeat("x", 200<<10) + `"}`)
	_, _, err := s.Store.ApplyResource(context.Background(), store.ApplyResourceInput{Kind: "route", Name: "big", Spec: big})
	require.NoError(t, err)

	r := s.WaitPhase("route", "big", resource.PhaseFailed, 30*time.Second)
	conds, err := s.Store.Conditions(context.Background(), r.ID)
	require.NoError(t, err)
	require.Contains(t, fmt.Sprint(conds), "over the 65536-byte limit")
	require.Zero(t, logs.Count("broker stream lost"), "the task never broke the session")
}

// TestStageTasks_BatchesFitTheWorkersMessageLimit: a worker whose
// WORKER_MAX_MESSAGE_BYTES (here the least it may be, 1 KiB) is below the
// ~4 KiB a task batch may reach is sent batches, and result acks, that fit
// it: each task fits alone, so none may break the session together. A
// batch of tasks queued at once, or the acks of their results, was sent
// whole, and the worker lost its session to each (the stages dispatched
// again, the next batch breaking the next session).
func TestStageTasks_BatchesFitTheWorkersMessageLimit(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{Manifests: []string{routeKind}})
	const n = 60
	for i := range n {
		_, _, err := s.Store.ApplyResource(context.Background(), store.ApplyResourceInput{Kind: "route",
			Name: fmt.Sprintf("r-%02d", i), Spec: json.RawMessage(`{"n":1}`)})
		require.NoError(t, err)
	}
	var logs testlog.Buffer
	log := zerolog.New(io.MultiWriter(&logs, zerolog.ConsoleWriter{Out: testlog.Writer(t), NoColor: true})).
		Level(zerolog.InfoLevel).With().Timestamp().Logger()
	// Every pending task is claimed for the worker the moment it connects,
	// so the session's queue holds many at once.
	s.StartWorker(apptest.Worker{Options: worker.Options{MaxMessageBytes: 1024, MaxParallel: 64, Logger: log},
		Providers: []worker.Provider{apptest.NewProvider("route",
			func(context.Context, worker.Request) (worker.Outcome, error) {
				return worker.Outcome{Status: json.RawMessage(`{}`)}, nil
			})}})
	for i := range n {
		s.WaitPhase("route", fmt.Sprintf("r-%02d", i), resource.PhaseReady, 60*time.Second)
	}
	require.Zero(t, logs.Count("broker stream lost"), "no batch and no ack broke the session")
}

// TestGetProviderConfig_OverTheWorkersMessageLimitIsRefusedByName: a
// worker whose WORKER_MAX_MESSAGE_BYTES is below its kind's default
// providerconfig names its limit in the pull, and the broker refuses the
// pull naming the config, its size and the limit; the worker says so once,
// and its session and tasks go on. The broker sent the config whole: the
// worker's read refused it, and the pull failed with a line at debug level
// naming neither the config nor the limit it broke (the session's push is
// skipped for the same size), so the worker ran without its config,
// silently.
func TestGetProviderConfig_OverTheWorkersMessageLimitIsRefusedByName(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{Manifests: []string{routeKind}})
	_, _, err := s.Store.ApplyProviderConfig(context.Background(), store.ProviderConfigInput{Kind: "route", Name: "wide",
		IsDefault: true, Spec: json.RawMessage(`{"blob":"` + strings.Repeat("x", 3000) + `"}`)})
	require.NoError(t, err)
	var logs testlog.Buffer
	log := zerolog.New(io.MultiWriter(&logs, zerolog.ConsoleWriter{Out: testlog.Writer(t), NoColor: true})).
		Level(zerolog.InfoLevel).With().Timestamp().Logger()
	s.StartWorker(apptest.Worker{Options: worker.Options{MaxMessageBytes: 2048, Logger: log},
		Providers: []worker.Provider{apptest.NewProvider("route",
			func(context.Context, worker.Request) (worker.Outcome, error) {
				return worker.Outcome{Status: json.RawMessage(`{}`)}, nil
			})}})
	_, _, err = s.Store.ApplyResource(context.Background(), store.ApplyResourceInput{Kind: "route", Name: "r", Spec: json.RawMessage(`{}`)})
	require.NoError(t, err)
	s.WaitPhase("route", "r", resource.PhaseReady, 30*time.Second)

	require.Equal(t, 1, logs.Count("default providerconfig refused"), "the worker says so once")
	require.Contains(t, logs.String(), "providerconfig route/wide is 30")
	require.Contains(t, logs.String(), "over the 2048-byte limit")
	require.Zero(t, logs.Count("broker stream lost"), "the session went on")
}
