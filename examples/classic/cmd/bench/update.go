package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/examples/classic"
	"github.com/converge-run/converge/examples/stack"
)

// runUpdate is the rollout window (-update), after the measured run: every
// measured root is applied again with a spec that changes every child's
// (leaf_sim set: the same instant, failure-free leaves, a different spec),
// as an operator rolls a change out over a fleet. Each root recomposes, its
// children's specs are rewritten (a generation each), every leaf
// reconciles again with its upstreams' values flowing down, and the roots
// roll up. The window ends when the probe sees every root READY again, and
// every leaf is then read back to check it was rewritten and reconciled at
// its new generation. It returns a bench-update: line (followUp) whose n
// is the leaves.
func runUpdate(ctx context.Context, st *stack.Stack, p params, roots, leaves int, spec classic.BOMSpec) (string, error) {
	pr, err := openProbe(ctx, st.DatabaseURL)
	if err != nil {
		return "", err
	}
	defer pr.close()
	zero := 0
	spec.LeafSim = &classic.Sim{LatencyMS: &zero}
	raw, err := json.Marshal(spec)
	if err != nil {
		return "", err
	}
	line, err := followUp(ctx, st, p, "update", leaves, func(started time.Time) error {
		if err := applyRoots(ctx, st, roots, raw); err != nil {
			return err
		}
		return pr.waitRoots(ctx, st, roots, p.poll, started)
	})
	if err != nil {
		return "", err
	}
	if err := checkRolledOut(ctx, st, leaves); err != nil {
		return "", err
	}
	return line, nil
}

// checkRolledOut reads every leaf back: each measured one must carry the
// new spec (its sim block) and be READY, reconciled at that generation —
// the roots' READY alone would not show a rollout that skipped its leaves.
func checkRolledOut(ctx context.Context, st *stack.Stack, leaves int) error {
	done, stale := 0, 0
	var first string
	for _, kind := range []string{classic.KindAccount, classic.KindVPC, classic.KindRoute} {
		err := each(ctx, st.Store, kind, func(r resource.Resource) {
			if r.RootID == nil || strings.HasPrefix(r.Name, "warmup-") {
				return
			}
			if r.Phase == resource.PhaseReady && r.SyncedGen == r.Generation && r.Generation > 1 &&
				bytes.Contains(r.Spec, []byte(`"sim"`)) {
				done++
				return
			}
			stale++
			if first == "" {
				first = fmt.Sprintf("%s/%s (phase %s, generation %d, synced %d)", kind, r.Name, r.Phase, r.Generation, r.SyncedGen)
			}
		})
		if err != nil {
			return err
		}
	}
	if done != leaves || stale > 0 {
		return fmt.Errorf("update: %d of %d leaves rolled out, %d not (the first: %s)", done, leaves, stale, first)
	}
	return nil
}
