package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/converge-run/converge/examples/classic"
	"github.com/converge-run/converge/examples/stack"
)

// runTeardown is the teardown window (-teardown), after the measured run:
// every measured root is deleted as an operator deletes one
// (RequestDeletion, what the API's deleteResource calls), and the window
// ends when the probe counts none of their rows left. Every kind of the
// demo has a finalizer, so each row's teardown is a delete task through
// the worker (FAKE_DELETE_DELAY=0s: instant), dependents before their
// dependencies, children before their owner. It prints one line:
//
//	bench-teardown: n=<rows> resources_per_sec=<f> wall_ms=<f> pg_cpu_ms_per_resource=<f>
//	  converge_cpu_ms_per_resource=<f> worker_cpu_ms_per_resource=<f> cpu_cores=<f> seq_rows_per_resource=<f>
//
// (one line; wrapped here). n counts the rows removed (leaves and roots);
// the CPU figures are the three processes' over the window, divided by n;
// seq_rows_per_resource is the rows Seq Scans read from the fleet's tables,
// divided by n.
func runTeardown(ctx context.Context, st *stack.Stack, p params, roots, leaves int) (string, error) {
	pr, err := openProbe(ctx, st.DatabaseURL)
	if err != nil {
		return "", err
	}
	defer pr.close()
	before, err := pr.total(ctx)
	if err != nil {
		return "", err
	}
	n := roots + leaves
	target := before - n
	if p.statements > 0 {
		if err := st.ResetStatements(ctx); err != nil {
			return "", err
		}
	}
	cpuBefore, err := st.CPU()
	if err != nil {
		return "", err
	}
	seqBefore, err := st.SeqRowsRead(ctx)
	if err != nil {
		return "", err
	}
	started := time.Now()
	if err := deleteRoots(ctx, st, roots); err != nil {
		return "", err
	}
	tick := time.NewTicker(p.poll)
	defer tick.Stop()
	lastReport := time.Now()
	for {
		left, err := pr.total(ctx)
		if err != nil {
			return "", err
		}
		if left <= target {
			break
		}
		if time.Since(lastReport) >= 5*time.Second {
			lastReport = time.Now()
			fmt.Fprintf(os.Stderr, "bench: teardown %s: %d of %d rows left\n", time.Since(started).Round(time.Second), left-target, n)
		}
		if err := st.Exited(); err != nil {
			return "", err
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("teardown: %d of %d rows left: %w", left-target, n, ctx.Err())
		case <-tick.C:
		}
	}
	wall := time.Since(started)
	cpuAfter, err := st.CPU()
	if err != nil {
		return "", err
	}
	seqAfter, err := st.SeqRowsRead(ctx)
	if err != nil {
		return "", err
	}
	if p.statements > 0 {
		if err := printStatements(ctx, st, p.statements, n, "teardown"); err != nil {
			return "", err
		}
	}
	cpu := cpuAfter.Sub(cpuBefore)
	per := func(d time.Duration) float64 { return ms(d) / float64(n) }
	return fmt.Sprintf("bench-teardown: n=%d resources_per_sec=%.1f wall_ms=%.1f pg_cpu_ms_per_resource=%.3f"+
		" converge_cpu_ms_per_resource=%.3f worker_cpu_ms_per_resource=%.3f cpu_cores=%.2f seq_rows_per_resource=%.2f",
		n, float64(n)/wall.Seconds(), ms(wall), per(cpu.Postgres), per(cpu.Converge), per(cpu.Worker),
		(cpu.Postgres+cpu.Converge+cpu.Worker).Seconds()/wall.Seconds(),
		float64(seqAfter.Sub(seqBefore).Fleet)/float64(n)), nil
}

// deleteRoots requests every measured root's deletion from a few goroutines.
func deleteRoots(ctx context.Context, st *stack.Stack, roots int) error {
	return eachRoot(roots, "deletion requested", func(name string) error {
		if _, err := st.Store.RequestDeletion(ctx, classic.KindBOM, name, "bench"); err != nil {
			return fmt.Errorf("delete root %s: %w", name, err)
		}
		return nil
	})
}
