package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"
)

// memberControl is one member action: its verb, the mutation, and what the
// member does.
type memberControl struct {
	verb, short, long, example string
	do                         func(ctx context.Context, c *Conn, id string) (MemberRow, string, error)
}

func (a *app) memberControlCommands() []*cobra.Command {
	drain := memberControl{verb: "drain", short: "Drain a cluster member: it stops claiming, finishes its work and leaves",
		long: `Ask a running member to leave gracefully (admin token). It stops claiming at
once and its shards re-tile to the other members of its role; it finishes or
hands back its in-flight work within its drain budget (SHUTDOWN_DRAIN),
deregisters and exits, as on SIGTERM. The member acts within about a second.
Under Kubernetes its Deployment starts a replacement pod (scale the Deployment
to remove capacity). With --wait, conctl waits until the member has left.`,
		example: `  # Find the member's ID, then drain it and wait until it has left
  conctl get members
  conctl cluster drain broker-host-a-4242-118532 --wait   # placeholder ID: one that conctl get members lists`,
		do: func(ctx context.Context, c *Conn, id string) (MemberRow, string, error) {
			r, err := DrainClusterMember(ctx, c.GQL, id)
			if err != nil {
				return MemberRow{}, "", err
			}
			return r.DrainClusterMember.MemberRow, deref(r.DrainClusterMember.RequestedBy), nil
		}}
	kill := memberControl{verb: "kill", short: "Kill a cluster member: it exits at once, as a crash would",
		long: `Ask a running member to exit at once without draining (admin token), as a
crash would: its peers see its liveness lock released within about a second,
free its leases and re-tile its shards, and its in-flight tasks run again
elsewhere. It overrides a drain under way. With --wait, conctl waits until the
member is gone from the membership.`,
		example: `  conctl cluster kill broker-host-a-4242-118532 --wait   # placeholder ID: one that conctl get members lists`,
		do: func(ctx context.Context, c *Conn, id string) (MemberRow, string, error) {
			r, err := KillClusterMember(ctx, c.GQL, id)
			if err != nil {
				return MemberRow{}, "", err
			}
			return r.KillClusterMember.MemberRow, deref(r.KillClusterMember.RequestedBy), nil
		}}
	return []*cobra.Command{a.memberControlCommand(drain), a.memberControlCommand(kill)}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func (a *app) memberControlCommand(mc memberControl) *cobra.Command {
	var (
		wait    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use: mc.verb + " MEMBER [--wait]", Short: mc.short, Example: mc.example,
		Long: mc.long + `

-o json|yaml prints the member as the request left it (and nothing else on
stdout); --wait then waits as without -o, exiting 1 when the member is still
registered at --timeout.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkTimeout(wait, timeout); err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			m, by, err := mc.do(cmd.Context(), c, args[0])
			if err != nil {
				return fmt.Errorf("%s cluster member %s: %w", mc.verb, args[0], apiError(err))
			}
			structured, err := a.structured(m)
			if err != nil {
				return err
			}
			if !structured {
				fmt.Fprintf(a.stdout(), "member %s: %s requested by %s (status %s)\n", m.Id, mc.verb, by, m.Status)
			}
			if !wait {
				return nil
			}
			if err := a.waitMemberGone(cmd.Context(), c, m.Id, timeout); err != nil {
				return err
			}
			if !structured { // -o json|yaml: stdout holds the one object
				fmt.Fprintf(a.stdout(), "member %s: left the membership\n", m.Id)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the member has left the membership")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "how long --wait waits, a positive duration (a drain takes up to SHUTDOWN_DRAIN)")
	return cmd
}

// waitMemberGone polls the membership every 500 ms until id is gone. A
// read the server refuses (a GraphQL error: FORBIDDEN, ...) ends the wait
// with it; one that does not reach the server (a restart, the drained
// member serving the API) is tried again, and the last such failure is
// named if the member is still listed at the timeout.
func (a *app) waitMemberGone(ctx context.Context, c *Conn, id string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		resp, err := ListClusterMembers(ctx, c.GQL)
		switch {
		case err == nil:
			lastErr = nil
			if !slices.ContainsFunc(resp.ClusterMembers, func(m ListClusterMembersClusterMembersClusterMember) bool {
				return m.Id == id
			}) {
				return nil
			}
		case ctx.Err() != nil: // cut short by the timeout or an interrupt
		case ErrorCode(apiError(err)) != "":
			return fmt.Errorf("wait for member %s to leave: %w", id, apiError(err))
		default:
			lastErr = err
		}
		select {
		case <-ctx.Done():
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return ctx.Err()
			}
			if lastErr != nil {
				return fmt.Errorf("member %s: not seen to leave within %s: the last membership read failed: %s",
					id, timeout, FormatError(lastErr))
			}
			return fmt.Errorf("member %s still registered after %s (conctl get members shows its status)", id, timeout)
		case <-tick.C:
		}
	}
}
