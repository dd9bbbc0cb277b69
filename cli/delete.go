package cli

import (
	"context"
	"errors"
	"fmt"
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
--timeout passes). Provider configs (KIND/NAME) and reactor bindings (NAME) are
deleted at once. Kinds (manifests) cannot be deleted through the API.`,
		Example: `  # Tear a BOM down and wait until it is gone
  conctl delete bom/acme --wait --timeout 10m

  # A hand-authored provider config and a binding
  conctl delete pc vpc/staging
  conctl delete rb bom-synced-to-statussink`,
		Args:              minArgs(1),
		ValidArgsFunction: a.completeTargets(typeResource, typeProviderConfig, typeReactorBinding),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
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
	f.DurationVar(&timeout, "timeout", 5*time.Minute, "how long --wait waits")
	return cmd
}

// deleteTargets deletes every object tg names.
func (a *app) deleteTargets(ctx context.Context, tg target, kind string, wait bool, timeout time.Duration) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	if tg.t == typeResource {
		refs, err := tg.resourceRefs(kind)
		if err != nil {
			return err
		}
		for _, r := range refs {
			if err := a.deleteResource(ctx, c, r, wait, timeout); err != nil {
				return err
			}
		}
		return nil
	}
	for _, n := range tg.names {
		switch tg.t {
		case typeProviderConfig:
			r, err := parseRef(n, kind)
			if err != nil {
				return err
			}
			resp, err := DeleteProviderConfig(ctx, c.GQL, r.kind, r.name)
			if err != nil {
				return fmt.Errorf("delete providerconfig %s: %w", r, apiError(err))
			}
			if !resp.DeleteProviderConfig {
				return notFound("providerconfig", r.String())
			}
			fmt.Fprintf(a.stdout(), "providerconfig/%s deleted\n", r)
		case typeReactorBinding:
			resp, err := DeleteReactorBinding(ctx, c.GQL, n)
			if err != nil {
				return fmt.Errorf("delete reactorbinding %s: %w", n, apiError(err))
			}
			if !resp.DeleteReactorBinding {
				return notFound("reactorbinding", n)
			}
			fmt.Fprintf(a.stdout(), "reactorbinding/%s deleted\n", n)
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
		fmt.Fprintf(a.stdout(), "resource/%s deletion requested (%s)\n", r, resp.DeleteResource.Phase)
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ws := c.NewWS()
	if _, err := ws.Start(ctx); err != nil {
		return fmt.Errorf("delete resource %s: %w", r, err)
	}
	defer func() { _ = ws.Close() }()
	events, _, err := WatchResources(ctx, ws, &r.kind, &r.name, nil, nil)
	if err != nil {
		return fmt.Errorf("delete resource %s: %w", r, err)
	}
	resp, err := DeleteResource(ctx, c.GQL, r.kind, r.name)
	if err != nil {
		return fmt.Errorf("delete resource %s: %w", r, apiError(err))
	}
	fmt.Fprintf(a.stdout(), "resource/%s deletion requested (%s)\n", r, resp.DeleteResource.Phase)
	tick := time.NewTicker(waitRecheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("timed out after %s waiting for resource/%s to be deleted", timeout, r)
			}
			return ctx.Err()
		case ev, ok := <-events:
			if !ok {
				return fmt.Errorf("delete resource %s: the subscription ended", r)
			}
			if len(ev.Errors) > 0 {
				return fmt.Errorf("delete resource %s: %w", r, apiError(ev.Errors))
			}
			if ev.Data == nil {
				continue
			}
			switch ev.Data.ResourceChanged.Type {
			case ResourceEventTypeDeleted:
				fmt.Fprintf(a.stdout(), "resource/%s deleted\n", r)
				return nil
			case ResourceEventTypeUpserted:
				continue
			}
		case <-ws.Reconnected():
		case <-tick.C:
		}
		gone, err := GetResource(ctx, c.GQL, r.kind, r.name)
		if err != nil {
			return fmt.Errorf("delete resource %s: %w", r, apiError(err))
		}
		if gone.Resource == nil {
			fmt.Fprintf(a.stdout(), "resource/%s deleted\n", r)
			return nil
		}
	}
}
