package cli

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// completionTimeout bounds the server round trips of one shell completion:
// a slow or unreachable server completes nothing rather than hanging the
// shell.
const completionTimeout = 3 * time.Second

// completionCap is how many names a completion lists at most.
const completionCap = 500

// completeTargets completes TYPE (the built-in types and the applied kinds),
// TYPE/NAME and the NAMEs after a TYPE, asking the server for the names.
func (a *app) completeTargets(allowed ...objType) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		const dir = cobra.ShellCompDirectiveNoFileComp
		if err := a.resolveFlags(cmd); err != nil {
			return nil, dir
		}
		ctx := cmd.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		ctx, cancel := context.WithTimeout(ctx, completionTimeout)
		defer cancel()
		var out []string
		switch {
		case len(args) == 0 && strings.Contains(toComplete, "/"):
			prefix, _, _ := strings.Cut(toComplete, "/")
			tg, err := a.resolveTarget(ctx, []string{prefix}, allowed...)
			if err != nil {
				return nil, dir
			}
			if _, builtin := builtinType(prefix); builtin && tg.t == typeResource {
				prefix = "resource"
			}
			for _, n := range a.completeNames(ctx, tg) {
				if tg.kind != "" {
					out = append(out, tg.kind+"/"+n)
				} else {
					out = append(out, prefix+"/"+n)
				}
			}
		case len(args) == 0:
			for _, o := range objTypes {
				if len(allowed) == 0 || contains(allowed, o.t) {
					out = append(out, string(o.t))
					out = append(out, o.aliases...)
				}
			}
			if len(allowed) == 0 || contains(allowed, typeResource) {
				kinds, _ := a.kindNames(ctx)
				out = append(out, kinds...)
			}
		case !strings.Contains(args[0], "/"):
			tg, err := a.resolveTarget(ctx, args[:1], allowed...)
			if err != nil {
				return nil, dir
			}
			for _, n := range a.completeNames(ctx, tg) {
				if !contains(args[1:], n) {
					out = append(out, n)
				}
			}
		}
		var res []cobra.Completion
		for _, s := range out {
			if strings.HasPrefix(s, toComplete) {
				res = append(res, s)
			}
		}
		return res, dir
	}
}

// completeNames lists the names a target's NAME can take (best effort:
// nothing on any error).
func (a *app) completeNames(ctx context.Context, tg target) []string {
	c, err := a.client()
	if err != nil {
		return nil
	}
	var out []string
	switch tg.t {
	case typeResource:
		var kind *string
		if tg.kind != "" {
			kind = &tg.kind
		}
		resp, err := ListResources(ctx, c.GQL, kind, nil, nil, nil, completionCap, nil)
		if err != nil {
			return nil
		}
		for _, r := range resp.Resources.Items {
			if tg.kind != "" {
				out = append(out, r.Name)
			} else {
				out = append(out, r.Kind+"/"+r.Name)
			}
		}
	case typeKind:
		out, _ = a.kindNames(ctx)
	case typeProviderConfig:
		resp, err := ListProviderConfigs(ctx, c.GQL, nil, nil, completionCap, nil)
		if err != nil {
			return nil
		}
		for _, p := range resp.ProviderConfigs.Items {
			out = append(out, p.Kind+"/"+p.Name)
		}
	case typeReactorBinding:
		resp, err := ListReactorBindings(ctx, c.GQL, nil, nil)
		if err != nil {
			return nil
		}
		for _, b := range resp.ReactorBindings {
			out = append(out, b.Name)
		}
	case typeClusterMember:
		resp, err := ListClusterMembers(ctx, c.GQL)
		if err != nil {
			return nil
		}
		for _, m := range resp.ClusterMembers {
			out = append(out, m.Id)
		}
	}
	return out
}
