package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

// listFlags are the filters of get, list and watch.
type listFlags struct {
	kind    string
	phases  []string
	labels  []string
	owner   string
	reactor string
	version string
	limit   int
	all     bool
	after   string
	sortBy  string
	// pageSize is the page size the cursors are followed with (set by
	// finish: --limit, else allPageSize).
	pageSize int
}

// allPageSize is the page size when conctl follows every page.
const allPageSize = 500

// pageRequests bounds the requests one page of --limit makes: the server
// reads a bounded number of resources per request, so a filtered page
// (labels with a kind, an owner or phases) may come back short, even
// empty, with a cursor; conctl asks again until the page is full or the
// list ends, at most this many times.
const pageRequests = 10

func (l *listFlags) register(cmd *cobra.Command, paging bool) {
	f := cmd.Flags()
	f.StringVar(&l.kind, "kind", "", "only this kind (resources, providerconfigs; the watched kind of reactorbindings)")
	f.StringArrayVar(&l.phases, "phase", nil, "only resources in this phase; repeatable, a union (ready, reconciling, degraded, failed, deleting, orphaned, quarantined)")
	f.StringArrayVarP(&l.labels, "label", "l", nil, "only resources with this label (k=v); repeatable, all must match")
	f.StringVar(&l.owner, "owner", "", "only the direct children of this resource (KIND/NAME or its id)")
	f.StringVar(&l.reactor, "reactor", "", "only reactor bindings that run this reactor kind")
	f.StringVar(&l.version, "version", "", "the kind version (get kind NAME)")
	if paging {
		f.IntVar(&l.limit, "limit", 0, "one page of this many (1-500) instead of every page; with --all, the page size (resources, providerconfigs)")
		f.BoolVar(&l.all, "all", true, "follow the cursors to the last page (the default unless --limit or --after is given)")
		f.StringVar(&l.after, "after", "", "start after this cursor (a previous page's next cursor); one page unless --all")
		f.StringVar(&l.sortBy, "sort-by", "", "sort by a field of the -o json object (e.g. .name, .updatedAt, .spec.cidr)")
	}
	_ = cmd.RegisterFlagCompletionFunc("phase", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		out := make([]cobra.Completion, len(AllPhase))
		for i, p := range AllPhase {
			out[i] = strings.ToLower(string(p))
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	})
}

// finish settles the paging flags after parsing: every page by default;
// one page when --limit or --after is given without --all.
func (l *listFlags) finish(cmd *cobra.Command) error {
	f := cmd.Flags()
	if f.Lookup("limit") == nil {
		return nil
	}
	if f.Changed("limit") && (l.limit < 1 || l.limit > 500) {
		return usageError{fmt.Errorf("--limit %d: want 1-500", l.limit)}
	}
	if !f.Changed("all") && (f.Changed("limit") || f.Changed("after")) {
		l.all = false
	}
	l.pageSize = allPageSize
	if l.limit > 0 {
		l.pageSize = l.limit
	}
	if l.sortBy != "" {
		if _, err := sortPath(l.sortBy); err != nil {
			return err
		}
	}
	return nil
}

// parsePhases reads --phase values in any case.
func parsePhases(in []string) ([]Phase, error) {
	var out []Phase
	for _, s := range in {
		for _, part := range strings.Split(s, ",") {
			p := Phase(strings.ToUpper(strings.TrimSpace(part)))
			if !contains(AllPhase, p) {
				return nil, usageError{fmt.Errorf("unknown phase %q (one of ready, reconciling, degraded, failed, deleting, orphaned, quarantined)", part)}
			}
			if !contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out, nil
}

// parseLabels reads --label k=v pairs into a containment object.
func parseLabels(in []string) (*json.RawMessage, error) {
	if len(in) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, s := range in {
		for _, part := range strings.Split(s, ",") {
			k, v, ok := strings.Cut(part, "=")
			if !ok || k == "" {
				return nil, usageError{fmt.Errorf("--label %q: want key=value", part)}
			}
			if prev, ok := m[k]; ok && prev != v {
				// All must match, and a resource has one value per label.
				return nil, usageError{fmt.Errorf("--label %s is given twice (%q and %q): no resource can match both", k, prev, v)}
			}
			m[k] = v
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode labels: %w", err)
	}
	raw := json.RawMessage(b)
	return &raw, nil
}

// getLong is get's description.
const getLong = `Show one or more objects by name, or list them (the same as conctl list TYPE).

TYPE is a kind (get bom, get bom acme, get bom/acme: that kind's resources) or
one of resource (res), kind (crd, manifest), providerconfig (pc), reactorbinding
(rb), clustermember (member, node, nodes) or operation (op), in singular or
plural. Names are NAME under a kind, KIND/NAME for resources and providerconfigs
(or NAME with --kind), the name for kinds and reactor bindings, the id for
cluster members and operations; "get operations KIND/NAME" lists a resource's
100 newest operations (the API lists no older ones; stderr says so when there
are 100).

Lists follow the keyset cursors to the last page (never counted); --limit N
shows one page of N (with the cursor to go on with --after), --all with --limit
follows the cursors in pages of N. The server reads a bounded number of
resources per request, so a filtered page of resources may come back short or
empty with a cursor: --limit N asks again until it has N or the list ends, at
most 10 requests, and otherwise shows what it found and says so on stderr,
with the cursor to go on with. Only resources and providerconfigs are
paged: kinds, reactor bindings and cluster members are listed whole (a
resource's operations, its 100 newest), and --limit or --after with them is
refused. --phase repeats as a union; --label repeats
as an intersection; --sort-by orders by any field of the -o json object. A
filter that does not apply is refused, never ignored: --phase, --label and
--owner filter a list of resources (not named ones), --kind resources,
providerconfigs and reactorbindings, --reactor reactorbindings, --version a
named kind.

-o yaml and -o json print objects that conctl apply -f takes back unchanged
(server-set fields such as id, phase and createdAt are ignored on apply).
-o name prints one TYPE/NAME per line, for xargs: KIND/NAME for a resource
(bom/acme), providerconfig/KIND/NAME, reactorbinding/NAME, kind/NAME,
clustermember/ID and operation/ID, forms conctl's commands read back.
-w (--watch) prints the list, then one line per change, as conctl watch does.`

func (a *app) getCommand() *cobra.Command {
	var (
		lf        listFlags
		watch     bool
		watchOnly bool
	)
	cmd := &cobra.Command{
		Use:     "get TYPE [NAME...] | TYPE/NAME...",
		Aliases: []string{"ls"},
		Short:   "Show objects: resources (by kind), kinds, providerconfigs, reactorbindings, clustermembers, operations",
		Long:    getLong,
		Example: `  # A kind's resources, its one resource, the same in TYPE/NAME form
  conctl get account
  conctl get account acme-t0-account
  conctl get account/acme-t0-account -o yaml

  # Failed or degraded resources of any kind, newest change last
  conctl get res --phase failed --phase degraded --sort-by .updatedAt

  # Every child of a BOM, then its changes as they happen (until Ctrl+C)
  conctl get res --owner bom/acme -o wide -w

  # One page of 5 (stderr prints the --after cursor of the next page)
  conctl get account --limit 5

  # Every page, fetched 5 at a time
  conctl get account --limit 5 --all

  # Kinds, provider configs and bindings
  conctl get crds
  conctl get pc account/default -o json
  conctl get rb --kind bom

  # The fleet
  conctl get nodes

  # Re-observe every failed resource (-o name: one KIND/NAME per line)
  conctl get res --phase failed -o name | xargs -r conctl resync`,
		Args:              minArgs(1),
		ValidArgsFunction: a.completeTargets(),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := lf.finish(cmd); err != nil {
				return err
			}
			tg, err := a.resolveTarget(cmd.Context(), args)
			if err != nil {
				return err
			}
			if watch || watchOnly {
				return a.getWatch(cmd.Context(), tg, lf, watchOnly)
			}
			return a.get(cmd.Context(), tg, lf)
		},
	}
	lf.register(cmd, true)
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "after listing, print one line per change (as conctl watch)")
	cmd.Flags().BoolVar(&watchOnly, "watch-only", false, "print only changes, not the current objects first")
	return cmd
}

func (a *app) listCommand() *cobra.Command {
	var lf listFlags
	cmd := &cobra.Command{
		Use:   "list TYPE",
		Short: "List objects of a type (or a kind's resources), with filters: get TYPE without names",
		Long: `List the objects of a type, or the resources of a kind. The filters, paging and
sorting flags are those of conctl get; see conctl get --help for the types and
their aliases.`,
		Example: `  # Everything READY or RECONCILING
  conctl list resources --phase ready --phase reconciling

  # Accounts labelled team=blue, by name
  conctl list account -l team=blue --sort-by .name

  # The kinds, with their policy
  conctl list kinds -o wide`,
		Args:              exactArgs(1),
		ValidArgsFunction: a.completeTargets(),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := lf.finish(cmd); err != nil {
				return err
			}
			tg, err := a.resolveTarget(cmd.Context(), args)
			if err != nil {
				return err
			}
			tg.names = nil
			return a.get(cmd.Context(), tg, lf)
		},
	}
	lf.register(cmd, true)
	return cmd
}

// get dispatches on the type.
func (a *app) get(ctx context.Context, tg target, lf listFlags) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	names := tg.names
	if err := unpaged(tg.t, lf); err != nil {
		return err
	}
	if err := unusedFilters(tg.t, len(names) > 0, lf); err != nil {
		return err
	}
	switch tg.t {
	case typeResource:
		if tg.kind != "" {
			if lf.kind != "" && lf.kind != tg.kind {
				return usageError{fmt.Errorf("the type names kind %s but --kind is %s", tg.kind, lf.kind)}
			}
			lf.kind = tg.kind
		}
		if len(names) > 0 {
			return a.getResources(ctx, c, tg, lf)
		}
		return a.listResources(ctx, c, lf)
	case typeKind:
		return a.getKinds(ctx, c, names, lf)
	case typeProviderConfig:
		return a.getProviderConfigs(ctx, c, names, lf)
	case typeReactorBinding:
		return a.getReactorBindings(ctx, c, names, lf)
	case typeClusterMember:
		return a.getMembers(ctx, c, names, lf)
	case typeOperation:
		return a.getOperations(ctx, c, names, lf)
	}
	return fmt.Errorf("unknown type %q", tg.t)
}

// unpaged refuses --limit and --after for the types the API lists whole
// (only resources and providerconfigs are paged).
func unpaged(t objType, lf listFlags) error {
	if t == typeResource || t == typeProviderConfig || (lf.limit == 0 && lf.after == "") {
		return nil
	}
	flag := "--limit"
	if lf.limit == 0 {
		flag = "--after"
	}
	if t == typeOperation {
		return usageError{fmt.Errorf("%s pages resources and providerconfigs only: a resource's operations are listed as its %d newest", flag, maxResourceOperations)}
	}
	return usageError{fmt.Errorf("%s pages resources and providerconfigs only: %ss are listed whole", flag, t)}
}

// unusedFilters refuses, naming it, a filter get cannot apply to the type
// (or, for named resources, to a name): ignored, it would show what the
// user meant to filter out.
func unusedFilters(t objType, named bool, lf listFlags) error {
	set := map[string]bool{"--kind": lf.kind != "", "--phase": len(lf.phases) > 0, "--label": len(lf.labels) > 0,
		"--owner": lf.owner != "", "--reactor": lf.reactor != "", "--version": lf.version != ""}
	applies := map[objType][]string{
		typeResource:       {"--kind", "--phase", "--label", "--owner"},
		typeKind:           {"--version"},
		typeProviderConfig: {"--kind"},
		typeReactorBinding: {"--kind", "--reactor"},
	}[t]
	for _, flag := range []string{"--kind", "--phase", "--label", "--owner", "--reactor", "--version"} {
		switch {
		case !set[flag]:
		case !slices.Contains(applies, flag):
			return usageError{fmt.Errorf("%s does not apply to %ss", flag, t)}
		case t == typeResource && named && flag != "--kind":
			return usageError{fmt.Errorf("%s filters a list: it does not apply to named resources", flag)}
		case t == typeKind && !named:
			return usageError{fmt.Errorf("%s does not apply to a list of kinds (get kind NAME --version V)", flag)}
		}
	}
	return nil
}

// resolveOwner turns --owner KIND/NAME into an id (an id passes through).
func (a *app) resolveOwner(ctx context.Context, c *Conn, owner string) (*string, error) {
	if owner == "" {
		return nil, nil
	}
	if !strings.Contains(owner, "/") {
		return &owner, nil
	}
	r, err := parseRef(owner, "")
	if err != nil {
		return nil, err
	}
	resp, err := GetResource(ctx, c.GQL, r.kind, r.name)
	if err != nil {
		return nil, fmt.Errorf("resolve --owner %s: %w", owner, apiError(err))
	}
	if resp.Resource == nil {
		return nil, fmt.Errorf("--owner %s: %w", owner, notFound("resource", r.String()))
	}
	return &resp.Resource.Id, nil
}

// notFound is the error for a name the server does not know.
func notFound(what, name string) error {
	return &APIError{Code: "NOT_FOUND", Message: fmt.Sprintf("%s %s not found", what, name)}
}

// page is one listing's outcome for JSON/YAML output.
type page[T any] struct {
	Items      []T     `json:"items"`
	NextCursor *string `json:"nextCursor,omitempty"`
}

// morePages hints at the next page on stderr (table output).
func (a *app) morePages(next *string) {
	if next != nil {
		fmt.Fprintf(a.stderr(), "(more results: --all, or --after %s)\n", *next)
	}
}

// resourceQuery is a resources list's filters, as the API takes them.
type resourceQuery struct {
	kind   *string
	phases []Phase
	labels *json.RawMessage
	owner  *string
}

// resourcePages reads the resources q selects from after: with --all every
// page, else one page of lf.pageSize, filled across the short pages a
// filtered read returns (at most pageRequests requests; stderr says when it
// stops short). It returns the next page's cursor, nil after the last.
func (a *app) resourcePages(ctx context.Context, c *Conn, q resourceQuery, lf listFlags, after *string) ([]ListResourcesResourcesResourcePageItemsResource, *string, error) {
	var items []ListResourcesResourcesResourcePageItemsResource
	for requests := 1; ; requests++ {
		// one page of --limit: ask for what it still lacks
		first := lf.pageSize
		if !lf.all {
			first -= len(items)
		}
		resp, err := ListResources(ctx, c.GQL, q.kind, q.phases, q.labels, q.owner, first, after)
		if err != nil {
			return nil, nil, fmt.Errorf("list resources: %w", apiError(err))
		}
		items = append(items, resp.Resources.Items...)
		after = resp.Resources.NextCursor
		switch {
		case after == nil, !lf.all && len(items) == lf.pageSize:
			return items, after, nil
		case !lf.all && requests == pageRequests:
			fmt.Fprintf(a.stderr(), "(%d of %d after %d requests: the filters match few of the resources each request reads)\n",
				len(items), lf.pageSize, requests)
			return items, after, nil
		}
	}
}

func (a *app) listResources(ctx context.Context, c *Conn, lf listFlags) error {
	phases, err := parsePhases(lf.phases)
	if err != nil {
		return err
	}
	labels, err := parseLabels(lf.labels)
	if err != nil {
		return err
	}
	owner, err := a.resolveOwner(ctx, c, lf.owner)
	if err != nil {
		return err
	}
	var kind *string
	if lf.kind != "" {
		kind = &lf.kind
	}
	var after *string
	if lf.after != "" {
		after = &lf.after
	}
	items, after, err := a.resourcePages(ctx, c, resourceQuery{kind, phases, labels, owner}, lf, after)
	if err != nil {
		return err
	}
	return writeItems(a, items, false, after, lf.sortBy, func(items []ListResourcesResourcesResourcePageItemsResource) error {
		return a.resourceTable(rowsOf(items, func(it ListResourcesResourcesResourcePageItemsResource) ResourceRow { return it.ResourceRow }))
	})
}

func (a *app) getResources(ctx context.Context, c *Conn, tg target, lf listFlags) error {
	tg.kind = ""
	refs, err := tg.resourceRefs(lf.kind)
	if err != nil {
		return err
	}
	var found []GetResourceResource
	for _, r := range refs {
		resp, err := GetResource(ctx, c.GQL, r.kind, r.name)
		if err != nil {
			return fmt.Errorf("get resource %s: %w", r, apiError(err))
		}
		if resp.Resource == nil {
			return notFound("resource", r.String())
		}
		found = append(found, *resp.Resource)
	}
	return writeItems(a, found, true, nil, lf.sortBy, func(found []GetResourceResource) error {
		return a.resourceTable(rowsOf(found, func(f GetResourceResource) ResourceRow { return f.ResourceRow }))
	})
}

// writeItems writes what a get found, sorted by sortBy: with -o json or yaml,
// the one item a command named bare (named, and one found) and anything else
// as a page {"items": […], "nextCursor": …}; otherwise as table writes them,
// with the next page's hint on stderr. (The bare item is a pointer, so the
// generated MarshalJSON of fragment-embedding types applies.)
func writeItems[T any](a *app, items []T, named bool, next *string, sortBy string, table func([]T) error) error {
	if err := sortItems(items, sortBy); err != nil {
		return err
	}
	if a.output == outName {
		for _, it := range items {
			n := nameOf(it)
			if n == "" {
				return fmt.Errorf("-o name: conctl cannot name a %T", it)
			}
			a.printNames(n)
		}
		a.morePages(next)
		return nil
	}
	var v any = page[T]{Items: items, NextCursor: next}
	if named && len(items) == 1 {
		v = &items[0]
	}
	if ok, err := a.structured(v); ok {
		return err
	}
	if err := table(items); err != nil {
		return err
	}
	a.morePages(next)
	return nil
}

// nameOf is how -o name names an item a get found ("" for a type it
// does not know, which writeItems reports).
func nameOf(item any) string {
	switch it := item.(type) {
	case ListResourcesResourcesResourcePageItemsResource:
		return resourceName(it.Kind, it.Name)
	case GetResourceResource:
		return resourceName(it.Kind, it.Name)
	case ListKindsKindsKind:
		return "kind/" + it.Name
	case GetKindKind:
		return "kind/" + it.Name
	case ProviderConfigRow:
		return "providerconfig/" + it.Kind + "/" + it.Name
	case ReactorBindingRow:
		return "reactorbinding/" + it.Name
	case MemberRow:
		return "clustermember/" + it.Id
	case OperationRow:
		return "operation/" + it.Id
	}
	return ""
}

// rowsOf maps items to the rows a table shows.
func rowsOf[T, R any](items []T, row func(T) R) []R {
	rows := make([]R, len(items))
	for i, it := range items {
		rows[i] = row(it)
	}
	return rows
}

func (a *app) getKinds(ctx context.Context, c *Conn, names []string, lf listFlags) error {
	if len(names) == 0 {
		resp, err := ListKinds(ctx, c.GQL)
		if err != nil {
			return fmt.Errorf("list kinds: %w", apiError(err))
		}
		return writeItems(a, resp.Kinds, false, nil, lf.sortBy, func(items []ListKindsKindsKind) error {
			return a.kindTable(rowsOf(items, func(k ListKindsKindsKind) KindRow { return k.KindRow }))
		})
	}
	var v *string
	if lf.version != "" {
		v = &lf.version
	}
	var found []GetKindKind
	for _, n := range names {
		resp, err := GetKind(ctx, c.GQL, n, v)
		if err != nil {
			return fmt.Errorf("get kind %s: %w", n, apiError(err))
		}
		if resp.Kind == nil {
			return notFound("kind", n)
		}
		found = append(found, *resp.Kind)
	}
	return writeItems(a, found, true, nil, lf.sortBy, func(found []GetKindKind) error {
		return a.kindTable(rowsOf(found, func(k GetKindKind) KindRow { return k.KindRow }))
	})
}

func (a *app) getProviderConfigs(ctx context.Context, c *Conn, names []string, lf listFlags) error {
	if len(names) > 0 {
		var found []ProviderConfigRow
		for _, n := range names {
			r, err := parseRef(n, lf.kind)
			if err != nil {
				return err
			}
			resp, err := ListProviderConfigs(ctx, c.GQL, &r.kind, &r.name, 1, nil)
			if err != nil {
				return fmt.Errorf("get providerconfig %s: %w", r, apiError(err))
			}
			if len(resp.ProviderConfigs.Items) == 0 {
				return notFound("providerconfig", r.String())
			}
			found = append(found, resp.ProviderConfigs.Items[0].ProviderConfigRow)
		}
		return writeItems(a, found, true, nil, lf.sortBy, a.providerConfigTable)
	}
	var kind, after *string
	if lf.kind != "" {
		kind = &lf.kind
	}
	if lf.after != "" {
		after = &lf.after
	}
	var rows []ProviderConfigRow
	for {
		resp, err := ListProviderConfigs(ctx, c.GQL, kind, nil, lf.pageSize, after)
		if err != nil {
			return fmt.Errorf("list providerconfigs: %w", apiError(err))
		}
		for _, it := range resp.ProviderConfigs.Items {
			rows = append(rows, it.ProviderConfigRow)
		}
		after = resp.ProviderConfigs.NextCursor
		if after == nil || !lf.all {
			break
		}
	}
	return writeItems(a, rows, false, after, lf.sortBy, a.providerConfigTable)
}

func (a *app) getReactorBindings(ctx context.Context, c *Conn, names []string, lf listFlags) error {
	var watch, reactor *string
	if lf.kind != "" {
		watch = &lf.kind
	}
	if lf.reactor != "" {
		reactor = &lf.reactor
	}
	resp, err := ListReactorBindings(ctx, c.GQL, watch, reactor)
	if err != nil {
		return fmt.Errorf("list reactorbindings: %w", apiError(err))
	}
	var rows []ReactorBindingRow
	for _, b := range resp.ReactorBindings {
		rows = append(rows, b.ReactorBindingRow)
	}
	if len(names) > 0 {
		if rows, err = pick(rows, names, "reactorbinding", func(b ReactorBindingRow) string { return b.Name }); err != nil {
			return err
		}
	}
	return writeItems(a, rows, len(names) > 0, nil, lf.sortBy, a.reactorBindingTable)
}

func (a *app) getMembers(ctx context.Context, c *Conn, names []string, lf listFlags) error {
	resp, err := ListClusterMembers(ctx, c.GQL)
	if err != nil {
		return fmt.Errorf("list cluster members: %w", apiError(err))
	}
	var rows []MemberRow
	for _, m := range resp.ClusterMembers {
		rows = append(rows, m.MemberRow)
	}
	if len(names) > 0 {
		if rows, err = pick(rows, names, "clustermember", func(m MemberRow) string { return m.Id }); err != nil {
			return err
		}
	}
	return writeItems(a, rows, len(names) > 0, nil, lf.sortBy, a.memberTable)
}

func (a *app) getOperations(ctx context.Context, c *Conn, names []string, lf listFlags) error {
	if len(names) == 0 {
		return usageError{fmt.Errorf("operations are listed per resource: conctl get operations KIND/NAME (or get operation ID)")}
	}
	var rows []OperationRow
	listed := len(names) > 1
	for _, n := range names {
		if strings.Contains(n, "/") {
			listed = true
			r, err := parseRef(n, "")
			if err != nil {
				return err
			}
			resp, err := ResourceOperations(ctx, c.GQL, r.kind, r.name, maxResourceOperations)
			if err != nil {
				return fmt.Errorf("list the operations of %s: %w", r, apiError(err))
			}
			if resp.Resource == nil {
				return notFound("resource", r.String())
			}
			for _, op := range resp.Resource.Operations {
				rows = append(rows, op.OperationRow)
			}
			if len(resp.Resource.Operations) == maxResourceOperations { // there may be older ones
				fmt.Fprintf(a.stderr(), "(the %d newest operations of %s: the API lists no older ones)\n", maxResourceOperations, r)
			}
			continue
		}
		resp, err := GetOperation(ctx, c.GQL, n)
		if err != nil {
			return fmt.Errorf("get operation %s: %w", n, apiError(err))
		}
		if resp.Operation == nil {
			return notFound("operation", n)
		}
		rows = append(rows, resp.Operation.OperationRow)
	}
	return writeItems(a, rows, !listed, nil, lf.sortBy, a.operationTable)
}

// maxResourceOperations is how many of a resource's operations the API
// lists (Resource.operations(first:), 1-100), newest first.
const maxResourceOperations = 100

// pick keeps the rows with the given names, in the names' order.
func pick[T any](rows []T, names []string, what string, key func(T) string) ([]T, error) {
	out := make([]T, 0, len(names))
	for _, n := range names {
		found := false
		for _, r := range rows {
			if key(r) == n {
				out = append(out, r)
				found = true
				break
			}
		}
		if !found {
			return nil, notFound(what, n)
		}
	}
	return out, nil
}
