package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

func (a *app) clusterCommand() *cobra.Command {
	var kind string
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Show the fleet: server version, members and resource counts by phase",
		Long: `Show the server's version, the role of your token, every cluster member (one
running converge process: its role, liveness derived from its heartbeat, owned
shard range and in-flight tasks) and the number of resources in each phase.
"conctl cluster drain MEMBER" and "conctl cluster kill MEMBER" ask one member
to leave gracefully or to exit at once (admin token).`,
		Example: `  conctl cluster
  conctl cluster --kind vpc -o wide
  conctl cluster -o json`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			var k *string
			if kind != "" {
				k = &kind
			}
			resp, err := ClusterSummary(cmd.Context(), c.GQL, k)
			if err != nil {
				return fmt.Errorf("read the cluster: %w", apiError(err))
			}
			if ok, err := a.structured(resp); ok {
				return err
			}
			fmt.Fprintf(a.stdout(), "Server:   %s (version %s)\n", c.HTTPEndpoint, resp.Version)
			auth := "open API"
			if resp.Viewer.AuthRequired {
				auth = "token required"
			}
			fmt.Fprintf(a.stdout(), "Access:   %s (%s)\n", resp.Viewer.Role, auth)
			counts := map[Phase]int{}
			total := 0
			for _, pc := range resp.PhaseCounts {
				counts[pc.Phase] = pc.Count
				total += pc.Count
			}
			scope := "all kinds"
			if kind != "" {
				scope = kind
			}
			fmt.Fprintf(a.stdout(), "Resources (%s): %d — %s\n\n", scope, total, phaseCountLine(counts))
			rows := make([]MemberRow, len(resp.ClusterMembers))
			for i, m := range resp.ClusterMembers {
				rows[i] = m.MemberRow
			}
			return a.memberTable(rows)
		},
	}
	cmd.Flags().StringVar(&kind, "kind", "", "count only this kind's resources")
	cmd.AddCommand(a.memberControlCommands()...)
	return cmd
}

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print conctl's version and the server's",
		Long:    `Print conctl's build version and, when the server answers, its build version.`,
		Example: `  conctl version`,
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(a.stdout(), "conctl: %s\n", a.env.Version)
			c, err := a.client()
			if err != nil {
				return err
			}
			resp, err := ServerVersion(cmd.Context(), c.GQL)
			if err != nil {
				return fmt.Errorf("ask the server its version: %w", apiError(err))
			}
			fmt.Fprintf(a.stdout(), "server: %s (%s)\n", resp.Version, c.HTTPEndpoint)
			return nil
		},
	}
}
