package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

func (a *app) rollbackCommand() *cobra.Command {
	var (
		kind   string
		to     int
		dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "rollback KIND/NAME --to GENERATION [--dry-run]",
		Short: "Apply a kept generation's spec again, as a new generation",
		Long: `Roll a resource back to an earlier generation: its kept spec, labels and
provider config ref are applied again as a NEW generation (the generation
number only ever grows), at the kind version that generation was applied at
(a resource that moved to another version since migrates back), validated
against that version's current schema like any apply, scheduled like any spec
change, and recorded in the resource's events as RolledBack with who did it. conctl history lists the kept generations.
--dry-run validates and prints what would happen without writing.`,
		Example: `  # Give bom/acme a fourth team (generation 2), see what changed, then apply
  # generation 1's spec again (generation 3)
  conctl get bom acme -o yaml | sed 's/teams: 3/teams: 4/' | conctl apply -f -
  conctl history bom/acme --diff
  conctl rollback bom/acme --to 1 --dry-run
  conctl rollback bom/acme --to 1`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if to < 1 {
				return usageError{fmt.Errorf("--to GENERATION is required (a kept generation, see conctl history)")}
			}
			r, err := parseRef(args[0], kind)
			if err != nil {
				return err
			}
			return a.rollback(cmd.Context(), r, to, dryRun)
		},
	}
	cmd.Flags().StringVar(&kind, "kind", "", "the kind, when NAME is given without KIND/")
	cmd.Flags().IntVar(&to, "to", 0, "the generation whose spec to apply again")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "validate and report without writing")
	return cmd
}

func (a *app) rollback(ctx context.Context, r ref, to int, dryRun bool) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	// what it is now, to tell a rollback that changes nothing (generation
	// to's spec, labels, provider config and version are already the
	// current ones); a failed read is left to the rollback to report
	before, beforeErr := GetResource(ctx, c.GQL, r.kind, r.name)
	resp, err := RollbackResource(ctx, c.GQL, r.kind, r.name, to, dryRun)
	if err != nil {
		return fmt.Errorf("rollback %s: %w", r, apiError(err))
	}
	res := resp.RollbackResource.ResourceRow
	if a.output == outName {
		a.printNames(resourceName(res.Kind, res.Name))
		return nil
	}
	if ok, err := a.structured(res); ok {
		return err
	}
	suffix := ""
	if dryRun {
		suffix = " (dry run: nothing written)"
	}
	if beforeErr == nil && before.Resource != nil && sameRollbackState(before.Resource.ResourceRow, res) {
		_, err = fmt.Fprintf(a.stdout(), "resource/%s unchanged: generation %d's spec is already current (generation %d)%s\n",
			r, to, res.Generation, suffix)
		return err
	}
	_, err = fmt.Fprintf(a.stdout(), "resource/%s rolled back to the spec of generation %d: now generation %d%s\n",
		r, to, res.Generation, suffix)
	return err
}

// sameRollbackState reports whether a rollback left what it restores as it
// was: the generation (a spec change bumps it), the version, the labels and
// the provider config.
func sameRollbackState(before, after ResourceRow) bool {
	return before.Id == after.Id && before.Generation == after.Generation && before.Version == after.Version &&
		string(before.Labels) == string(after.Labels) && ptrEqual(before.ProviderConfigRef, after.ProviderConfigRef)
}

func ptrEqual[T comparable](a, b *T) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
