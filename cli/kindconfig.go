package cli

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// kindConfigFlags are kind config's policy flags (strings, so a duration
// or a plain number of seconds both read).
type kindConfigFlags struct {
	version     string
	maxInflight int
	deadline    string
	resync      string
	recomposes  bool
	orphanGrace string
	maxAttempts int
}

func (a *app) kindCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kind",
		Short: "Kinds' live operational policy and generated types: conctl kind config|types KIND",
		Long: `Commands on a kind as a whole. The kind's manifest is applied with conctl apply;
its live operational policy (kind_config: the concurrency cap, the task
deadline, the drift resync interval, the orphan grace, the dead-letter bound)
is edited here without re-applying the manifest, and an edit survives a later
re-apply. conctl kind delete removes one version, refused while anything
still depends on it. Go and TypeScript types are generated from its stored
schemas with kind types.`,
		Example: `  conctl kind config route
  conctl kind config route --max-inflight 8 --task-deadline 2m --resync 10m
  conctl kind types route --lang go`,
		Args: exactArgs(0),
	}
	cmd.AddCommand(a.kindConfigCommand(), a.kindDeleteCommand(), a.kindTypesCommand(), a.kindHistoryLimitCommand())
	return cmd
}

func (a *app) kindConfigCommand() *cobra.Command {
	var fl kindConfigFlags
	cmd := &cobra.Command{
		Use:   "config KIND [--max-inflight N] [--task-deadline D] [--resync D] [--resync-recomposes] [--orphan-grace D] [--max-transient-attempts N]",
		Short: "Show or edit a kind's live operational policy (updateKindConfig)",
		Long: `Without policy flags, show a kind's live policy. With them, change only the
given fields (the others are kept) and show the result. Durations are Go
durations (90s, 5m, 1h) or whole seconds (90); 0 turns a limit off (no
concurrency cap, no task deadline, no resync). --max-transient-attempts N
dead-letters a reconcile after N transient failures in a row (terminal until
its spec changes; 0 = retry forever). --version picks the kind version when
several are applied.`,
		Example: `  # What is the policy of route?
  conctl kind config route

  # At most 8 route tasks at once, each at most 2 minutes, re-observed every 10 minutes
  conctl kind config route --max-inflight 8 --task-deadline 2m --resync 10m

  # Stop retrying a vpc v2 reconcile after 5 transient failures in a row (vpc has v1 and v2)
  conctl kind config vpc --version v2 --max-transient-attempts 5

  # Resyncs also re-run the composer; no concurrency cap
  conctl kind config bom --resync-recomposes --max-inflight 0 -o yaml`,
		Args:              exactArgs(1),
		ValidArgsFunction: a.completeKindNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			in, changed, err := fl.input(cmd)
			if err != nil {
				return err
			}
			return a.kindConfig(cmd.Context(), args[0], fl.version, in, changed)
		},
	}
	f := cmd.Flags()
	f.StringVar(&fl.version, "version", "", "the kind version (default: its only version)")
	f.IntVar(&fl.maxInflight, "max-inflight", 0, "the global concurrency cap of the kind's tasks (0 = unlimited)")
	f.StringVar(&fl.deadline, "task-deadline", "", "the most one task may run (0 = no deadline)")
	f.StringVar(&fl.resync, "resync", "", "the drift re-observe interval (0 = off)")
	f.BoolVar(&fl.recomposes, "resync-recomposes", false, "whether a resync also re-runs the composer (=false to turn off)")
	f.StringVar(&fl.orphanGrace, "orphan-grace", "", "the grace window before a dropped child is torn down")
	f.IntVar(&fl.maxAttempts, "max-transient-attempts", 0,
		"transient failures in a row before a reconcile is dead-lettered (0 = never)")
	return cmd
}

// input builds the patch from the flags given.
func (fl kindConfigFlags) input(cmd *cobra.Command) (KindConfigInput, bool, error) {
	f := cmd.Flags()
	var in KindConfigInput
	if f.Changed("max-inflight") {
		if fl.maxInflight < 0 {
			return in, false, usageError{fmt.Errorf("--max-inflight %d: want 0 (unlimited) or more", fl.maxInflight)}
		}
		n := fl.maxInflight
		in.MaxInflight = &n
	}
	for _, d := range []struct {
		flag, value string
		dst         **int
	}{
		{"task-deadline", fl.deadline, &in.TaskDeadlineSecs},
		{"resync", fl.resync, &in.ResyncIntervalSecs},
		{"orphan-grace", fl.orphanGrace, &in.OrphanGraceSecs},
	} {
		if !f.Changed(d.flag) {
			continue
		}
		n, err := parseSeconds(d.flag, d.value)
		if err != nil {
			return in, false, err
		}
		*d.dst = &n
	}
	if f.Changed("max-transient-attempts") {
		if fl.maxAttempts < 0 {
			return in, false, usageError{fmt.Errorf("--max-transient-attempts %d: want 0 (never) or more", fl.maxAttempts)}
		}
		n := fl.maxAttempts
		in.MaxTransientAttempts = &n
	}
	if f.Changed("resync-recomposes") {
		b := fl.recomposes
		in.ResyncRecomposes = &b
	}
	changed := in.MaxInflight != nil || in.TaskDeadlineSecs != nil || in.ResyncIntervalSecs != nil ||
		in.OrphanGraceSecs != nil || in.ResyncRecomposes != nil || in.MaxTransientAttempts != nil
	return in, changed, nil
}

// parseSeconds reads a duration flag: a Go duration or whole seconds.
func parseSeconds(flag, s string) (int, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.Atoi(s); err == nil {
		if n < 0 {
			return 0, usageError{fmt.Errorf("--%s %s: want 0 or more seconds", flag, s)}
		}
		return n, nil
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, usageError{fmt.Errorf("--%s %q: want a duration (90s, 5m, 1h) or whole seconds", flag, s)}
	case d < 0:
		return 0, usageError{fmt.Errorf("--%s %s: want 0 or more", flag, s)}
	case d%time.Second != 0:
		return 0, usageError{fmt.Errorf("--%s %s: want whole seconds", flag, s)}
	case d/time.Second > math.MaxInt32:
		return 0, usageError{fmt.Errorf("--%s %s: at most %d seconds", flag, s, math.MaxInt32)}
	}
	return int(d / time.Second), nil
}

// kindConfigView is what kind config prints with -o json|yaml.
type kindConfigView struct {
	Kind    string         `json:"kind"`
	Version string         `json:"version"`
	Config  *KindConfigRow `json:"config"`
}

func (a *app) kindConfig(ctx context.Context, kind, version string, in KindConfigInput, changed bool) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	var v *string
	if version != "" {
		v = &version
	}
	resp, err := GetKind(ctx, c.GQL, kind, v)
	if err != nil {
		return fmt.Errorf("get kind %s: %w", kind, apiError(err))
	}
	if resp.Kind == nil {
		return notFound("kind", kind)
	}
	k := resp.Kind
	cfg := KindConfigRow{MaxInflight: k.Config.MaxInflight, TaskDeadlineSecs: k.Config.TaskDeadlineSecs,
		ResyncIntervalSecs: k.Config.ResyncIntervalSecs, ResyncRecomposes: k.Config.ResyncRecomposes,
		OrphanGraceSecs: k.Config.OrphanGraceSecs, MaxTransientAttempts: k.Config.MaxTransientAttempts,
		UpdatedAt: k.UpdatedAt}
	if changed {
		up, err := UpdateKindConfig(ctx, c.GQL, k.Name, k.Version, in)
		if err != nil {
			return fmt.Errorf("update the config of kind %s %s: %w", k.Name, k.Version, apiError(err))
		}
		cfg = up.UpdateKindConfig.KindConfigRow
	}
	if ok, err := a.structured(kindConfigView{Kind: k.Name, Version: k.Version, Config: &cfg}); ok {
		return err
	}
	if changed {
		fmt.Fprintf(a.stdout(), "kind/%s %s configured\n", k.Name, k.Version)
	}
	resync := secs(cfg.ResyncIntervalSecs)
	if cfg.ResyncIntervalSecs > 0 && cfg.ResyncRecomposes {
		resync += "+recompose"
	}
	return renderTable(a.stdout(), []string{"KIND", "VERSION", "MAX-INFLIGHT", "DEADLINE", "RESYNC", "ORPHAN-GRACE",
		"DEAD-LETTER-AFTER"},
		[][]string{{k.Name, k.Version, unlimited(cfg.MaxInflight), secs(cfg.TaskDeadlineSecs), resync,
			secs(cfg.OrphanGraceSecs), deadLetterAfter(cfg.MaxTransientAttempts)}})
}

// deadLetterAfter renders the dead-letter bound: "5 attempts", or "never".
func deadLetterAfter(n int) string {
	if n == 0 {
		return "never"
	}
	return strconv.Itoa(n) + " attempts"
}

func (a *app) kindDeleteCommand() *cobra.Command {
	var version string
	cmd := &cobra.Command{
		Use:   "delete KIND --version V",
		Short: "Remove one kind version (deleteKindManifest); never strands what depends on it",
		Long: `Remove one applied version of a kind and its live policy. It is refused, with
the resources named, while resources are instances of that version (apply
them at another version first: they migrate live, or delete them), and for
the kind's last version while providerconfigs of the kind or reactor bindings
naming it remain. -o json|yaml prints the outcome as a one-item list
{"items": [{"object": "kind/KIND", "version": "V", "outcome": "deleted"}]}, as
delete does.`,
		Example: `  # vpc v1 is retired once every vpc runs at v2; until then it is refused
  conctl kind delete vpc --version v1   # exits 1: the demo's vpcs run v1`,
		Args:              exactArgs(1),
		ValidArgsFunction: a.completeKindNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			if version == "" {
				return usageError{fmt.Errorf("--version is required: name the kind version to delete")}
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			resp, err := DeleteKindManifest(cmd.Context(), c.GQL, args[0], version)
			if err != nil {
				return fmt.Errorf("delete kind %s %s: %w", args[0], version, apiError(err))
			}
			if !resp.DeleteKindManifest {
				return notFound("kind", args[0]+" "+version)
			}
			a.report(actionResult{Object: "kind/" + args[0], Version: version, Outcome: "deleted"})
			return nil
		},
	}
	cmd.Flags().StringVar(&version, "version", "", "the kind version to delete (required)")
	return cmd
}

// completeKindNames completes a KIND argument from the server.
func (a *app) completeKindNames(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return a.completeTargets(typeKind)(cmd, []string{"kind"}, toComplete)
}
