package classic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/converge-run/converge/core/worker"
)

// Sim is the simulated behaviour of a leaf: how long a reconcile takes and
// how often it fails. The kind's providerconfig sets it for every resource;
// a resource's spec "sim" block overrides it field by field.
type Sim struct {
	LatencyMS           *int     `json:"latency_ms,omitempty"`
	JitterMS            *int     `json:"jitter_ms,omitempty"`
	FailureRate         *float64 `json:"failure_rate,omitempty"`
	TerminalFailureRate *float64 `json:"terminal_failure_rate,omitempty"`
	DeleteLatencyMS     *int     `json:"delete_latency_ms,omitempty"`
}

// over returns s with every field o sets replaced.
func (s Sim) over(o *Sim) Sim {
	if o == nil {
		return s
	}
	if o.LatencyMS != nil {
		s.LatencyMS = o.LatencyMS
	}
	if o.JitterMS != nil {
		s.JitterMS = o.JitterMS
	}
	if o.FailureRate != nil {
		s.FailureRate = o.FailureRate
	}
	if o.TerminalFailureRate != nil {
		s.TerminalFailureRate = o.TerminalFailureRate
	}
	if o.DeleteLatencyMS != nil {
		s.DeleteLatencyMS = o.DeleteLatencyMS
	}
	return s
}

// simFor reads the effective simulation for a task: the config's knobs,
// overridden by the spec's sim block.
func simFor(req worker.Request) (Sim, error) {
	s, err := configSim(req.Config.Name, req.Config.Spec)
	if err != nil {
		return s, err
	}
	if !mayHaveSim(req.Resource.Spec) {
		return s, nil
	}
	var spec struct {
		Sim *Sim `json:"sim"`
	}
	if err := json.Unmarshal(req.Resource.Spec, &spec); err != nil {
		return s, fmt.Errorf("spec: %w", err)
	}
	return s.over(spec.Sim), nil
}

// mayHaveSim reports whether spec could hold a "sim" member: a spec
// without those bytes (or a \u escape that could spell them) has none, and
// is not decoded a second time for it (its kind's observe decodes it).
func mayHaveSim(spec json.RawMessage) bool {
	return len(spec) > 0 && (bytes.Contains(spec, []byte("sim")) || bytes.Contains(spec, []byte(`\u`)))
}

// configSims caches the simulation a providerconfig spec sets, keyed by the
// spec's bytes: every task reads its kind's config, which changes rarely,
// and decoding it again for each task was a good part of the demo worker's
// JSON work. Bounded: it starts over past configSimsMax distinct specs.
var configSims struct {
	sync.Mutex
	m map[string]Sim
}

const configSimsMax = 64

func configSim(name string, spec json.RawMessage) (Sim, error) {
	var s Sim
	if len(spec) == 0 || string(spec) == "null" {
		return s, nil
	}
	configSims.Lock()
	s, ok := configSims.m[string(spec)]
	configSims.Unlock()
	if ok {
		return s, nil // shared pointers: a Sim is only read (over copies)
	}
	if err := json.Unmarshal(spec, &s); err != nil {
		return s, fmt.Errorf("providerconfig %q: %w", name, err)
	}
	configSims.Lock()
	if configSims.m == nil || len(configSims.m) >= configSimsMax {
		configSims.m = map[string]Sim{}
	}
	configSims.m[string(spec)] = s
	configSims.Unlock()
	return s, nil
}

// reconcile waits the simulated latency (cut short by ctx) and then draws
// the simulated failures: a terminal one first, then a transient one.
func (s Sim) reconcile(ctx context.Context) error {
	if err := sleep(ctx, deref(s.LatencyMS), deref(s.JitterMS)); err != nil {
		return err
	}
	if p := derefF(s.TerminalFailureRate); p > 0 && rand.Float64() < p {
		return worker.Terminal(errors.New("simulated terminal failure (terminal_failure_rate)"))
	}
	if p := derefF(s.FailureRate); p > 0 && rand.Float64() < p {
		return errors.New("simulated transient failure (failure_rate)")
	}
	return nil
}

// teardown waits the simulated delete latency — the config's
// delete_latency_ms when set, else def (FAKE_DELETE_DELAY); it never fails.
func (s Sim) teardown(ctx context.Context, def time.Duration) error {
	if s.DeleteLatencyMS != nil {
		return sleep(ctx, *s.DeleteLatencyMS, 0)
	}
	return sleep(ctx, int(def/time.Millisecond), 0)
}

func sleep(ctx context.Context, ms, jitterMS int) error {
	d := time.Duration(ms) * time.Millisecond
	if jitterMS > 0 {
		d += time.Duration(rand.IntN(jitterMS+1)) * time.Millisecond
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

func derefF(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}
