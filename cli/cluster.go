package cli

import (
	"context"
	"errors"
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

// versionInfo is what version prints with -o json|yaml: the server's
// fields are left out when it cannot be asked.
type versionInfo struct {
	Client   string `json:"client"`
	Server   string `json:"server,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
}

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print conctl's version and the server's",
		Long: `Print conctl's build version and, when the server answers, its build version
and the GraphQL endpoint asked. -o json|yaml prints them as one object
({"client", "server", "endpoint"}; without the server's fields, and exit
status 1, when the server cannot be asked).`,
		Example: `  conctl version
  conctl version -o json`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := a.version(cmd.Context())
			if ok, werr := a.structured(v); ok {
				return errors.Join(err, werr)
			}
			fmt.Fprintf(a.stdout(), "conctl: %s\n", v.Client)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout(), "server: %s (%s)\n", v.Server, v.Endpoint)
			return nil
		},
	}
}

// version reads conctl's version and asks the server its own.
func (a *app) version(ctx context.Context) (versionInfo, error) {
	v := versionInfo{Client: a.env.Version}
	c, err := a.client()
	if err != nil {
		return v, err
	}
	resp, err := ServerVersion(ctx, c.GQL)
	if err != nil {
		return v, fmt.Errorf("ask the server its version: %w", apiError(err))
	}
	v.Server, v.Endpoint = resp.Version, c.HTTPEndpoint
	return v, nil
}
