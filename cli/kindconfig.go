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
}

func (a *app) kindCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kind",
		Short: "Kinds' live operational policy: conctl kind config KIND",
		Long: `Commands on a kind as a whole. The kind's manifest is applied with conctl apply;
its live operational policy (kind_config: the concurrency cap, the task
deadline, the drift resync interval, the orphan grace) is edited here without
re-applying the manifest, and an edit survives a later re-apply.`,
		Example: `  conctl kind config vpc
  conctl kind config vpc --max-inflight 8 --task-deadline 2m --resync 10m`,
		Args: exactArgs(0),
	}
	cmd.AddCommand(a.kindConfigCommand(), a.kindHistoryLimitCommand())
	return cmd
}

func (a *app) kindConfigCommand() *cobra.Command {
	var fl kindConfigFlags
	cmd := &cobra.Command{
		Use:   "config KIND [--max-inflight N] [--task-deadline D] [--resync D] [--resync-recomposes] [--orphan-grace D]",
		Short: "Show or edit a kind's live operational policy (updateKindConfig)",
		Long: `Without policy flags, show a kind's live policy. With them, change only the
given fields (the others are kept) and show the result. Durations are Go
durations (90s, 5m, 1h) or whole seconds (90); 0 turns a limit off (no
concurrency cap, no task deadline, no resync). --version picks the kind version
when several are applied.`,
		Example: `  # What is the policy of vpc?
  conctl kind config vpc

  # At most 8 vpc tasks at once, each at most 2 minutes, re-observed every 10 minutes
  conctl kind config vpc --max-inflight 8 --task-deadline 2m --resync 10m

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
	if f.Changed("resync-recomposes") {
		b := fl.recomposes
		in.ResyncRecomposes = &b
	}
	changed := in.MaxInflight != nil || in.TaskDeadlineSecs != nil || in.ResyncIntervalSecs != nil ||
		in.OrphanGraceSecs != nil || in.ResyncRecomposes != nil
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
		OrphanGraceSecs: k.Config.OrphanGraceSecs, UpdatedAt: k.UpdatedAt}
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
	return renderTable(a.stdout(), []string{"KIND", "VERSION", "MAX-INFLIGHT", "DEADLINE", "RESYNC", "ORPHAN-GRACE"},
		[][]string{{k.Name, k.Version, unlimited(cfg.MaxInflight), secs(cfg.TaskDeadlineSecs), resync,
			secs(cfg.OrphanGraceSecs)}})
}

// completeKindNames completes a KIND argument from the server.
func (a *app) completeKindNames(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return a.completeTargets(typeKind)(cmd, []string{"kind"}, toComplete)
}
