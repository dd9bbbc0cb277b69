package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/shutdown"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/examples/classic"
)

// leafKinds are the classic demo's kinds a wave's roots compose, and
// servedKinds those and the bom root itself.
var (
	leafKinds   = []string{classic.KindAccount, classic.KindVPC, classic.KindRoute}
	servedKinds = slices.Concat([]string{classic.KindBOM}, leafKinds)
)

// runWorker serves the bom and its leaf kinds on BROKER_URL (the stack's
// worker settings: WORKER_ID, WORKER_TOKEN_FILE, WORKER_DRAIN_TIMEOUT):
// the classic demo's providers (instant: their providerconfigs simulate no
// latency) behind the chaos switches, which add 50–300 ms of "work" per
// leaf and stamp every status with the claim it served. SIGUSR1 hangs its
// next 5 leaf handler calls, of 5 different resources (they ignore their
// context and never return: the broker's task deadline gives up on them,
// and the retry runs normally); SIGUSR2 toggles a slow mode (ten times the
// latency).
func runWorker() error {
	// SIGTERM drains the running tasks; a second signal exits at once.
	ctx, stop := shutdown.Context(context.Background(), "chaos worker", nil)
	defer stop()
	opts, err := worker.OptionsFromEnv()
	if err != nil {
		return err
	}
	opts.WorkerID = os.Getenv("WORKER_ID")
	opts.MaxParallel = max(opts.MaxParallel, 64)
	opts.ReconnectMax = 200 * time.Millisecond
	sw := &switches{self: strconv.Itoa(os.Getpid()), hung: map[string]bool{}}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		for sig := range sigs {
			if sig == syscall.SIGUSR1 {
				sw.hang.Store(5)
			} else {
				sw.slow.Store(!sw.slow.Load())
			}
		}
	}()
	return worker.Serve(ctx, os.Getenv("BROKER_URL"), opts, providers(sw)...)
}

// providers are the classic demo's providers of the served kinds (v1),
// each behind sw.
func providers(sw *switches) []worker.Provider {
	var out []worker.Provider
	for _, p := range classic.Providers(zerolog.Nop()) {
		if kv := p.Kind(); slices.Contains(servedKinds, kv.Kind) && kv.Version == manifest.DefaultVersion {
			out = append(out, switched{Provider: p, sw: sw})
		}
	}
	return out
}

// switches are the worker's fault switches and its claim stamp.
type switches struct {
	self string // this process's id: run ids are unique across workers
	runs atomic.Int64
	hang atomic.Int64 // leaf calls still to hang
	slow atomic.Bool

	mu   sync.Mutex
	hung map[string]bool // resources whose call hung once
}

// switched is a demo provider behind the switches.
type switched struct {
	worker.Provider
	sw *switches
}

// Work runs a leaf's reconcile after its simulated work (or hangs it), and
// stamps the status of every stage that reports one — a leaf's reconcile,
// a bom's compose and rollups — so the apply audit sees each applied result.
func (p switched) Work(ctx context.Context, req worker.Request) (worker.Outcome, error) {
	if req.Stage == worker.StageWork {
		if err := p.sw.work(ctx, req.Resource.ID); err != nil {
			return worker.Outcome{}, err
		}
	}
	out, err := p.Provider.Work(ctx, req)
	if err != nil || len(out.Status) == 0 {
		return out, err
	}
	if out.Status, err = p.sw.stamp(ctx, out.Status); err != nil {
		return worker.Outcome{}, worker.Terminal(err)
	}
	return out, nil
}

// work is a leaf's simulated work: 50–300 ms (ten times that in slow
// mode), or, once per resource while hangs are armed, forever.
func (s *switches) work(ctx context.Context, id string) error {
	s.mu.Lock()
	hangs := !s.hung[id] && s.hang.Add(-1) >= 0
	s.hung[id] = s.hung[id] || hangs
	s.mu.Unlock()
	if hangs { // once per resource: its retry runs normally
		select {} // hung: deaf to its context
	}
	latency := time.Duration(50+rand.IntN(250)) * time.Millisecond
	if s.slow.Load() {
		latency *= 10
	}
	t := time.NewTimer(latency)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stamp adds the claim stamp the apply audit counts to a status document:
// the claim's epoch and one fresh run id per execution.
func (s *switches) stamp(ctx context.Context, status json.RawMessage) (json.RawMessage, error) {
	var doc map[string]any
	if err := json.Unmarshal(status, &doc); err != nil {
		return nil, fmt.Errorf("stamp the status: %w", err)
	}
	c, _ := worker.ClaimFrom(ctx)
	doc["epoch"], doc["run"] = c.Epoch, fmt.Sprintf("%s-%d", s.self, s.runs.Add(1))
	return json.Marshal(doc)
}
