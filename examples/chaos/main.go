// Command chaos runs the fault suite against a local cluster of real
// processes (examples/stack, the supervision cmd/devstack uses): a private
// Postgres, 2 ROLE=control and 3 ROLE=broker converge processes and 4
// workers (this binary re-executed), which dial the brokers through the
// stack's round-robin balancer. A TCP proxy of ours
// (examples/chaos/tcpproxy) sits between each converge process and
// Postgres and between each worker and the balancer, so any one link can
// be partitioned or silenced.
//
// Each scenario applies a wave of leaf resources, injects its fault once a
// third of the wave has settled, and waits for the wave to converge; it
// prints one line per fault with the time it added over the fault-free
// wave and checks four invariants: eventual completion, progress (no
// window over 5 s without a resource settling while work is queued,
// counted from the end of the fault's own outage for a frozen database),
// no stranding (nothing left Reconciling or Failed) and no double-apply
// (an audit trigger records each result the drain applies, stamped by the
// demo worker with the claim it served: at most one per claim). Run it
// from the repository root:
//
//	go run ./examples/chaos                        # every fault
//	go run ./examples/chaos -n 200 -smoke          # the CI smoke: three faults
//	go run ./examples/chaos -faults pg-restart -repeat 5
//	go run ./examples/chaos -n 2000                # bigger waves
//
// Fault keys: worker-kill, worker-drain, broker-kill, broker-drain,
// control-kill, control-partition, broker-partition, pg-restart,
// pg-immediate, pg-freeze, worker-cut, hung-handler, slow-worker.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/worker"
)

const leafKind = `{"kind":"leaf","spec_schema":{"type":"object"},"task_deadline_secs":5,
 "reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`

func main() {
	if len(os.Args) == 2 && os.Args[1] == "-worker" {
		if err := runWorker(); err != nil {
			fmt.Fprintln(os.Stderr, "chaos worker:", err)
			os.Exit(1)
		}
		return
	}
	n := flag.Int("n", 300, "resources per wave")
	smoke := flag.Bool("smoke", false, "the CI smoke: the fault-free wave and three faults (worker kill, broker kill, Postgres fast restart)")
	only := flag.String("faults", "", "comma-separated fault keys to run after the fault-free wave (default: all)")
	repeat := flag.Int("repeat", 1, "run each selected fault this many times")
	flag.Parse()
	if *n < 3 {
		fmt.Fprintln(os.Stderr, "chaos: -n must be at least 3 (the fault is injected at a third of the wave)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *n, *smoke, *only, *repeat)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
}

// runWorker serves the leaf kind on BROKER_URL (the stack's worker
// settings: WORKER_ID, WORKER_TOKEN_FILE, WORKER_DRAIN_TIMEOUT): 50–300 ms
// of "work" per resource. SIGUSR1 hangs its next 5 handler calls, of 5
// different resources (they ignore their context and never return: the
// broker's task deadline gives up on them, and the retry runs normally);
// SIGUSR2 toggles a slow mode (ten times the latency).
func runWorker() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	opts, err := worker.OptionsFromEnv()
	if err != nil {
		return err
	}
	opts.WorkerID = os.Getenv("WORKER_ID")
	opts.MaxParallel = max(opts.MaxParallel, 64)
	opts.ReconnectMax = 200 * time.Millisecond
	var runs, hang atomic.Int64
	var slow atomic.Bool
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		for sig := range sigs {
			if sig == syscall.SIGUSR1 {
				hang.Store(5)
			} else {
				slow.Store(!slow.Load())
			}
		}
	}()
	self := strconv.Itoa(os.Getpid())
	var mu sync.Mutex
	hung := map[string]bool{}
	p := apptest.NewProvider("leaf", func(ctx context.Context, req worker.Request) (worker.Outcome, error) {
		mu.Lock()
		hangs := !hung[req.Resource.ID] && hang.Add(-1) >= 0
		hung[req.Resource.ID] = hung[req.Resource.ID] || hangs
		mu.Unlock()
		if hangs { // once per resource: its retry runs normally
			select {} // hung: deaf to its context
		}
		latency := time.Duration(50+rand.IntN(250)) * time.Millisecond
		if slow.Load() {
			latency *= 10
		}
		select {
		case <-time.After(latency):
		case <-ctx.Done():
			return worker.Outcome{}, ctx.Err()
		}
		// The claim stamp the apply audit counts: one fresh run id per
		// execution, under the claim it served.
		c, _ := worker.ClaimFrom(ctx)
		return worker.Outcome{Status: json.RawMessage(fmt.Sprintf(`{"done":true,"epoch":%d,"run":"%s-%d"}`,
			c.Epoch, self, runs.Add(1)))}, nil
	})
	return worker.Serve(ctx, os.Getenv("BROKER_URL"), opts, p)
}

type scenario struct {
	key  string
	name string
	// full: only in the full suite, not the CI smoke.
	full bool
	// outage is how long the fault itself stops all progress (a frozen
	// database): the progress invariant starts counting after it.
	outage time.Duration
	// outageIsInject: the fault's own outage lasts as long as inject (a
	// Postgres restart: down until the server accepts connections again).
	outageIsInject bool
	// inject runs in its own goroutine (a drain takes seconds); the wave
	// waits for it before it reports.
	inject func() error
	after  func() error
}

// scenarios is the fault schedule, in the order the full suite runs it.
func (s *suite) scenarios(ctx context.Context) []scenario {
	return []scenario{
		{key: "worker-kill", name: "worker SIGKILLed", inject: func() error { return s.kill("worker") },
			after: func() error { return s.add(ctx, "worker") }},
		{key: "broker-kill", name: "broker SIGKILLed", inject: func() error { return s.kill("broker") },
			after: func() error { return s.add(ctx, "broker") }},

		// Smoke faults (above) keep their longest gap far from the 5 s
		// bound on a loaded 2-core CI machine; a partition's is about 3 s
		// (the liveness lock's window), so it runs in the full suite only.
		{key: "pg-restart", name: "Postgres restarted (fast shutdown)", outageIsInject: true,
			inject: func() error { return s.st.RestartPostgres(ctx, false) }},
		{key: "broker-partition", name: "broker partitioned from Postgres 8s", full: true,
			inject: func() error { return s.partition("broker", 8*time.Second) }},
		{key: "control-kill", name: "control SIGKILLed", full: true, inject: func() error { return s.kill("control") },
			after: func() error { return s.add(ctx, "control") }},
		{key: "control-partition", name: "control partitioned from Postgres 8s", full: true,
			inject: func() error { return s.partition("control", 8*time.Second) }},
		{key: "worker-drain", name: "worker drained, a new one joins", full: true,
			inject: func() error { return s.rollover(ctx, "worker") }},
		{key: "broker-drain", name: "broker drained, a new one joins", full: true,
			inject: func() error { return s.rollover(ctx, "broker") }},
		{key: "pg-immediate", name: "Postgres restarted (immediate: a crash)", full: true, outageIsInject: true,
			inject: func() error { return s.st.RestartPostgres(ctx, true) }},
		{key: "pg-freeze", name: "Postgres frozen 8s (SIGSTOP)", full: true, outage: 8 * time.Second,
			inject: func() error { return s.freezePostgres(8 * time.Second) }},
		// The broker ends the silent session after WORKER_SILENCE_TIMEOUT
		// and re-dispatches its stages: the progress invariant counts from
		// then.
		{key: "worker-cut", name: "worker↔broker connection silent 8s", full: true, outage: silenceTimeout,
			inject: func() error { return s.partition("worker", 8*time.Second) }},
		// The hung resources wait out their 5 s task deadline (then fail
		// and retry): the progress invariant counts from the deadline.
		{key: "hung-handler", name: "5 handler calls hung (task deadline 5s)", full: true, outage: 5 * time.Second,
			inject: func() error { return s.signal("worker", syscall.SIGUSR1) }},
		{key: "slow-worker", name: "a worker 10x slower", full: true,
			inject: func() error { return s.signal("worker", syscall.SIGUSR2) },
			after:  func() error { return s.signal("worker", syscall.SIGUSR2) }},
	}
}

func run(ctx context.Context, n int, smoke bool, only string, repeat int) error {
	s, err := boot(ctx)
	if err != nil {
		if s != nil {
			s.close()
		}
		return err
	}
	defer s.close()
	var picked []scenario
	keys := strings.Split(only, ",")
	known := map[string]bool{}
	for _, sc := range s.scenarios(ctx) {
		known[sc.key] = true
		inSmoke := !sc.full || !smoke
		if (only == "" && inSmoke) || slices.Contains(keys, sc.key) {
			for range max(repeat, 1) {
				picked = append(picked, sc)
			}
		}
	}
	for _, k := range keys {
		if k != "" && !known[k] {
			return fmt.Errorf("-faults: unknown fault %q", k)
		}
	}
	// The first wave warms the processes up (connections, caches, the
	// workers' sessions); the second, fault-free, is the baseline.
	scenarios := append([]scenario{{key: "warm-up", name: "warm-up (no fault)"}, {key: "none", name: "fault-free"}}, picked...)
	var base time.Duration
	fmt.Printf("%-40s %10s %8s %9s %s\n", "fault", "converged", "added", "max gap", "invariants")
	for i, sc := range scenarios {
		res, err := s.wave(ctx, i, n, sc)
		if err != nil {
			return fmt.Errorf("%s: %w", sc.name, err)
		}
		if i <= 1 {
			base = res.took
		}
		fmt.Printf("%-40s %9.1fs %+7.1fs %8.1fs %s\n", sc.name, res.took.Seconds(), (res.took - base).Seconds(),
			res.maxGap.Seconds(), res.verdict())
		if !res.ok() {
			return errors.New("an invariant failed; logs in " + s.dir)
		}
		if sc.after != nil {
			if err := sc.after(); err != nil {
				return err
			}
		}
	}
	return nil
}
