package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/converge-run/converge/examples/stack"
)

// runAgain is the second fleet's window (-again, after -teardown): the
// fleet's tables are analyzed as the teardown left them
// (store.AnalyzeFleetTables) — every row dead, its pages not yet truncated —
// as an ANALYZE in the teardown's wake does (an operator's, or an
// autovacuum pass whose truncation could not take its lock); Postgres then sizes each table at zero rows, however many it holds,
// until its next ANALYZE. The same roots are applied again and the window
// ends when the probe sees every root READY. It returns a bench-again: line
// (followUp) whose n is the leaves: the creation's rate against the plans
// those statistics give, for as long as they last — the control bundle's
// statistics guard (control.StatisticsGuard) analyzes each table again
// within about 10 s of its holding 10,000 rows, as it would in production.
func runAgain(ctx context.Context, st *stack.Stack, p params, roots, leaves int, spec json.RawMessage) (string, error) {
	pr, err := openProbe(ctx, st.DatabaseURL)
	if err != nil {
		return "", err
	}
	defer pr.close()
	zero, err := pr.store.AnalyzeFleetTables(ctx)
	if err != nil {
		return "", fmt.Errorf("again: %w", err)
	}
	if len(zero) == 0 {
		// a table truncated (or the warm-up's rows left): the statistics
		// are right, and the window would measure nothing new
		fmt.Fprintf(os.Stderr, "bench: again: no fleet table is sized at zero rows over its pages\n")
	}
	return followUp(ctx, st, p, "again", leaves, func(started time.Time) error {
		if err := applyRoots(ctx, st, roots, spec); err != nil {
			return err
		}
		return pr.waitRoots(ctx, st, roots, p.poll, started)
	})
}
