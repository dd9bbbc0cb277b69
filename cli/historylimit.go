package cli

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
)

func (a *app) kindHistoryLimitCommand() *cobra.Command {
	var version string
	cmd := &cobra.Command{
		Use:   "history-limit KIND [N] [--version V]",
		Short: "Show or set how many applied generations each resource of a kind keeps",
		Long: `Without N, show how many applied generations (spec, labels, provider config
ref) each resource of the kind keeps in its spec history (conctl history,
conctl rollback). With N (0-1000; 0 keeps none), set it: each resource's
history is pruned to the newest N on its next apply.`,
		Example: `  conctl kind history-limit bom
  conctl kind history-limit bom 50`,
		Args:              rangeArgs(1, 2),
		ValidArgsFunction: a.completeKindNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				return a.showHistoryLimit(cmd.Context(), args[0], version)
			}
			n, err := strconv.Atoi(args[1])
			if err != nil || n < 0 || n > 1000 {
				return usageError{fmt.Errorf("%q: want a number of generations, 0-1000", args[1])}
			}
			return a.setHistoryLimit(cmd.Context(), args[0], version, n)
		},
	}
	cmd.Flags().StringVar(&version, "version", "", "the kind version (default: its only version)")
	return cmd
}

func (a *app) showHistoryLimit(ctx context.Context, kind, version string) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	var v *string
	if version != "" {
		v = &version
	}
	resp, err := KindHistoryLimit(ctx, c.GQL, kind, v)
	if err != nil {
		return fmt.Errorf("kind %s: %w", kind, apiError(err))
	}
	if resp.Kind == nil {
		return notFound("kind", kind)
	}
	if ok, err := a.structured(resp.Kind); ok {
		return err
	}
	_, err = fmt.Fprintf(a.stdout(), "%s/%s keeps %d generations per resource\n", resp.Kind.Name, resp.Kind.Version, resp.Kind.HistoryLimit)
	return err
}

func (a *app) setHistoryLimit(ctx context.Context, kind, version string, n int) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	if version == "" {
		resp, err := KindHistoryLimit(ctx, c.GQL, kind, nil)
		if err != nil {
			return fmt.Errorf("kind %s: %w", kind, apiError(err))
		}
		if resp.Kind == nil {
			return notFound("kind", kind)
		}
		version = resp.Kind.Version
	}
	resp, err := SetKindHistoryLimit(ctx, c.GQL, kind, version, n)
	if err != nil {
		return fmt.Errorf("kind %s/%s: %w", kind, version, apiError(err))
	}
	if ok, err := a.structured(resp.SetKindHistoryLimit); ok {
		return err
	}
	_, err = fmt.Fprintf(a.stdout(), "%s/%s keeps %d generations per resource\n", kind, version, resp.SetKindHistoryLimit.HistoryLimit)
	return err
}
