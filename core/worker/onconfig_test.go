package worker_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/worker"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// panicOnConfig is a provider whose OnConfig panics (a nil client, a bad
// type assertion on the config): the panic stays in the call.
type panicOnConfig struct{ *fakeProvider }

func (p panicOnConfig) OnConfig(c worker.ProviderConfig) {
	p.configs <- c
	panic("config without an endpoint")
}

// TestServe_APanickingOnConfigDoesNotKillTheWorker: OnConfig panicking on
// the pulled default and on a pushed edit is logged; the worker keeps its
// session and runs tasks with the config (as the TypeScript SDK does with a
// throwing onConfig). It crashed the process before.
func TestServe_APanickingOnConfigDoesNotKillTheWorker(t *testing.T) {
	t.Parallel()
	b := newScriptBroker(t)
	b.config = &workerv1.ProviderConfig{Kind: "vpc", Name: "default", IsDefault: true, Revision: 1, SpecJson: []byte(`{"region":"a"}`)}
	seen := make(chan string, 4)
	p := panicOnConfig{newProvider("vpc", func(_ context.Context, r worker.Request) (worker.Outcome, error) {
		seen <- string(r.Config.Spec)
		return worker.Outcome{Status: json.RawMessage(`{}`)}, nil
	})}
	startWorker(t, b, worker.Options{}, p)
	<-p.configs
	b.next(t, "subscribe", isSubscribe)

	b.outbox <- &workerv1.WorkStreamResponse{Msg: &workerv1.WorkStreamResponse_Config{Config: &workerv1.ConfigPush{Kind: "vpc",
		Config: &workerv1.ProviderConfig{Kind: "vpc", Name: "default", IsDefault: true, Revision: 2, SpecJson: []byte(`{"region":"b"}`)}}}}
	require.JSONEq(t, `{"region":"b"}`, string((<-p.configs).Spec))

	b.send(task("t1", "vpc", 1, 0))
	b.next(t, "the task's result on the same session", isComplete("t1"))
	require.JSONEq(t, `{"region":"b"}`, <-seen, "tasks run with the pushed config")
	b.mu.Lock()
	defer b.mu.Unlock()
	require.Equal(t, 1, b.sessions, "the worker kept its session")
}
