package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// describeChildCap bounds the per-phase child count describe reads (it
// shows "500+" past it: there is no COUNT on the list path).
const describeChildCap = 500

func (a *app) describeCommand() *cobra.Command {
	var (
		kind   string
		events int
	)
	cmd := &cobra.Command{
		Use:   "describe KIND/NAME... | KIND NAME... | resource KIND/NAME...",
		Short: "Show a resource in detail: phase, generations, conditions, dependencies, children, events",
		Long: `Show one resource in detail: its phase and the generations behind it, the
conditions that explain it, the upstream dependencies it waits on with their value
flows, its dependents, a summary of its direct children by phase, its recent
operations and its latest events. -o json or -o yaml print the same data.`,
		Example: `  conctl describe bom/acme
  conctl describe bom acme --events 50
  conctl describe resource bom/acme -o yaml
  conctl describe res acme --kind bom`,
		Args:              minArgs(1),
		ValidArgsFunction: a.completeTargets(typeResource),
		RunE: func(cmd *cobra.Command, args []string) error {
			if events < 1 || events > 500 {
				return usageError{fmt.Errorf("--events %d: want 1-500", events)}
			}
			tg, err := a.resolveTarget(cmd.Context(), args, typeResource)
			if err != nil {
				return err
			}
			refs, err := tg.resourceRefs(kind)
			if err != nil {
				return err
			}
			if len(refs) == 0 {
				return usageError{fmt.Errorf("describe needs a resource: KIND/NAME, or KIND NAME")}
			}
			if a.output == outJSON || a.output == outYAML {
				return a.describeStructured(cmd.Context(), refs, events)
			}
			for i, r := range refs {
				if i > 0 {
					fmt.Fprintln(a.stdout())
				}
				if err := a.describe(cmd.Context(), r, events); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&kind, "kind", "", "the kind, when NAME is given without KIND/")
	cmd.Flags().IntVar(&events, "events", 10, "how many of the latest events to show (1-500)")
	return cmd
}

// describeStructured prints the described resources as get does with -o
// json|yaml: one named bare, several as a list {"items": [...]}; nothing
// when one of them cannot be read.
func (a *app) describeStructured(ctx context.Context, refs []ref, events int) error {
	found := make([]DescribeResourceResource, 0, len(refs))
	for _, r := range refs {
		d, err := a.describeRead(ctx, r, events)
		if err != nil {
			return err
		}
		found = append(found, *d)
	}
	return writeObjects(a, found, len(refs) == 1)
}

// describeRead reads what describe shows of one resource.
func (a *app) describeRead(ctx context.Context, r ref, events int) (*DescribeResourceResource, error) {
	c, err := a.client()
	if err != nil {
		return nil, err
	}
	resp, err := DescribeResource(ctx, c.GQL, r.kind, r.name, events, describeChildCap)
	if err != nil {
		return nil, fmt.Errorf("describe resource %s: %w", r, apiError(err))
	}
	if resp.Resource == nil {
		return nil, notFound("resource", r.String())
	}
	return resp.Resource, nil
}

func (a *app) describe(ctx context.Context, r ref, events int) error {
	d, err := a.describeRead(ctx, r, events)
	if err != nil {
		return err
	}
	w := &describeWriter{w: a.stdout()}
	a.describeHead(w, d)
	a.describeConditions(w, d)
	describeDependencies(w, d)
	describeChildren(w, d)
	a.describeOperations(w, d)
	a.describeEvents(w, d)
	return w.err
}

// describeWriter writes "Key:  value" lines and remembers the first error.
type describeWriter struct {
	w   io.Writer
	err error
}

func (w *describeWriter) line(format string, args ...any) {
	if w.err != nil {
		return
	}
	_, w.err = fmt.Fprintf(w.w, format+"\n", args...)
}

func (w *describeWriter) field(key, value string) { w.line("%-22s%s", key+":", value) }

func (w *describeWriter) table(header []string, rows [][]string) {
	if w.err != nil {
		return
	}
	if len(rows) == 0 {
		w.line("  <none>")
		return
	}
	var b strings.Builder
	if err := renderTable(&b, header, rows); err != nil {
		w.err = err
		return
	}
	for _, l := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		w.line("  %s", l)
	}
}

func (a *app) when(t *time.Time) string {
	if t == nil {
		return "<none>"
	}
	return fmt.Sprintf("%s (%s ago)", t.UTC().Format(time.RFC3339), a.age(*t))
}

func (a *app) describeHead(w *describeWriter, d *DescribeResourceResource) {
	w.field("Name", d.Name)
	w.field("Kind", d.Kind)
	w.field("Version", d.Version)
	w.field("ID", d.Id)
	w.field("Labels", labelsString(d.Labels))
	w.field("Phase", string(d.Phase))
	w.field("Ready", fmt.Sprintf("%t", d.Ready))
	w.field("Generation", itoa(d.Generation))
	w.field("Synced generation", itoa(d.SyncedGeneration))
	w.field("Composed generation", itoa(d.ComposedGeneration))
	failure := itoa(d.FailureGeneration)
	if d.FailureGeneration == d.Generation && d.FailureGeneration > 0 {
		failure += " (failed for the live spec"
		if d.FailureTerminal {
			failure += ", terminal: not retried until the spec changes"
		}
		failure += ")"
	}
	w.field("Failure generation", failure)
	w.field("Healthy", yesNo(d.HealthOk))
	w.field("Owner", ownerString(d.Owner))
	root := "<none>"
	if d.Root != nil {
		root = d.Root.Kind + "/" + d.Root.Name
	}
	w.field("Root", root)
	pc := "<none>"
	if d.ProviderConfig != nil {
		pc = d.ProviderConfig.Kind + "/" + d.ProviderConfig.Name
		if d.ProviderConfig.IsDefault {
			pc += " (the kind's default)"
		}
	}
	w.field("Provider config", pc)
	fin := "<none>"
	if len(d.Finalizers) > 0 {
		fin = strings.Join(d.Finalizers, ", ")
	}
	w.field("Finalizers", fin)
	w.field("Shard", itoa(d.ShardId))
	if d.DeletionRequestedAt != nil {
		w.field("Deletion requested", a.when(d.DeletionRequestedAt))
	}
	if d.FrozenUntil != nil {
		w.field("Orphaned until", a.when(d.FrozenUntil))
	}
	w.field("Created", a.when(&d.CreatedAt))
	w.field("Updated", a.when(&d.UpdatedAt))
	w.line("Spec:")
	w.line("%s", indentJSON(d.Spec, "  "))
	w.line("Status:")
	if d.Status == nil {
		w.line("  <none>")
	} else {
		w.line("%s", indentJSON(*d.Status, "  "))
	}
}

func (a *app) describeConditions(w *describeWriter, d *DescribeResourceResource) {
	w.line("Conditions:")
	rows := make([][]string, len(d.Conditions))
	for i, c := range d.Conditions {
		typ := c.Type
		if c.Synthesized {
			typ += "*"
		}
		rows[i] = []string{typ, string(c.Status), orNone(c.Reason), itoa(c.ObservedGeneration),
			a.age(c.LastTransitionTime), orNone(c.Message)}
	}
	w.table([]string{"TYPE", "STATUS", "REASON", "GENERATION", "AGE", "MESSAGE"}, rows)
}

func describeDependencies(w *describeWriter, d *DescribeResourceResource) {
	w.line("Dependencies:")
	rows := make([][]string, len(d.Dependencies))
	for i, dep := range d.Dependencies {
		flows := make([]string, len(dep.ValueFlows))
		for j, f := range dep.ValueFlows {
			flows[j] = f.SrcField + " -> " + f.DepField
		}
		vf := "<none>"
		if len(flows) > 0 {
			vf = strings.Join(flows, ", ")
		}
		rows[i] = []string{dep.Upstream.Kind + "/" + dep.Upstream.Name, string(dep.Upstream.Phase), vf}
	}
	w.table([]string{"UPSTREAM", "PHASE", "VALUE FLOWS (status -> spec)"}, rows)
	w.line("Dependents:")
	rows = make([][]string, len(d.Dependents))
	for i, dep := range d.Dependents {
		rows[i] = []string{dep.Kind + "/" + dep.Name, string(dep.Phase)}
	}
	w.table([]string{"DEPENDENT", "PHASE"}, rows)
}

// pageCount renders a capped count: "500+" when more pages exist.
func pageCount[T any](items []T, next *string) (int, string) {
	if next != nil {
		return len(items), fmt.Sprintf("%d+", len(items))
	}
	return len(items), itoa(len(items))
}

func describeChildren(w *describeWriter, d *DescribeResourceResource) {
	type entry struct {
		phase Phase
		n     int
		s     string
	}
	var es []entry
	add := func(p Phase, n int, s string) { es = append(es, entry{p, n, s}) }
	n, s := pageCount(d.ChildrenReady.Items, d.ChildrenReady.NextCursor)
	add(PhaseReady, n, s)
	n, s = pageCount(d.ChildrenReconciling.Items, d.ChildrenReconciling.NextCursor)
	add(PhaseReconciling, n, s)
	n, s = pageCount(d.ChildrenDegraded.Items, d.ChildrenDegraded.NextCursor)
	add(PhaseDegraded, n, s)
	n, s = pageCount(d.ChildrenFailed.Items, d.ChildrenFailed.NextCursor)
	add(PhaseFailed, n, s)
	n, s = pageCount(d.ChildrenDeleting.Items, d.ChildrenDeleting.NextCursor)
	add(PhaseDeleting, n, s)
	n, s = pageCount(d.ChildrenOrphaned.Items, d.ChildrenOrphaned.NextCursor)
	add(PhaseOrphaned, n, s)
	n, s = pageCount(d.ChildrenQuarantined.Items, d.ChildrenQuarantined.NextCursor)
	add(PhaseQuarantined, n, s)
	var parts []string
	for _, e := range es {
		if e.n > 0 {
			parts = append(parts, fmt.Sprintf("%s %s", e.phase, e.s))
		}
	}
	if len(parts) == 0 {
		w.field("Children", "<none>")
		return
	}
	w.field("Children", strings.Join(parts, ", "))
}

func (a *app) describeOperations(w *describeWriter, d *DescribeResourceResource) {
	w.line("Operations:")
	rows := make([][]string, len(d.Operations))
	for i, o := range d.Operations {
		rows[i] = []string{o.Id, o.Verb, string(o.State), a.age(o.CreatedAt), orNone(o.Error)}
	}
	w.table([]string{"ID", "VERB", "STATE", "AGE", "ERROR"}, rows)
}

func (a *app) describeEvents(w *describeWriter, d *DescribeResourceResource) {
	w.line("Events:")
	rows := make([][]string, len(d.History.Items))
	for i, e := range d.History.Items {
		rows[i] = []string{string(e.Type), e.Reason, a.age(e.CreatedAt), e.Actor, e.Message}
	}
	w.table([]string{"TYPE", "REASON", "AGE", "FROM", "MESSAGE"}, rows)
}
