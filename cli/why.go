package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

func (a *app) whyCommand() *cobra.Command {
	var kind string
	cmd := &cobra.Command{
		Use:   "why KIND/NAME",
		Short: "Explain what holds a resource: the exact gate, and what releases it",
		Long: `Explain why a resource is not (yet) where its spec says: the gates holding it,
the one holding it now first, as the database computes them with the
scheduler's own predicates — an upstream that has not synced, descendants
still settling, the kind's concurrency cap full, no ready worker for the kind,
a task queued, claimed or backing off, a terminal failure, a quarantine, an
orphan's grace, a deletion waiting on children or dependents, a composer not
done, a providerconfig it names that does not exist. "nothing holds it" means
it is READY or DEGRADED for its live spec.`,
		Example: `  conctl why bom/acme
  conctl why vpc/acme-t0-vpc -o json`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := parseRef(args[0], kind)
			if err != nil {
				return err
			}
			return a.why(cmd.Context(), r)
		},
	}
	cmd.Flags().StringVar(&kind, "kind", "", "the kind, when NAME is given without KIND/")
	return cmd
}

func (a *app) why(ctx context.Context, r ref) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	resp, err := WhyResource(ctx, c.GQL, r.kind, r.name)
	if err != nil {
		return fmt.Errorf("why %s: %w", r, apiError(err))
	}
	if resp.Resource == nil {
		return notFound("resource", r.String())
	}
	d := resp.Resource
	if ok, err := a.structured(d); ok {
		return err
	}
	w := &describeWriter{w: a.stdout()}
	w.line("%s/%s is %s (generation %d, synced %d)", d.Kind, d.Name, d.Phase, d.Generation, d.SyncedGeneration)
	if len(d.WaitingOn) == 0 {
		w.line("nothing holds it")
		return w.err
	}
	for i, g := range d.WaitingOn {
		lead := "  and"
		if i == 0 {
			lead = "waiting on"
		}
		w.line("%s %s: %s%s", lead, g.Gate, g.Message, a.whyTimes(g.Since, g.Until))
		if len(g.Blockers) > 0 {
			names := make([]string, len(g.Blockers))
			for j, b := range g.Blockers {
				names[j] = fmt.Sprintf("%s/%s (%s)", b.Kind, b.Name, b.Phase)
			}
			more := ""
			if g.BlockerCount > len(g.Blockers) {
				more = fmt.Sprintf(" and %d more", g.BlockerCount-len(g.Blockers))
			}
			w.line("    %s%s", strings.Join(names, ", "), more)
		}
	}
	return w.err
}

func (a *app) whyTimes(since, until *time.Time) string {
	var parts []string
	if since != nil {
		parts = append(parts, "since "+a.when(since))
	}
	if until != nil {
		parts = append(parts, "until "+until.UTC().Format(time.RFC3339))
	}
	if len(parts) == 0 {
		return ""
	}
	return " [" + strings.Join(parts, ", ") + "]"
}
