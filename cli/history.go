package cli

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/converge-run/converge/core/resource"
)

func (a *app) historyCommand() *cobra.Command {
	var (
		kind  string
		first int
		diff  bool
	)
	cmd := &cobra.Command{
		Use:   "history KIND/NAME [--diff]",
		Short: "List a resource's kept spec generations (with --diff, what each changed)",
		Long: `List the applied generations a resource's spec history keeps, newest first: the
generation, why it was applied (Created, SpecUpdated, LabelsUpdated,
VersionMigrated, RolledBack), who applied it and when. The kind's historyLimit bounds how many are kept
(conctl rollback restores one). With --diff, each generation is followed by
the spec and labels changes from the kept generation before it (and its kind
version, when it moved).`,
		Example: `  conctl history bom/acme
  conctl history bom/acme --diff
  conctl history bom/acme -o json`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if first < 1 || first > 1000 {
				return usageError{fmt.Errorf("--first %d: want 1-1000", first)}
			}
			r, err := parseRef(args[0], kind)
			if err != nil {
				return err
			}
			return a.history(cmd.Context(), r, first, diff)
		},
	}
	cmd.Flags().StringVar(&kind, "kind", "", "the kind, when NAME is given without KIND/")
	cmd.Flags().IntVar(&first, "first", 20, "how many of the newest generations to list (1-1000)")
	cmd.Flags().BoolVar(&diff, "diff", false, "show what each generation changed from the kept one before it")
	return cmd
}

func (a *app) history(ctx context.Context, r ref, first int, diff bool) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	// one more than asked, so the oldest listed has a predecessor to diff against
	resp, err := ResourceSpecHistory(ctx, c.GQL, r.kind, r.name, min(first+1, 1000))
	if err != nil {
		return fmt.Errorf("history %s: %w", r, apiError(err))
	}
	if resp.Resource == nil {
		return notFound("resource", r.String())
	}
	hs := resp.Resource.SpecHistory
	shown := hs[:min(first, len(hs))]
	if ok, err := a.structured(shown); ok {
		return err
	}
	rows := make([][]string, len(shown))
	for i, h := range shown {
		reason := h.Reason
		if h.RolledBackFrom != nil {
			reason += fmt.Sprintf(" (from %d)", *h.RolledBackFrom)
		}
		rows[i] = []string{itoa(h.Generation), reason, h.Actor, a.age(h.CreatedAt)}
	}
	if !diff {
		return renderTable(a.stdout(), []string{"GENERATION", "REASON", "ACTOR", "AGE"}, rows)
	}
	w := &describeWriter{w: a.stdout()}
	for i, h := range shown {
		w.line("generation %s  %s  by %s  %s ago", rows[i][0], rows[i][1], h.Actor, rows[i][3])
		if i+1 >= len(hs) {
			w.line("  (the oldest kept generation)")
			continue
		}
		prev := hs[i+1]
		spec, errS := changesOf(prev.Spec, h.Spec)
		labels, errL := changesOf(prev.Labels, h.Labels)
		if errS != nil || errL != nil {
			return fmt.Errorf("history %s: diff generation %d: %w", r, h.Generation, firstErr(errS, errL))
		}
		moved := h.Version != nil && prev.Version != nil && *h.Version != *prev.Version
		if moved {
			w.line("  version %s -> %s", *prev.Version, *h.Version)
		}
		writeChanges(w, "spec", spec)
		writeChanges(w, "labels", labels)
		if len(spec)+len(labels) == 0 && !moved {
			w.line("  no spec or labels change from generation %d", prev.Generation)
		}
	}
	return w.err
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// writeChanges prints changes as "- path: before" / "+ path: after" lines.
func writeChanges(w *describeWriter, what string, cs []change) {
	for _, c := range cs {
		path := what + c.path
		if c.before != "" {
			w.line("  - %s: %s", path, c.before)
		}
		if c.after != "" {
			w.line("  + %s: %s", path, c.after)
		}
	}
}

// change is one JSON difference, its sides compact JSON ("" = absent).
type change struct{ path, before, after string }

// changesOf diffs two JSON documents (resource.Diff, the server's diff).
func changesOf(before, after json.RawMessage) ([]change, error) {
	cs, err := resource.Diff(before, after)
	if err != nil {
		return nil, err
	}
	out := make([]change, len(cs))
	for i, c := range cs {
		out[i] = change{path: c.Path, before: string(c.Before), after: string(c.After)}
	}
	return out, nil
}
