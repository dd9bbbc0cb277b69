// Command chaos runs the fault suite against a local cluster of real
// processes (examples/stack, the supervision cmd/devstack uses): a private
// Postgres, 2 ROLE=control and 3 ROLE=broker converge processes and 4
// workers (this binary re-executed), which dial the brokers through the
// stack's round-robin balancer. A TCP proxy of ours
// (examples/chaos/tcpproxy) sits between each converge process and
// Postgres and between each worker and the balancer, so any one link can
// be partitioned, silenced, slowed down or reset.
//
// Each scenario applies a wave of composites — -n classic bom roots, each
// composing 2 teams × (account → vpc → 2 routes), the vpc gated on its
// account and each route on its vpc, the ids flowing down the edges, and
// the subtree rolled up into the root (9 resources a root) — injects its
// fault once a third of the wave's resources have settled, and waits for
// the wave to converge; it prints one line per fault with the time it added
// over the fault-free wave and checks four invariants: eventual completion
// (every root and every child Ready), progress (no window over 5 s without
// a resource settling while work is queued, counted from the end of the
// fault's own outage for a frozen database), no stranding (nothing left
// Reconciling, Failed or Degraded) and no double-apply (an audit trigger
// records each result the drain applies — a leaf's reconcile, a root's
// compose and rollups — stamped by the worker with the claim it served: at
// most one per claim). Run it from the repository root:
//
//	go run ./examples/chaos                        # every fault
//	go run ./examples/chaos -n 200 -smoke          # the CI smoke: four faults
//	go run ./examples/chaos -faults pg-restart -repeat 5
//	go run ./examples/chaos -n 2000                # bigger waves
//
// Fault keys: worker-kill, worker-drain, worker-reset, broker-kill,
// broker-drain, control-kill, control-partition, broker-partition,
// pg-latency, pg-restart, pg-immediate, pg-freeze, worker-cut,
// hung-handler, slow-worker.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/converge-run/converge/core/shutdown"
	"github.com/converge-run/converge/examples/stack"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "-worker" {
		if err := runWorker(); err != nil {
			fmt.Fprintln(os.Stderr, "chaos worker:", err)
			os.Exit(1)
		}
		return
	}
	n := flag.Int("n", 300, fmt.Sprintf("bom roots per wave (%d resources each)", 1+waveShape.Descendants()))
	smoke := flag.Bool("smoke", false, "the CI smoke: the fault-free wave and four faults (worker kill, broker kill, Postgres fast restart, broker drain); not with -faults")
	only := flag.String("faults", "", "comma-separated fault keys to run after the fault-free wave (default: all; \"none\" repeats the fault-free wave)")
	repeat := flag.Int("repeat", 1, "run each selected fault this many times (at least 1)")
	flag.Parse()
	if *n < 1 {
		fmt.Fprintln(os.Stderr, "chaos: -n must be at least 1")
		os.Exit(2)
	}
	// Ctrl+C stops the cluster in order; a second one kills its processes at
	// once and exits.
	var running atomic.Pointer[stack.Stack]
	ctx, stop := shutdown.Context(context.Background(), "chaos", func() {
		if st := running.Load(); st != nil {
			st.Abandon()
		}
	})
	err := run(ctx, &running, *n, *smoke, *only, *repeat)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
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
			inject: func() error { return s.partition(ctx, "broker", 8*time.Second) }},
		// Every statement of one broker pays a 400 ms round trip: its
		// claims, heartbeats and result appends slow down, its liveness
		// lock holds (nothing is lost, the link only got long).
		{key: "pg-latency", name: "broker↔Postgres +200ms each way 8s", full: true,
			inject: func() error { return s.slowLink(ctx, "broker", 200*time.Millisecond, 8*time.Second) }},
		{key: "control-kill", name: "control SIGKILLed", full: true, inject: func() error { return s.kill("control") },
			after: func() error { return s.add(ctx, "control") }},
		{key: "control-partition", name: "control partitioned from Postgres 8s", full: true,
			inject: func() error { return s.partition(ctx, "control", 8*time.Second) }},
		{key: "worker-drain", name: "worker drained, a new one joins", full: true,
			inject: func() error { return s.rollover(ctx, "worker") }},
		// In the smoke too: a rolled broker is every deploy, and its drain
		// once stranded a claim (a minute's gap) in one wave in six.
		{key: "broker-drain", name: "broker drained, a new one joins",
			inject: func() error { return s.rollover(ctx, "broker") }},
		{key: "pg-immediate", name: "Postgres restarted (immediate: a crash)", full: true, outageIsInject: true,
			inject: func() error { return s.st.RestartPostgres(ctx, true) }},
		{key: "pg-freeze", name: "Postgres frozen 8s (SIGSTOP)", full: true, outage: 8 * time.Second,
			inject: func() error { return s.freezePostgres(8 * time.Second) }},
		// The broker ends the silent session after WORKER_SILENCE_TIMEOUT
		// and re-dispatches its stages: the progress invariant counts from
		// then.
		{key: "worker-cut", name: "worker↔broker connection silent 8s", full: true, outage: silenceTimeout,
			inject: func() error { return s.partition(ctx, "worker", 8*time.Second) }},
		// Every worker's session is reset at once (an RST to the worker, the
		// balancer closes the broker's side): each worker reconnects, to
		// another broker as likely as not, and redelivers the results the
		// old session had not acked; the brokers re-dispatch what was in
		// flight on it.
		{key: "worker-reset", name: "every worker↔broker connection reset", full: true,
			inject: func() error { return s.reset("worker") }},
		// The hung resources wait out their 5 s task deadline (then fail
		// and retry): the progress invariant counts from the deadline.
		{key: "hung-handler", name: "5 handler calls hung (task deadline 5s)", full: true, outage: 5 * time.Second,
			inject: func() error { return s.signal("worker", syscall.SIGUSR1) }},
		{key: "slow-worker", name: "a worker 10x slower", full: true,
			inject: func() error { return s.signal("worker", syscall.SIGUSR2) },
			after:  func() error { return s.signal("worker", syscall.SIGUSR2) }},
	}
}

// pick is the schedule of faulted waves: every fault of the suite (or the
// smoke's) in the suite's order, or the faults only names, in the order it
// names them, each run repeat times in a row. "none", named, is the
// fault-free wave again: repeated, it shows a run's drift with no fault at
// all, the yardstick for every fault's "added".
func pick(all []scenario, only string, smoke bool, repeat int) ([]scenario, error) {
	if repeat < 1 {
		return nil, fmt.Errorf("-repeat %d: run each fault at least once (-repeat 1)", repeat)
	}
	if smoke && only != "" {
		return nil, errors.New("-smoke and -faults together: -smoke runs its own four faults; pass one of the two")
	}
	var picked []scenario
	add := func(sc scenario) {
		for range repeat {
			picked = append(picked, sc)
		}
	}
	if only == "" {
		for _, sc := range all {
			if !sc.full || !smoke {
				add(sc)
			}
		}
		return picked, nil
	}
	byKey := map[string]scenario{"none": {key: "none", name: "fault-free"}}
	keys := []string{"none"}
	for _, sc := range all {
		byKey[sc.key] = sc
		keys = append(keys, sc.key)
	}
	for _, k := range strings.Split(only, ",") {
		if k == "" {
			continue
		}
		sc, ok := byKey[k]
		if !ok {
			return nil, fmt.Errorf("-faults: unknown fault %q (the keys: %s)", k, strings.Join(keys, ", "))
		}
		add(sc)
	}
	if len(picked) == 0 {
		return nil, fmt.Errorf("-faults %q names no fault (the keys: %s)", only, strings.Join(keys, ", "))
	}
	return picked, nil
}

// run boots the cluster (stored in running, for a second signal to abandon)
// and runs the waves.
func run(ctx context.Context, running *atomic.Pointer[stack.Stack], n int, smoke bool, only string, repeat int) error {
	// The selection is checked before the cluster boots, so a typo costs no
	// boot; the scenarios are picked again below, bound to the booted suite.
	if _, err := pick((&suite{}).scenarios(ctx), only, smoke, repeat); err != nil {
		return err
	}
	s, err := boot(ctx, running)
	if err != nil {
		if s != nil {
			s.close()
		}
		return err
	}
	defer s.close()
	picked, err := pick(s.scenarios(ctx), only, smoke, repeat)
	if err != nil {
		return err
	}
	// The first wave warms the processes up (connections, caches, the
	// workers' sessions); the second, fault-free, is the baseline.
	scenarios := append([]scenario{{key: "warm-up", name: "warm-up (no fault)"}, {key: "none", name: "fault-free"}}, picked...)
	var base time.Duration
	fmt.Printf("chaos: each wave: %d bom roots × %d teams × (account → vpc → %d routes) = %d resources\n",
		n, waveShape.Teams, waveRoutes, n*(1+waveShape.Descendants()))
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
