package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

func (a *app) deleteCommand() *cobra.Command {
	var (
		kind    string
		wait    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "delete TYPE NAME... | TYPE/NAME... [--wait]",
		Short: "Delete resources, providerconfigs or reactor bindings",
		Long: `Delete objects by name. TYPE is a kind (delete bom acme, delete bom/acme: that
kind's resources), resource, providerconfig (pc) or reactorbinding (rb).

Deleting a resource is a soft delete: it marks the resource's teardown tree
(everything it composes and everything that depends on it) DELETING and the
tree is torn down dependents first, running each kind's finalizer. With --wait,
conctl follows the resource over a subscription until its row is gone (or
--timeout passes), across a restart of the server or a dropped connection
(it subscribes anew and re-reads the row, every 3 s as well). Provider configs (KIND/NAME) and reactor bindings (NAME) are
deleted at once. Kinds (manifests) cannot be deleted through the API.
-o json|yaml prints what was done as one list {"items": [{"object",
"outcome"}]} (with --wait, a resource's "deletion requested" then "deleted").`,
		Example: `  # Tear a BOM down and wait until it is gone
  conctl delete bom/acme --wait --timeout 10m

  # A hand-authored provider config and a binding
  conctl delete pc vpc/staging
  conctl delete rb bom-synced-to-statussink`,
		Args:              minArgs(1),
		ValidArgsFunction: a.completeTargets(typeResource, typeProviderConfig, typeReactorBinding),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if err := checkTimeout(wait, timeout); err != nil {
				return err
			}
			tg, err := a.resolveTarget(ctx, args, typeResource, typeProviderConfig, typeReactorBinding)
			if err != nil {
				return err
			}
			if len(tg.names) == 0 {
				return usageError{fmt.Errorf("delete needs at least one name")}
			}
			return a.deleteTargets(ctx, tg, kind, wait, timeout)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kind, "kind", "", "the kind, when names are given without KIND/")
	f.BoolVar(&wait, "wait", false, "wait until a deleted resource is gone")
	f.DurationVar(&timeout, "timeout", 5*time.Minute, "how long --wait waits (a positive duration)")
	return cmd
}

// deleteTargets deletes every object tg names. Every name is checked before
// the first delete: a bad one is refused with nothing deleted.
func (a *app) deleteTargets(ctx context.Context, tg target, kind string, wait bool, timeout time.Duration) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	switch tg.t {
	case typeResource:
		refs, err := tg.resourceRefs(kind)
		if err != nil {
			return err
		}
		for _, r := range refs {
			if err := a.deleteResource(ctx, c, r, wait, timeout); err != nil {
				return err
			}
		}
	case typeProviderConfig:
		refs := make([]ref, 0, len(tg.names))
		for _, n := range tg.names {
			r, err := parseRef(n, kind)
			if err != nil {
				return err
			}
			refs = append(refs, r)
		}
		for _, r := range refs {
			resp, err := DeleteProviderConfig(ctx, c.GQL, r.kind, r.name)
			if err != nil {
				return fmt.Errorf("delete providerconfig %s: %w", r, apiError(err))
			}
			if !resp.DeleteProviderConfig {
				return notFound("providerconfig", r.String())
			}
			a.report(actionResult{Object: "providerconfig/" + r.String(), Outcome: "deleted"})
		}
	case typeReactorBinding:
		for _, n := range tg.names {
			resp, err := DeleteReactorBinding(ctx, c.GQL, n)
			if err != nil {
				return fmt.Errorf("delete reactorbinding %s: %w", n, apiError(err))
			}
			if !resp.DeleteReactorBinding {
				return notFound("reactorbinding", n)
			}
			a.report(actionResult{Object: "reactorbinding/" + n, Outcome: "deleted"})
		}
	}
	return nil
}

func (a *app) deleteResource(ctx context.Context, c *Conn, r ref, wait bool, timeout time.Duration) error {
	if !wait {
		resp, err := DeleteResource(ctx, c.GQL, r.kind, r.name)
		if err != nil {
			return fmt.Errorf("delete resource %s: %w", r, apiError(err))
		}
		a.report(actionResult{Object: "resource/" + r.String(), Outcome: fmt.Sprintf("deletion requested (%s)", resp.DeleteResource.Phase)})
		return nil
	}
	target, err := GetResource(ctx, c.GQL, r.kind, r.name)
	if err != nil {
		return fmt.Errorf("delete resource %s: %w", r, apiError(err))
	}
	if target.Resource == nil {
		return notFound("resource", r.String())
	}
	ws := c.NewWS()
	if _, err := ws.Start(ctx); err != nil {
		return fmt.Errorf("delete resource %s: %w", r, err)
	}
	defer func() { _ = ws.Close() }()
	progress, _, err := WatchSubtree(ctx, ws, target.Resource.Id)
	if err != nil {
		return fmt.Errorf("delete resource %s: %w", r, err)
	}
	resp, err := DeleteResource(ctx, c.GQL, r.kind, r.name)
	if err != nil {
		return fmt.Errorf("delete resource %s: %w", r, apiError(err))
	}
	a.report(actionResult{Object: "resource/" + r.String(), Outcome: fmt.Sprintf("deletion requested (%s)", resp.DeleteResource.Phase)})
	// --timeout bounds the wait from here, not the request: one that passed
	// while the subscription was set up would leave the delete unrequested.
	waitCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return a.waitDeleted(waitCtx, c, ws, progress, r, target.Resource.Id, timeout)
}

// waitDeleted follows the resource id (r) being torn down until its row is
// gone. Like run --wait it outlives its server: the subscription is re-made
// when the server ends it, the row is re-read after a reconnect and every
// waitRecheck (a restarting or draining server leaves the subscription
// silent until its connection closes), and a read the server does not
// answer is tried again until the timeout.
func (a *app) waitDeleted(ctx context.Context, c *Conn, ws *WSClient, progress chan WatchSubtreeWsResponse,
	r ref, id string, timeout time.Duration) error {
	tick := time.NewTicker(waitRecheck)
	defer tick.Stop()
	var lastErr error // the last read the server did not answer
	last := ""
	reported := map[string]string{} // the failure line last printed, by id
	for {
		var gone bool
		var err error
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("timed out after %s waiting for resource/%s to be deleted%s%s", timeout, r, last, lastReadFailed(lastErr))
			}
			return ctx.Err()
		case ev, ok := <-progress:
			if !ok {
				// The server ended the subscription (it restarts, the
				// session was lost): follow anew, and read the row.
				if progress, _, err = WatchSubtree(ctx, ws, id); err != nil {
					return fmt.Errorf("delete resource %s: %w", r, err)
				}
				gone, err = resourceGone(ctx, c, r, id)
				break
			}
			if gone, err = a.onTeardown(ev, r, &last, reported); err != nil {
				return err
			}
		case <-ws.Reconnected():
			// the server pushes a fresh snapshot on re-subscribe; the row is read as well
			gone, err = resourceGone(ctx, c, r, id)
		case <-tick.C:
			gone, err = resourceGone(ctx, c, r, id)
		}
		switch {
		case err == nil:
			lastErr = nil
		case ctx.Err() != nil: // the timeout or an interrupt: said above
			continue
		case unanswered(err):
			a.warnUnanswered(lastErr, err)
			lastErr = err
			continue
		default:
			return fmt.Errorf("delete resource %s: %w", r, apiError(err))
		}
		if gone {
			a.report(actionResult{Object: "resource/" + r.String(), Outcome: "deleted"})
			return nil
		}
	}
}

// onTeardown takes one subtreeProgress push of a resource being deleted:
// it prints the teardown's progress and failures, and reports whether the
// resource is gone.
func (a *app) onTeardown(ev WatchSubtreeWsResponse, r ref, last *string, reported map[string]string) (bool, error) {
	if len(ev.Errors) > 0 {
		if isNotFound(ev.Errors) { // gone before the subscription started
			return true, nil
		}
		return false, fmt.Errorf("delete resource %s: %w", r, apiError(ev.Errors))
	}
	if ev.Data == nil {
		return false, nil
	}
	p := ev.Data.SubtreeProgress
	if p.Root == nil {
		return true, nil
	}
	if p.Root.Phase != PhaseDeleting {
		// the snapshot the subscription took before the request
		return false, nil
	}
	if line := teardownLine(p); line != *last {
		*last = line
		fmt.Fprintf(a.stderr(), "resource/%s %s%s\n", r, p.Root.Phase, line)
	}
	for _, m := range p.Failures { // a teardown that fails, named as it happens
		if line := failureLine(m.SubtreeFailure); reported[m.Id] != line {
			reported[m.Id] = line
			fmt.Fprintln(a.stderr(), line)
		}
	}
	return false, nil
}

// resourceGone reads r and reports whether the row id is gone (a resource
// of the same name made since is another row).
func resourceGone(ctx context.Context, c *Conn, r ref, id string) (bool, error) {
	resp, err := GetResource(ctx, c.GQL, r.kind, r.name)
	if err != nil {
		return false, err
	}
	return resp.Resource == nil || resp.Resource.Id != id, nil
}

// teardownLine is " (12 left: 9 DELETING, 3 READY)" for a subtree being
// torn down ("" once only the root is left).
func teardownLine(p WatchSubtreeSubtreeProgress) string {
	if p.Total == 0 {
		return ""
	}
	n := map[Phase]int{}
	for _, c := range p.Counts {
		n[c.Phase] += c.Count
	}
	var parts []string
	for _, ph := range AllPhase {
		if n[ph] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[ph], ph))
		}
	}
	return fmt.Sprintf(" (%d left: %s)", p.Total, strings.Join(parts, ", "))
}
