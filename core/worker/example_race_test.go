package worker_test

import (
	"testing"

	"github.com/converge-run/converge/core/worker"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// TestExample_ProviderIsSafeUnderTheWorker serves the package example's
// provider, as a provider author copies it: OnConfig (on the stream's
// receive loop) and Ready (on the readiness ticker) run concurrently, so
// the endpoint they share must be synchronized. Under -race it reported a
// data race before.
func TestExample_ProviderIsSafeUnderTheWorker(t *testing.T) {
	t.Parallel()
	b := newScriptBroker(t)
	startWorker(t, b, worker.Options{}, &vpcProvider{})
	sub := b.next(t, "subscribe", isSubscribe).GetSubscribe()
	if sub.GetKinds()[0].GetReady() {
		t.Fatal("the example's kind is unready until its endpoint is configured")
	}
	b.outbox <- &workerv1.WorkStreamResponse{Msg: &workerv1.WorkStreamResponse_Config{Config: &workerv1.ConfigPush{Kind: "vpc",
		Config: &workerv1.ProviderConfig{Kind: "vpc", Name: "default", IsDefault: true, Revision: 1, SpecJson: []byte(`{"Endpoint":"https://api"}`)}}}}
	b.next(t, "the kind going ready", func(m *workerv1.WorkStreamRequest) bool {
		ks := m.GetReadiness().GetKinds()
		return len(ks) == 1 && ks[0].GetReady()
	})
}
