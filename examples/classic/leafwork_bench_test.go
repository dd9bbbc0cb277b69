package classic_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/examples/classic"
)

// BenchmarkLeafWork is one route reconcile of the demo provider with its
// default config and no sim block, as the end-to-end bench runs it (the
// handler's share of the worker's CPU per leaf: 7.7 µs before the config
// cache and the sim-block fast path, 4.5 µs after, on the 2-core CI host).
func BenchmarkLeafWork(b *testing.B) {
	p := provider(b, classic.KindRoute)
	req := worker.Request{Stage: worker.StageWork, Reaction: "work",
		Resource: worker.Resource{Kind: classic.KindRoute, Name: "team-007-route-1",
			Spec: json.RawMessage(`{"team":"team-007","vpc_id":"vpc-0123456789ab","cidr":"10.7.1.0/24","target":"igw"}`)},
		Config: worker.EffectiveConfig{Name: "default", Spec: json.RawMessage(`{"latency_ms":0,"failure_rate":0}`)}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Work(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}
