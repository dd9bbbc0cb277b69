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
// dependencies, children before their owner. It returns a bench-teardown:
// line (followUp) whose n counts the rows removed, leaves and roots.
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
	return followUp(ctx, st, p, "teardown", n, func(started time.Time) error {
		if err := deleteRoots(ctx, st, roots); err != nil {
			return err
		}
		tick := time.NewTicker(p.poll)
		defer tick.Stop()
		lastReport := time.Now()
		for {
			left, err := pr.total(ctx)
			if err != nil {
				return err
			}
			if left <= target {
				return nil
			}
			if time.Since(lastReport) >= 5*time.Second {
				lastReport = time.Now()
				fmt.Fprintf(os.Stderr, "bench: teardown %s: %d of %d rows left\n", time.Since(started).Round(time.Second), left-target, n)
			}
			if err := st.Exited(); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%d of %d rows left: %w", left-target, n, ctx.Err())
			case <-tick.C:
			}
		}
	})
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
