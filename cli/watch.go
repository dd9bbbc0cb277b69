package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"
)

// The watch event names (kubectl's --output-watch-events).
const (
	evAdded    = "ADDED"
	evModified = "MODIFIED"
	evDeleted  = "DELETED"
)

func (a *app) watchCommand() *cobra.Command {
	var (
		lf        listFlags
		watchOnly bool
	)
	cmd := &cobra.Command{
		Use:   "watch TYPE [NAME] | TYPE/NAME [filters]",
		Short: "Stream changes live: one line per change (resources, kinds, providerconfigs, reactorbindings, clustermembers, an operation)",
		Long: `Print the current objects, then one line per change as it happens, over the
API's websocket subscriptions (kubectl get -w style), until interrupted.

  resource       every change matching --kind (or a kind as TYPE: watch vpc),
                 NAME (KIND/NAME, or NAME under a kind), --owner, --phase
                 (a change is shown when the row enters or leaves those phases)
                 and --label (matched by conctl)
  kind           manifest applies and live policy edits (conctl kind config)
  providerconfig configs created, changed and deleted (--kind filters)
  reactorbinding bindings created, changed and deleted (--kind: the watched
                 kind, --reactor)
  clustermember  joins, leaves and status changes of the fleet
  operation ID   the operation's state changes, until it finishes (as lines:
                 -o json|yaml is refused)

The EVENT column says ADDED, MODIFIED or DELETED. If the connection drops, conctl
reconnects, re-subscribes and re-lists, printing what changed meanwhile. -o json
prints one JSON object per line, -o yaml one document per change.`,
		Example: `  # Everything happening to vpcs (the same: watch resources --kind vpc)
  conctl watch vpc

  # One BOM
  conctl watch bom/acme

  # A BOM's children, only changes (no initial listing)
  conctl watch res --owner bom/acme --watch-only

  # Failures as they happen (not those already failed), as JSON lines
  conctl watch res --phase failed --watch-only -o json

  # Kinds and their live policy, as other operators change them
  conctl watch kinds

  # The fleet
  conctl watch nodes`,
		Args:              minArgs(1),
		ValidArgsFunction: a.completeTargets(),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := lf.finish(cmd); err != nil {
				return err
			}
			tg, err := a.resolveTarget(cmd.Context(), args, watchable...)
			if err != nil {
				return err
			}
			return a.getWatch(cmd.Context(), tg, lf, watchOnly)
		},
	}
	lf.register(cmd, true)
	cmd.Flags().BoolVar(&watchOnly, "watch-only", false, "print only changes, not the current objects first")
	return cmd
}

// watchable are the types watch (and get -w) follow.
var watchable = []objType{typeResource, typeKind, typeProviderConfig, typeReactorBinding, typeClusterMember, typeOperation}

// getWatch follows a target live: get -w and watch.
func (a *app) getWatch(ctx context.Context, tg target, lf listFlags, watchOnly bool) error {
	if a.output == outName { // conctl watch refuses it in resolveFlags
		return usageError{fmt.Errorf("-o name names the objects of a list: it does not apply to --watch (changes print as they happen)")}
	}
	if !contains(watchable, tg.t) {
		return usageError{fmt.Errorf("type %q cannot be watched (use one of %s)", tg.t, typeList(watchable))}
	}
	if lf.sortBy != "" {
		return usageError{fmt.Errorf("--sort-by does not apply to a watch (changes print as they happen)")}
	}
	if tg.t != typeResource && (lf.limit != 0 || lf.after != "") {
		flag := "--limit"
		if lf.limit == 0 {
			flag = "--after"
		}
		return usageError{fmt.Errorf("%s pages a watch's first listing of resources only: %ss are listed whole", flag, tg.t)}
	}
	c, err := a.client()
	if err != nil {
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
		refs, err := target{t: tg.t, names: tg.names}.resourceRefs(lf.kind)
		if err != nil {
			return err
		}
		if len(refs) > 1 {
			return usageError{fmt.Errorf("watch follows one resource name at a time (or none, with filters)")}
		}
		var name *ref
		if len(refs) == 1 {
			name = &refs[0]
		}
		return a.watchResources(ctx, c, lf, name, watchOnly)
	case typeClusterMember:
		if len(tg.names) > 0 {
			return usageError{fmt.Errorf("watch clustermembers takes no name")}
		}
		return a.watchMembers(ctx, c, watchOnly)
	case typeKind, typeProviderConfig, typeReactorBinding:
		return a.watchCatalogType(ctx, c, tg, lf, watchOnly)
	default:
		if len(tg.names) != 1 {
			return usageError{fmt.Errorf("watch operation needs the operation's id")}
		}
		if err := a.noStructuredOutput("watch operation"); err != nil {
			return err
		}
		return a.watchOperation(ctx, c, tg.names[0])
	}
}

// streamTable prints rows as they come, each column padded to the widest
// value seen so far.
type streamTable struct {
	w      io.Writer
	header []string
	widths []int
	shown  bool
}

func newStreamTable(w io.Writer, header []string) *streamTable {
	s := &streamTable{w: w, header: header, widths: make([]int, len(header))}
	for i, h := range header {
		s.widths[i] = len(h)
	}
	return s
}

// fit widens the columns for rows about to be printed.
func (s *streamTable) fit(rows [][]string) {
	for _, r := range rows {
		for i, c := range r {
			s.widths[i] = max(s.widths[i], len(c))
		}
	}
}

func (s *streamTable) row(r []string) {
	if !s.shown {
		s.shown = true
		s.row(s.header)
	}
	s.fit([][]string{r})
	var b strings.Builder
	for i, c := range r {
		if i == len(r)-1 {
			b.WriteString(c)
			break
		}
		b.WriteString(c)
		b.WriteString(strings.Repeat(" ", s.widths[i]-len(c)+3))
	}
	fmt.Fprintln(s.w, strings.TrimRight(b.String(), " "))
}

// watchEvent is one -o json/yaml watch line.
type watchEvent struct {
	Event    string `json:"event"`
	Resource any    `json:"resource,omitempty"`
	Member   any    `json:"member,omitempty"`
	// Object is a kind, providerconfig or reactor binding.
	Object any `json:"object,omitempty"`
}

// emit prints one watch event in the -o format.
func (a *app) emit(t *streamTable, ev watchEvent, cells []string) error {
	switch a.output {
	case outJSON:
		b, err := json.Marshal(ev)
		if err != nil {
			return fmt.Errorf("encode JSON: %w", err)
		}
		_, err = fmt.Fprintln(a.stdout(), string(b))
		return err
	case outYAML:
		b, err := toYAML(ev)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(a.stdout(), "---\n%s", b)
		return err
	}
	t.row(append([]string{ev.Event}, cells...))
	return nil
}

func (a *app) resourceCells(r ResourceRow) []string {
	if a.output == outWide {
		return []string{r.Kind, r.Name, r.Version, string(r.Phase), itoa(r.Generation), itoa(r.SyncedGeneration),
			yesNo(r.HealthOk), ownerString(r.Owner), labelsString(r.Labels), a.age(r.CreatedAt)}
	}
	return []string{r.Kind, r.Name, string(r.Phase), itoa(r.Generation), itoa(r.SyncedGeneration), a.age(r.CreatedAt)}
}

func (a *app) resourceWatchHeader() []string {
	if a.output == outWide {
		return []string{"EVENT", "KIND", "NAME", "VERSION", "PHASE", "GENERATION", "SYNCED", "HEALTHY", "OWNER", "LABELS", "AGE"}
	}
	return []string{"EVENT", "KIND", "NAME", "PHASE", "GENERATION", "SYNCED", "AGE"}
}

// resourceWatch is the state of a resources watch.
type resourceWatch struct {
	a      *app
	c      *Conn
	lf     listFlags
	kind   *string
	name   *ref
	owner  *string
	phases []Phase
	labels map[string]string
	table  *streamTable
	seen   map[string]ResourceRow
}

func (a *app) watchResources(ctx context.Context, c *Conn, lf listFlags, name *ref, watchOnly bool) error {
	phases, err := parsePhases(lf.phases)
	if err != nil {
		return err
	}
	labelsRaw, err := parseLabels(lf.labels)
	if err != nil {
		return err
	}
	labels := map[string]string{}
	if labelsRaw != nil {
		_ = json.Unmarshal(*labelsRaw, &labels)
	}
	owner, err := a.resolveOwner(ctx, c, lf.owner)
	if err != nil {
		return err
	}
	w := &resourceWatch{a: a, c: c, lf: lf, name: name, owner: owner, phases: phases, labels: labels,
		table: newStreamTable(a.stdout(), a.resourceWatchHeader()), seen: map[string]ResourceRow{}}
	if lf.kind != "" {
		w.kind = &lf.kind
	}
	var nameFilter *string
	if name != nil {
		w.kind, nameFilter = &name.kind, &name.name
	}
	ws := c.NewWS()
	errs, err := ws.Start(ctx)
	if err != nil {
		return fmt.Errorf("watch resources: %w", err)
	}
	defer func() { _ = ws.Close() }()
	events, _, err := WatchResources(ctx, ws, w.kind, nameFilter, owner, phases)
	if err != nil {
		return fmt.Errorf("watch resources: %w", err)
	}
	switch {
	case !watchOnly:
		if err := w.relist(ctx, true, true); err != nil {
			return err
		}
	case len(w.labels) > 0:
		// Only a row read before can say whether a deleted resource
		// matched the labels: read them without printing.
		if err := w.relist(ctx, true, false); err != nil {
			return err
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err, ok := <-errs:
			if ok {
				fmt.Fprintf(a.stderr(), "warning: %v\n", err)
			}
		case <-ws.Reconnected():
			if err := w.relist(ctx, false, true); err != nil {
				return err
			}
		case ev, ok := <-events:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("watch resources: the subscription ended")
			}
			if len(ev.Errors) > 0 {
				return fmt.Errorf("watch resources: %w", apiError(ev.Errors))
			}
			if ev.Data == nil {
				continue
			}
			if err := w.onEvent(ctx, ev.Data.ResourceChanged); err != nil {
				return err
			}
		}
	}
}

// matches applies the filters the subscription cannot (labels).
func (w *resourceWatch) matches(r ResourceRow) bool {
	if len(w.labels) == 0 {
		return true
	}
	var have map[string]any
	if json.Unmarshal(r.Labels, &have) != nil {
		return false
	}
	for k, v := range w.labels {
		if fmt.Sprint(have[k]) != v {
			return false
		}
	}
	return true
}

func (w *resourceWatch) onEvent(ctx context.Context, e WatchResourcesResourceChangedResourceEvent) error {
	switch e.Type {
	case ResourceEventTypeResync:
		return w.relist(ctx, false, true)
	case ResourceEventTypeDeleted:
		last, ok := w.seen[e.Id]
		if !ok {
			if len(w.labels) > 0 {
				return nil // never matched the labels: nothing was shown of it
			}
			last = ResourceRow{Id: e.Id, Kind: e.Kind, Name: e.Name}
		}
		delete(w.seen, e.Id)
		return w.a.emit(w.table, watchEvent{Event: evDeleted, Resource: last}, w.a.resourceCells(last))
	}
	if e.Resource == nil {
		return nil
	}
	r := e.Resource.ResourceRow
	if !w.matches(r) {
		// A row whose labels no longer match leaves the watch: a later
		// deletion of it is not this watch's to show.
		delete(w.seen, r.Id)
		return nil
	}
	event := evModified
	if _, ok := w.seen[r.Id]; !ok && e.PreviousPhase == nil {
		event = evAdded
	}
	w.seen[r.Id] = r
	return w.a.emit(w.table, watchEvent{Event: event, Resource: e.Resource}, w.a.resourceCells(r))
}

// relist reads the current rows. The first listing prints them all (or,
// without show, only records them); a re-list (after a reconnect or
// RESYNC) prints only what changed since, and — when it read every page —
// the rows that disappeared.
func (w *resourceWatch) relist(ctx context.Context, first, show bool) error {
	rows, complete, err := w.read(ctx)
	if err != nil {
		return err
	}
	if first && !show {
		for _, r := range rows {
			w.seen[r.Id] = r
		}
		return nil
	}
	if first {
		cells := make([][]string, len(rows))
		for i, r := range rows {
			cells[i] = append([]string{evAdded}, w.a.resourceCells(r)...)
		}
		w.table.fit(cells)
	}
	listed := map[string]bool{}
	for _, r := range rows {
		listed[r.Id] = true
		prev, ok := w.seen[r.Id]
		w.seen[r.Id] = r
		event := evAdded
		if ok {
			if prev.UpdatedAt.Equal(r.UpdatedAt) && prev.Phase == r.Phase {
				continue
			}
			event = evModified
		}
		if err := w.a.emit(w.table, watchEvent{Event: event, Resource: r}, w.a.resourceCells(r)); err != nil {
			return err
		}
	}
	if !complete || first {
		return nil
	}
	var gone []string
	for id := range w.seen {
		if !listed[id] {
			gone = append(gone, id)
		}
	}
	sort.Strings(gone)
	for _, id := range gone {
		last := w.seen[id]
		delete(w.seen, id)
		if err := w.a.emit(w.table, watchEvent{Event: evDeleted, Resource: last}, w.a.resourceCells(last)); err != nil {
			return err
		}
	}
	return nil
}

// read lists the rows the watch's filters select (complete: every page was
// read).
func (w *resourceWatch) read(ctx context.Context) (rows []ResourceRow, complete bool, err error) {
	if w.name != nil { // one resource: read it, never its whole kind
		resp, err := GetResource(ctx, w.c.GQL, w.name.kind, w.name.name)
		if err != nil {
			return nil, false, fmt.Errorf("get resource %s: %w", w.name, apiError(err))
		}
		if r := resp.Resource; r != nil && w.matches(r.ResourceRow) &&
			(len(w.phases) == 0 || contains(w.phases, r.Phase)) &&
			(w.owner == nil || (r.Owner != nil && r.Owner.Id == *w.owner)) {
			rows = append(rows, r.ResourceRow)
		}
		return rows, true, nil
	}
	var labels *json.RawMessage
	if len(w.labels) > 0 {
		b, _ := json.Marshal(w.labels)
		raw := json.RawMessage(b)
		labels = &raw
	}
	items, after, err := w.a.resourcePages(ctx, w.c, resourceQuery{w.kind, w.phases, labels, w.owner}, w.lf, nil)
	if err != nil {
		return nil, false, err
	}
	for _, it := range items {
		rows = append(rows, it.ResourceRow)
	}
	return rows, after == nil, nil
}

func (a *app) memberCells(m MemberRow) []string {
	return []string{m.Id, string(m.Role), string(m.Status), shardSpan(m.ShardLo, m.ShardHi), m.Version, a.age(m.StartedAt)}
}

// memberWatch prints the differences between successive membership
// pushes (the server pushes the whole membership on every change and on
// (re)subscribe).
type memberWatch struct {
	a         *app
	table     *streamTable
	watchOnly bool
	// seen is the membership last pushed; nil before the first push.
	seen map[string]MemberRow
}

func (a *app) newMemberWatch(watchOnly bool) *memberWatch {
	return &memberWatch{a: a, watchOnly: watchOnly,
		table: newStreamTable(a.stdout(), []string{"EVENT", "ID", "ROLE", "STATUS", "SHARDS", "VERSION", "AGE"})}
}

// onPush prints what changed since the last push; with --watch-only the
// first push (the current members) is only recorded.
func (w *memberWatch) onPush(members []MemberRow) error {
	now := make(map[string]MemberRow, len(members))
	for _, m := range members {
		now[m.Id] = m
	}
	if w.seen == nil && w.watchOnly {
		w.seen = now
		return nil
	}
	if err := w.a.diffMembers(w.table, w.seen, now); err != nil {
		return err
	}
	w.seen = now
	return nil
}

func (a *app) watchMembers(ctx context.Context, c *Conn, watchOnly bool) error {
	ws := c.NewWS()
	errs, err := ws.Start(ctx)
	if err != nil {
		return fmt.Errorf("watch cluster members: %w", err)
	}
	defer func() { _ = ws.Close() }()
	updates, _, err := WatchClusterMembers(ctx, ws)
	if err != nil {
		return fmt.Errorf("watch cluster members: %w", err)
	}
	w := a.newMemberWatch(watchOnly)
	for {
		select {
		case <-ctx.Done():
			return nil
		case err, ok := <-errs:
			if ok {
				fmt.Fprintf(a.stderr(), "warning: %v\n", err)
			}
		case <-ws.Reconnected():
			// The server pushes the whole membership on (re)subscribe.
		case u, ok := <-updates:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("watch cluster members: the subscription ended")
			}
			if len(u.Errors) > 0 {
				return fmt.Errorf("watch cluster members: %w", apiError(u.Errors))
			}
			if u.Data == nil {
				continue
			}
			members := make([]MemberRow, len(u.Data.ClusterMembers))
			for i, m := range u.Data.ClusterMembers {
				members[i] = m.MemberRow
			}
			if err := w.onPush(members); err != nil {
				return err
			}
		}
	}
}

// diffMembers prints joins, status/shard/role changes and leaves.
func (a *app) diffMembers(t *streamTable, before, now map[string]MemberRow) error {
	ids := make([]string, 0, len(now)+len(before))
	for id := range now {
		ids = append(ids, id)
	}
	for id := range before {
		if _, ok := now[id]; !ok {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		m, isNow := now[id]
		old, wasBefore := before[id]
		var event string
		switch {
		case !wasBefore:
			event = evAdded
		case !isNow:
			event, m = evDeleted, old
		case old.Status != m.Status || old.Role != m.Role || shardSpan(old.ShardLo, old.ShardHi) != shardSpan(m.ShardLo, m.ShardHi) ||
			old.Version != m.Version:
			event = evModified
		default:
			continue
		}
		if err := a.emit(t, watchEvent{Event: event, Member: m}, a.memberCells(m)); err != nil {
			return err
		}
	}
	return nil
}

func (a *app) watchOperation(ctx context.Context, c *Conn, id string) error {
	resp, err := GetOperation(ctx, c.GQL, id)
	if err != nil {
		return fmt.Errorf("get operation %s: %w", id, apiError(err))
	}
	if resp.Operation == nil {
		return notFound("operation", id)
	}
	op := resp.Operation.OperationRow
	fmt.Fprintf(a.stdout(), "operation/%s %s\n", op.Id, op.State)
	if isFinal(op.State) {
		return nil
	}
	if _, err := a.followOperation(ctx, c, op, a.stdout()); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}
