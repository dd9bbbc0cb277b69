// Package composecols writes and reads a composition in columns
// (workerv1.CompositionColumns): the Go worker SDK builds them from a
// handler's children and edges, the broker reads them back without an
// allocation per child, and the SDK spells them out as Child and Edge lists
// for a broker that did not ask for columns.
package composecols

import (
	"fmt"
	"maps"
	"reflect"

	"google.golang.org/protobuf/proto"

	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// Ref names a resource by kind and name.
type Ref struct{ Kind, Name string }

// Flow is one value flow: a JSON pointer into the upstream's status and
// one into the dependent's spec.
type Flow struct{ Src, Dep string }

// Builder accumulates one composition. The zero value is not ready; use
// NewBuilder.
type Builder struct {
	cols      *workerv1.CompositionColumns
	names     []byte
	positions map[Ref]uint32 // children by (kind, name)
	dupes     bool           // two children share a (kind, name)
	lastKind  uint32
	sets      map[uintptr]uint32 // label maps already listed, by identity, to position+1
	lastSet   uint32
	refs      map[string]uint32
	lastFlows uint32
	pending   [][2]Ref // each edge's dependent and dependency, resolved by Finish
}

// NewBuilder starts a composition; the counts of children and edges
// expected size its columns (0 when unknown).
func NewBuilder(children, edges int) *Builder {
	return &Builder{
		cols: &workerv1.CompositionColumns{
			ChildKinds:       make([]uint32, 0, children),
			NameLengths:      make([]uint32, 0, children),
			SpecLengths:      make([]uint32, 0, children),
			EdgeDependents:   make([]uint32, 0, edges),
			EdgeDependencies: make([]uint32, 0, edges),
		},
		positions: make(map[Ref]uint32, children),
	}
}

// Child appends one child. labels is kept, not copied: it must not change
// until the columns are sent. Children that share a labels map (or carry
// equal labels one after the other) share one label set.
func (b *Builder) Child(kind, version, name string, labels map[string]string, spec []byte, configRef string) {
	c := b.cols
	i := uint32(len(c.ChildKinds))
	c.ChildKinds = append(c.ChildKinds, b.kindIndex(kind, version))
	b.names = append(b.names, name...)
	c.NameLengths = append(c.NameLengths, uint32(len(name)))
	c.Specs = append(c.Specs, spec...)
	c.SpecLengths = append(c.SpecLengths, uint32(len(spec)))
	if set := b.labelSet(labels); set > 0 || len(c.ChildLabelSets) > 0 {
		c.ChildLabelSets = column(c.ChildLabelSets, int(i), set)
	}
	if configRef != "" || len(c.ChildConfigRefs) > 0 {
		c.ChildConfigRefs = column(c.ChildConfigRefs, int(i), b.configRef(configRef))
	}
	ref := Ref{kind, name}
	if _, dup := b.positions[ref]; dup {
		b.dupes = true
	}
	b.positions[ref] = i
}

// Edge appends one edge: its dependent must be a child added before Finish
// (in any order); its dependency is a child when one has its (kind, name),
// and a resource outside the composition otherwise. flows is copied.
func (b *Builder) Edge(dependent, dependency Ref, flows []Flow) {
	c := b.cols
	e := len(c.EdgeDependents)
	// Positions are resolved by Finish, once every child is in: an edge may
	// come before its children.
	c.EdgeDependents = append(c.EdgeDependents, 0)
	c.EdgeDependencies = append(c.EdgeDependencies, 0)
	b.pending = append(b.pending, [2]Ref{dependent, dependency})
	if set := b.flowSet(flows); set > 0 || len(c.EdgeFlowSets) > 0 {
		c.EdgeFlowSets = column(c.EdgeFlowSets, e, set)
	}
}

// column sets col[i] = v, filling the positions before i with 0 (the
// column was empty until its first non-zero entry).
func column(col []uint32, i int, v uint32) []uint32 {
	for len(col) < i {
		col = append(col, 0)
	}
	return append(col, v)
}

func (b *Builder) kindIndex(kind, version string) uint32 {
	kinds := b.cols.Kinds
	if int(b.lastKind) < len(kinds) && kinds[b.lastKind].GetKind() == kind && kinds[b.lastKind].GetVersion() == version {
		return b.lastKind
	}
	for i, k := range kinds {
		if k.GetKind() == kind && k.GetVersion() == version {
			b.lastKind = uint32(i)
			return b.lastKind
		}
	}
	b.cols.Kinds = append(b.cols.Kinds, &workerv1.KindVersion{Kind: kind, Version: version})
	b.lastKind = uint32(len(kinds))
	return b.lastKind
}

// labelSet returns labels' set, position+1 (0 for none).
func (b *Builder) labelSet(labels map[string]string) uint32 {
	if len(labels) == 0 {
		return 0
	}
	id := reflect.ValueOf(labels).Pointer()
	if set, ok := b.sets[id]; ok {
		return set
	}
	sets := b.cols.LabelSets
	if b.lastSet > 0 && maps.Equal(sets[b.lastSet-1].GetLabels(), labels) {
		return b.lastSet
	}
	b.cols.LabelSets = append(b.cols.LabelSets, &workerv1.LabelSet{Labels: labels})
	b.lastSet = uint32(len(b.cols.LabelSets))
	if b.sets == nil {
		b.sets = map[uintptr]uint32{}
	}
	b.sets[id] = b.lastSet
	return b.lastSet
}

func (b *Builder) configRef(ref string) uint32 {
	if ref == "" {
		return 0
	}
	if i, ok := b.refs[ref]; ok {
		return i
	}
	b.cols.ConfigRefs = append(b.cols.ConfigRefs, ref)
	if b.refs == nil {
		b.refs = map[string]uint32{}
	}
	b.refs[ref] = uint32(len(b.cols.ConfigRefs))
	return b.refs[ref]
}

// flowSet returns flows' set, position+1 (0 for none): the last set when
// equal, else any equal set (a composition has a handful), else a new one.
func (b *Builder) flowSet(flows []Flow) uint32 {
	if len(flows) == 0 {
		return 0
	}
	sets := b.cols.FlowSets
	if b.lastFlows > 0 && sameFlows(sets[b.lastFlows-1].GetFlows(), flows) {
		return b.lastFlows
	}
	for i, s := range sets {
		if sameFlows(s.GetFlows(), flows) {
			b.lastFlows = uint32(i) + 1
			return b.lastFlows
		}
	}
	set := &workerv1.ValueFlows{Flows: make([]*workerv1.ValueFlow, len(flows))}
	for i, f := range flows {
		set.Flows[i] = &workerv1.ValueFlow{SrcField: f.Src, DepField: f.Dep}
	}
	b.cols.FlowSets = append(b.cols.FlowSets, set)
	b.lastFlows = uint32(len(b.cols.FlowSets))
	return b.lastFlows
}

func sameFlows(set []*workerv1.ValueFlow, flows []Flow) bool {
	if len(set) != len(flows) {
		return false
	}
	for i, f := range flows {
		if set[i].GetSrcField() != f.Src || set[i].GetDepField() != f.Dep {
			return false
		}
	}
	return true
}

// Finish resolves the edges' ends to positions and returns the columns. ok
// is false when the composition does not fit columns as sent: two children
// share a (kind, name), or an edge's dependent is not a child. The caller
// then sends it as lists, so the broker refuses it as it always has.
func (b *Builder) Finish() (cols *workerv1.CompositionColumns, ok bool) {
	if b.dupes {
		return nil, false
	}
	c := b.cols
	n := uint32(len(c.ChildKinds))
	var external map[Ref]uint32
	for e, ends := range b.pending {
		dep, ok := b.positions[ends[0]]
		if !ok {
			return nil, false
		}
		c.EdgeDependents[e] = dep
		if up, ok := b.positions[ends[1]]; ok {
			c.EdgeDependencies[e] = up
			continue
		}
		if external == nil {
			external = map[Ref]uint32{}
		}
		x, seen := external[ends[1]]
		if !seen {
			x = uint32(len(c.ExternalDependencies))
			external[ends[1]] = x
			c.ExternalDependencies = append(c.ExternalDependencies, &workerv1.ResourceRef{Kind: ends[1].Kind, Name: ends[1].Name})
		}
		c.EdgeDependencies[e] = n + x
	}
	c.Names = string(b.names)
	return c, true
}

// Child is one child read back from the columns. Name and Spec alias the
// message's names and specs (Spec is nil for an empty spec); Labels is the
// child's label set, shared with every child that carries the same set:
// read it, never change it.
type Child struct {
	Kind, Version, Name string
	Labels              map[string]string
	Spec                []byte
	ConfigRef           string
}

// Edge is one edge read back from the columns: its dependent's position
// and name; its dependency's position and name among the children, or -1
// and External for a resource outside the composition; its flow set's
// position in FlowSets, or -1 for none.
type Edge struct {
	Dependent, Dependency         int
	DependentName, DependencyName string
	External                      Ref
	FlowSet                       int
}

// Len is the number of children c describes.
func Len(c *workerv1.CompositionColumns) int { return len(c.GetChildKinds()) }

// Edges is the number of edges c describes.
func Edges(c *workerv1.CompositionColumns) int { return len(c.GetEdgeDependents()) }

// FlowSets reads c's value-flow lists, one slice per set: an Edge's
// FlowSet indexes it.
func FlowSets(c *workerv1.CompositionColumns) [][]Flow {
	out := make([][]Flow, len(c.GetFlowSets()))
	for i, s := range c.GetFlowSets() {
		out[i] = make([]Flow, len(s.GetFlows()))
		for j, f := range s.GetFlows() {
			out[i][j] = Flow{Src: f.GetSrcField(), Dep: f.GetDepField()}
		}
	}
	return out
}

// Walk checks c, then hands each child to child and each edge to edge (in
// order; either may be nil). A malformed message (a column of the wrong
// length, an index out of range, lengths that do not add up) is an error,
// and neither function is called.
func Walk(c *workerv1.CompositionColumns, child func(i int, ch Child), edge func(e int, ed Edge)) error {
	if err := Check(c); err != nil {
		return err
	}
	if child != nil {
		names, specs := c.GetNames(), c.GetSpecs()
		sets, setCol := c.GetLabelSets(), c.GetChildLabelSets()
		refs, refCol := c.GetConfigRefs(), c.GetChildConfigRefs()
		var nameAt, specAt int
		for i, k := range c.GetChildKinds() {
			kv := c.GetKinds()[k]
			ch := Child{Kind: kv.GetKind(), Version: kv.GetVersion()}
			nl, sl := int(c.GetNameLengths()[i]), int(c.GetSpecLengths()[i])
			ch.Name, nameAt = names[nameAt:nameAt+nl], nameAt+nl
			if sl > 0 {
				ch.Spec = specs[specAt : specAt+sl : specAt+sl]
			}
			specAt += sl
			if len(setCol) > 0 && setCol[i] > 0 {
				ch.Labels = sets[setCol[i]-1].GetLabels()
			}
			if len(refCol) > 0 && refCol[i] > 0 {
				ch.ConfigRef = refs[refCol[i]-1]
			}
			child(i, ch)
		}
	}
	if edge != nil && Edges(c) > 0 {
		n := Len(c)
		starts := make([]uint32, n+1)
		for i, l := range c.GetNameLengths() {
			starts[i+1] = starts[i] + l
		}
		name := func(i int) string { return c.GetNames()[starts[i]:starts[i+1]] }
		ext, flowCol := c.GetExternalDependencies(), c.GetEdgeFlowSets()
		for e, dep := range c.GetEdgeDependents() {
			ed := Edge{Dependent: int(dep), DependentName: name(int(dep)), Dependency: int(c.GetEdgeDependencies()[e]), FlowSet: -1}
			if ed.Dependency >= n {
				x := ext[ed.Dependency-n]
				ed.Dependency, ed.External = -1, Ref{Kind: x.GetKind(), Name: x.GetName()}
			} else {
				ed.DependencyName = name(ed.Dependency)
			}
			if len(flowCol) > 0 && flowCol[e] > 0 {
				ed.FlowSet = int(flowCol[e]) - 1
			}
			edge(e, ed)
		}
	}
	return nil
}

// Check reports the first inconsistency in c, naming the column.
func Check(c *workerv1.CompositionColumns) error {
	n, m := Len(c), Edges(c)
	switch {
	case len(c.GetNameLengths()) != n:
		return fmt.Errorf("composition columns: name_lengths has %d entries for %d children", len(c.GetNameLengths()), n)
	case len(c.GetSpecLengths()) != n:
		return fmt.Errorf("composition columns: spec_lengths has %d entries for %d children", len(c.GetSpecLengths()), n)
	case len(c.GetChildLabelSets()) != 0 && len(c.GetChildLabelSets()) != n:
		return fmt.Errorf("composition columns: child_label_sets has %d entries for %d children (all or none)", len(c.GetChildLabelSets()), n)
	case len(c.GetChildConfigRefs()) != 0 && len(c.GetChildConfigRefs()) != n:
		return fmt.Errorf("composition columns: child_config_refs has %d entries for %d children (all or none)", len(c.GetChildConfigRefs()), n)
	case len(c.GetEdgeDependencies()) != m:
		return fmt.Errorf("composition columns: edge_dependencies has %d entries for %d edges", len(c.GetEdgeDependencies()), m)
	case len(c.GetEdgeFlowSets()) != 0 && len(c.GetEdgeFlowSets()) != m:
		return fmt.Errorf("composition columns: edge_flow_sets has %d entries for %d edges (all or none)", len(c.GetEdgeFlowSets()), m)
	}
	if sum := total(c.GetNameLengths()); sum != uint64(len(c.GetNames())) {
		return fmt.Errorf("composition columns: name_lengths add up to %d bytes, names holds %d", sum, len(c.GetNames()))
	}
	if sum := total(c.GetSpecLengths()); sum != uint64(len(c.GetSpecs())) {
		return fmt.Errorf("composition columns: spec_lengths add up to %d bytes, specs holds %d", sum, len(c.GetSpecs()))
	}
	if err := below("child_kinds", "kinds", c.GetChildKinds(), len(c.GetKinds())); err != nil {
		return err
	}
	if err := below("child_label_sets", "label_sets", c.GetChildLabelSets(), len(c.GetLabelSets())+1); err != nil {
		return err
	}
	if err := below("child_config_refs", "config_refs", c.GetChildConfigRefs(), len(c.GetConfigRefs())+1); err != nil {
		return err
	}
	if err := below("edge_dependents", "children", c.GetEdgeDependents(), n); err != nil {
		return err
	}
	if err := below("edge_dependencies", "children and external_dependencies", c.GetEdgeDependencies(), n+len(c.GetExternalDependencies())); err != nil {
		return err
	}
	return below("edge_flow_sets", "flow_sets", c.GetEdgeFlowSets(), len(c.GetFlowSets())+1)
}

func total(lengths []uint32) uint64 {
	var sum uint64
	for _, l := range lengths {
		sum += uint64(l)
	}
	return sum
}

// below checks that every entry of col is under limit.
func below(col, of string, vals []uint32, limit int) error {
	for i, v := range vals {
		if uint64(v) >= uint64(limit) {
			return fmt.Errorf("composition columns: %s[%d] is %d, past the %d entries of %s", col, i, v, limit, of)
		}
	}
	return nil
}

// Spell spells c out as the Child and Edge lists a broker that did not ask
// for columns takes. An edge's ends are named by kind and name.
func Spell(c *workerv1.CompositionColumns) ([]*workerv1.Child, []*workerv1.Edge, error) {
	children := make([]*workerv1.Child, 0, Len(c))
	edges := make([]*workerv1.Edge, 0, Edges(c))
	flows := c.GetFlowSets()
	err := Walk(c, func(_ int, ch Child) {
		children = append(children, &workerv1.Child{Kind: ch.Kind, Version: ch.Version, Name: ch.Name,
			Labels: ch.Labels, SpecJson: ch.Spec, ProviderConfigRef: ch.ConfigRef})
	}, func(_ int, ed Edge) {
		dep := children[ed.Dependent]
		pe := &workerv1.Edge{DependentKind: dep.GetKind(), DependentName: dep.GetName(),
			DependencyKind: ed.External.Kind, DependencyName: ed.External.Name}
		if ed.Dependency >= 0 {
			up := children[ed.Dependency]
			pe.DependencyKind, pe.DependencyName = up.GetKind(), up.GetName()
		}
		if ed.FlowSet >= 0 {
			pe.ValueFlows = flows[ed.FlowSet].GetFlows()
		}
		edges = append(edges, pe)
	})
	if err != nil {
		return nil, nil, err
	}
	return children, edges, nil
}

// Spelled returns c, or, when its outcome carries a composition in
// columns, a copy of it with them spelled out as children and edges (for a
// peer that did not ask for columns). c is not changed.
func Spelled(c *workerv1.StageComplete) (*workerv1.StageComplete, error) {
	if c.GetOutcome().GetComposition() == nil {
		return c, nil
	}
	s := proto.CloneOf(c)
	o := s.GetOutcome()
	children, edges, err := Spell(o.GetComposition())
	if err != nil {
		return nil, fmt.Errorf("result of %s: %w", c.GetTaskId(), err)
	}
	o.Children, o.Edges, o.Composition = children, edges, nil
	return s, nil
}
