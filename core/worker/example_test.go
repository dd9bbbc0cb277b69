package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/worker"
)

// vpcProvider serves the vpc kind: its manifest (applied to the control
// plane, not compiled in) declares a "work" reaction that emits status.
// OnConfig, Ready and Work run on different goroutines: what they share is
// synchronized.
type vpcProvider struct{ endpoint atomic.Pointer[string] }

func (p *vpcProvider) Kind() manifest.KindVersion {
	return manifest.KindVersion{Kind: "vpc", Version: "v1"}
}

// OnConfig receives the kind's default providerconfig, and every edit.
func (p *vpcProvider) OnConfig(c worker.ProviderConfig) {
	var cfg struct{ Endpoint string }
	if json.Unmarshal(c.Spec, &cfg) == nil {
		p.endpoint.Store(&cfg.Endpoint)
	}
}

// Ready gates the kind: no work arrives until the endpoint is known.
func (p *vpcProvider) Ready() bool {
	e := p.endpoint.Load()
	return e != nil && *e != ""
}

func (p *vpcProvider) Work(_ context.Context, r worker.Request) (worker.Outcome, error) {
	var spec struct{ CIDR string }
	if err := json.Unmarshal(r.Resource.Spec, &spec); err != nil || spec.CIDR == "" {
		return worker.Outcome{}, worker.Terminal(errors.New("spec.cidr is required"))
	}
	status, _ := json.Marshal(map[string]string{"vpc_id": "vpc-" + r.Resource.Name, "cidr": spec.CIDR})
	return worker.Outcome{Status: status}, nil
}

// A worker main: host providers and serve them to a broker until SIGTERM
// (or Ctrl-C), then drain in-flight tasks.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts, err := worker.OptionsFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	if err := worker.Serve(ctx, os.Getenv("BROKER_URL"), opts, &vpcProvider{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
}

// The effective config of a task: the attached config's spec wins key by key
// over the kind's default; an attached bundle replaces the default's whole.
func ExampleEffective() {
	def := &worker.ProviderConfig{Name: "default", Spec: json.RawMessage(`{"bucket":"shared","region":"eu-west-1"}`)}
	team := &worker.ProviderConfig{Name: "team-a", Spec: json.RawMessage(`{"bucket":"team-a"}`)}
	eff, _ := worker.Effective(def, team)
	fmt.Println(eff.Name, string(eff.Spec))
	// Output: team-a {"bucket":"team-a","region":"eu-west-1"}
}

// Terminal failures stop retries for the resource's current generation.
func ExampleTerminal() {
	err := worker.Terminal(errors.New("cidr overlaps an existing vpc"))
	fmt.Println(worker.IsTerminal(err), worker.IsTerminal(errors.New("throttled")))
	// Output: true false
}
