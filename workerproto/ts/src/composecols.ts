// A composition in columns (Outcome.composition, CompositionColumns): the
// worker writes a composer's children and edges as columns, and spells them
// back out as Child and Edge lists for a broker that did not ask for
// columns. The same layout, rules and checks (in the same order, with the
// same messages) as the Go SDK's workerproto/composecols: Builder, Check,
// Spell and Spelled.
import { create } from "@bufbuild/protobuf";

import * as pb from "./gen/converge/worker/v1/worker_pb.js";
import type { Ref, ValueFlow } from "./provider.js";

const empty = new Uint8Array(0);

/**
 * RefMap keys values by (kind, name) exactly (no separator to collide on):
 * a map of kinds, each a map of names.
 */
class RefMap {
  private readonly byKind = new Map<string, Map<string, number>>();

  get(kind: string, name: string): number | undefined {
    return this.byKind.get(kind)?.get(name);
  }

  set(kind: string, name: string, v: number): void {
    let names = this.byKind.get(kind);
    if (names === undefined) {
      names = new Map();
      this.byKind.set(kind, names);
    }
    names.set(name, v);
  }
}

/**
 * CompositionBuilder accumulates one composition as columns: child by
 * child, edge by edge, then finish.
 */
export class CompositionBuilder {
  private readonly cols = create(pb.CompositionColumnsSchema);
  private readonly names: string[] = [];
  private readonly specs: Uint8Array[] = [];
  private specBytes = 0;
  /** positions: the children by (kind, name). */
  private readonly positions = new RefMap();
  /** dupes: two children share a (kind, name). */
  private dupes = false;
  private lastKind = 0;
  /** sets: the labels objects already listed, by identity, to position+1. */
  private readonly sets = new Map<object, number>();
  private lastSet = 0;
  private readonly refs = new Map<string, number>();
  private lastFlows = 0;
  /** pending: each edge's dependent and dependency, resolved by finish. */
  private readonly pending: Array<[Ref, Ref]> = [];

  /**
   * child appends one child. spec is its JSON (empty for none), kept, not
   * copied, until finish: it must not change before then. Children
   * that share a labels object (or carry equal labels one after the other)
   * share one label set, which holds a copy of the labels taken here.
   */
  child(kind: string, version: string, name: string, labels: Readonly<Record<string, string>> | undefined, spec: Uint8Array, configRef: string): void {
    const c = this.cols;
    const i = c.childKinds.length;
    c.childKinds.push(this.kindIndex(kind, version));
    this.names.push(name);
    c.nameLengths.push(utf8Length(name));
    if (spec.length > 0) {
      this.specs.push(spec);
      this.specBytes += spec.length;
    }
    c.specLengths.push(spec.length);
    const set = this.labelSet(labels);
    if (set > 0 || c.childLabelSets.length > 0) {
      column(c.childLabelSets, i, set);
    }
    if (configRef !== "" || c.childConfigRefs.length > 0) {
      column(c.childConfigRefs, i, this.configRef(configRef));
    }
    if (this.positions.get(kind, name) !== undefined) {
      this.dupes = true;
    }
    this.positions.set(kind, name, i);
  }

  /**
   * edge appends one edge: its dependent must be a child added before
   * finish (in any order); its dependency is a child when one has its
   * (kind, name), and a resource outside the composition otherwise. flows
   * is copied.
   */
  edge(dependent: Ref, dependency: Ref, flows: readonly ValueFlow[] | undefined): void {
    const c = this.cols;
    const e = c.edgeDependents.length;
    // Positions are resolved by finish, once every child is in: an edge may
    // come before its children.
    c.edgeDependents.push(0);
    c.edgeDependencies.push(0);
    this.pending.push([
      { kind: dependent.kind, name: dependent.name },
      { kind: dependency.kind, name: dependency.name },
    ]);
    const set = this.flowSet(flows ?? []);
    if (set > 0 || c.edgeFlowSets.length > 0) {
      column(c.edgeFlowSets, e, set);
    }
  }

  private kindIndex(kind: string, version: string): number {
    const kinds = this.cols.kinds;
    const last = kinds[this.lastKind];
    if (last !== undefined && last.kind === kind && last.version === version) {
      return this.lastKind;
    }
    const i = kinds.findIndex((k) => k.kind === kind && k.version === version);
    if (i >= 0) {
      this.lastKind = i;
      return i;
    }
    this.lastKind = kinds.push(create(pb.KindVersionSchema, { kind, version })) - 1;
    return this.lastKind;
  }

  /** labelSet returns labels' set, position+1 (0 for none). */
  private labelSet(labels: Readonly<Record<string, string>> | undefined): number {
    if (labels === undefined || labels === null || Object.keys(labels).length === 0) {
      return 0;
    }
    const known = this.sets.get(labels);
    if (known !== undefined) {
      return known;
    }
    const sets = this.cols.labelSets;
    if (this.lastSet > 0 && sameLabels((sets[this.lastSet - 1] as pb.LabelSet).labels, labels)) {
      return this.lastSet;
    }
    this.lastSet = sets.push(create(pb.LabelSetSchema, { labels: { ...labels } }));
    this.sets.set(labels, this.lastSet);
    return this.lastSet;
  }

  private configRef(ref: string): number {
    if (ref === "") {
      return 0;
    }
    let i = this.refs.get(ref);
    if (i === undefined) {
      i = this.cols.configRefs.push(ref);
      this.refs.set(ref, i);
    }
    return i;
  }

  /**
   * flowSet returns flows' set, position+1 (0 for none): the last set when
   * equal, else any equal set (a composition has a handful), else a new one.
   */
  private flowSet(flows: readonly ValueFlow[]): number {
    if (flows.length === 0) {
      return 0;
    }
    const sets = this.cols.flowSets;
    if (this.lastFlows > 0 && sameFlows((sets[this.lastFlows - 1] as pb.ValueFlows).flows, flows)) {
      return this.lastFlows;
    }
    const i = sets.findIndex((s) => sameFlows(s.flows, flows));
    if (i >= 0) {
      this.lastFlows = i + 1;
      return this.lastFlows;
    }
    this.lastFlows = sets.push(
      create(pb.ValueFlowsSchema, { flows: flows.map((f) => create(pb.ValueFlowSchema, { srcField: f.srcField, depField: f.depField })) }),
    );
    return this.lastFlows;
  }

  /**
   * finish resolves the edges' ends to positions and returns the columns,
   * or undefined when the composition does not fit columns as sent: two
   * children share a (kind, name), or an edge's dependent is not a child.
   * The caller then sends it as lists, so the broker refuses it as it
   * always has. The builder is spent.
   */
  finish(): pb.CompositionColumns | undefined {
    if (this.dupes) {
      return undefined;
    }
    const c = this.cols;
    const n = c.childKinds.length;
    const external = new RefMap();
    for (let e = 0; e < this.pending.length; e++) {
      const [dependent, dependency] = this.pending[e] as [Ref, Ref];
      const dep = this.positions.get(dependent.kind, dependent.name);
      if (dep === undefined) {
        return undefined;
      }
      c.edgeDependents[e] = dep;
      const up = this.positions.get(dependency.kind, dependency.name);
      if (up !== undefined) {
        c.edgeDependencies[e] = up;
        continue;
      }
      let x = external.get(dependency.kind, dependency.name);
      if (x === undefined) {
        x = c.externalDependencies.push(create(pb.ResourceRefSchema, { kind: dependency.kind, name: dependency.name })) - 1;
        external.set(dependency.kind, dependency.name, x);
      }
      c.edgeDependencies[e] = n + x;
    }
    c.names = this.names.join("");
    c.specs = concat(this.specs, this.specBytes);
    return c;
  }
}

/**
 * column sets col[i] = v, filling the positions before i with 0 (the column
 * was empty until its first non-zero entry).
 */
function column(col: number[], i: number, v: number): void {
  while (col.length < i) {
    col.push(0);
  }
  col.push(v);
}

function sameLabels(a: Readonly<Record<string, string>>, b: Readonly<Record<string, string>>): boolean {
  const keys = Object.keys(b);
  if (Object.keys(a).length !== keys.length) {
    return false;
  }
  return keys.every((k) => Object.hasOwn(a, k) && a[k] === b[k]);
}

function sameFlows(set: readonly pb.ValueFlow[], flows: readonly ValueFlow[]): boolean {
  if (set.length !== flows.length) {
    return false;
  }
  return flows.every((f, i) => set[i]?.srcField === f.srcField && set[i]?.depField === f.depField);
}

function concat(chunks: readonly Uint8Array[], bytes: number): Uint8Array {
  if (chunks.length === 1) {
    return chunks[0] as Uint8Array;
  }
  const out = new Uint8Array(bytes);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

/**
 * utf8Length is s's length in bytes as the wire carries it (TextEncoder's
 * UTF-8: a lone surrogate becomes U+FFFD, three bytes), without encoding it.
 */
export function utf8Length(s: string): number {
  let n = s.length;
  for (let i = 0; i < s.length; i++) {
    const u = s.charCodeAt(i);
    if (u < 0x80) {
      continue;
    }
    if (u < 0x800) {
      n += 1;
      continue;
    }
    if (u >= 0xd800 && u <= 0xdbff && i + 1 < s.length) {
      const lo = s.charCodeAt(i + 1);
      if (lo >= 0xdc00 && lo <= 0xdfff) {
        n += 2; // a pair: two code units, four bytes
        i++;
        continue;
      }
    }
    n += 2; // a three-byte character, or a lone surrogate's U+FFFD
  }
  return n;
}

/**
 * checkComposition throws on the first inconsistency in c, naming the
 * column: a column of the wrong length, lengths that do not add up, an
 * index out of range. On top of the Go checks, a name length that ends
 * inside a character is refused (a JavaScript string cannot carry half a
 * character; Go's would fail to marshal).
 */
export function checkComposition(c: pb.CompositionColumns): void {
  const n = c.childKinds.length;
  const m = c.edgeDependents.length;
  if (c.nameLengths.length !== n) {
    throw new Error(`composition columns: name_lengths has ${c.nameLengths.length} entries for ${n} children`);
  }
  if (c.specLengths.length !== n) {
    throw new Error(`composition columns: spec_lengths has ${c.specLengths.length} entries for ${n} children`);
  }
  if (c.childLabelSets.length !== 0 && c.childLabelSets.length !== n) {
    throw new Error(`composition columns: child_label_sets has ${c.childLabelSets.length} entries for ${n} children (all or none)`);
  }
  if (c.childConfigRefs.length !== 0 && c.childConfigRefs.length !== n) {
    throw new Error(`composition columns: child_config_refs has ${c.childConfigRefs.length} entries for ${n} children (all or none)`);
  }
  if (c.edgeDependencies.length !== m) {
    throw new Error(`composition columns: edge_dependencies has ${c.edgeDependencies.length} entries for ${m} edges`);
  }
  if (c.edgeFlowSets.length !== 0 && c.edgeFlowSets.length !== m) {
    throw new Error(`composition columns: edge_flow_sets has ${c.edgeFlowSets.length} entries for ${m} edges (all or none)`);
  }
  const nameBytes = utf8Length(c.names);
  const names = total(c.nameLengths);
  if (names !== nameBytes) {
    throw new Error(`composition columns: name_lengths add up to ${names} bytes, names holds ${nameBytes}`);
  }
  const specs = total(c.specLengths);
  if (specs !== c.specs.length) {
    throw new Error(`composition columns: spec_lengths add up to ${specs} bytes, specs holds ${c.specs.length}`);
  }
  if (nameBytes !== c.names.length) {
    // Not all ASCII: every cut must fall between characters.
    const b = new TextEncoder().encode(c.names);
    let at = 0;
    for (let i = 0; i < n; i++) {
      at += c.nameLengths[i] as number;
      if (at < b.length && ((b[at] as number) & 0xc0) === 0x80) {
        throw new Error(`composition columns: name_lengths[${i}] ends inside a character of names`);
      }
    }
  }
  below("child_kinds", "kinds", c.childKinds, c.kinds.length);
  below("child_label_sets", "label_sets", c.childLabelSets, c.labelSets.length + 1);
  below("child_config_refs", "config_refs", c.childConfigRefs, c.configRefs.length + 1);
  below("edge_dependents", "children", c.edgeDependents, n);
  below("edge_dependencies", "children and external_dependencies", c.edgeDependencies, n + c.externalDependencies.length);
  below("edge_flow_sets", "flow_sets", c.edgeFlowSets, c.flowSets.length + 1);
}

function total(lengths: readonly number[]): number {
  let sum = 0;
  for (const l of lengths) {
    sum += l;
  }
  return sum;
}

/** below throws unless every entry of vals is under limit. */
function below(col: string, of: string, vals: readonly number[], limit: number): void {
  vals.forEach((v, i) => {
    if (v >= limit) {
      throw new Error(`composition columns: ${col}[${i}] is ${v}, past the ${limit} entries of ${of}`);
    }
  });
}

/**
 * spellComposition checks c (see checkComposition) and, only when it is
 * well formed, spells it out as the Child and Edge lists a broker that did
 * not ask for columns takes: an edge's ends named by kind and name. The
 * children that carry one label set share its labels object, the edges
 * that carry one flow set its flows, and a spec is a view into c's specs:
 * read them, never change them.
 */
export function spellComposition(c: pb.CompositionColumns): { children: pb.Child[]; edges: pb.Edge[] } {
  checkComposition(c);
  const n = c.childKinds.length;
  const ascii = c.names.length === total(c.nameLengths);
  const nameBytes = ascii ? empty : new TextEncoder().encode(c.names);
  const decoder = new TextDecoder("utf-8", { fatal: true });
  const children = new Array<pb.Child>(n);
  let nameAt = 0;
  let specAt = 0;
  for (let i = 0; i < n; i++) {
    const kv = c.kinds[c.childKinds[i] as number] as pb.KindVersion;
    const nl = c.nameLengths[i] as number;
    const sl = c.specLengths[i] as number;
    const name = ascii ? c.names.slice(nameAt, nameAt + nl) : decoder.decode(nameBytes.subarray(nameAt, nameAt + nl));
    nameAt += nl;
    const set = c.childLabelSets.length > 0 ? (c.childLabelSets[i] as number) : 0;
    const ref = c.childConfigRefs.length > 0 ? (c.childConfigRefs[i] as number) : 0;
    children[i] = create(pb.ChildSchema, {
      kind: kv.kind,
      version: kv.version,
      name,
      labels: set > 0 ? (c.labelSets[set - 1] as pb.LabelSet).labels : {},
      specJson: sl > 0 ? c.specs.subarray(specAt, specAt + sl) : empty,
      providerConfigRef: ref > 0 ? (c.configRefs[ref - 1] as string) : "",
    });
    specAt += sl;
  }
  const edges = new Array<pb.Edge>(c.edgeDependents.length);
  for (let e = 0; e < edges.length; e++) {
    const dep = children[c.edgeDependents[e] as number] as pb.Child;
    const v = c.edgeDependencies[e] as number;
    const up = v < n ? (children[v] as pb.Child) : (c.externalDependencies[v - n] as pb.ResourceRef);
    const set = c.edgeFlowSets.length > 0 ? (c.edgeFlowSets[e] as number) : 0;
    edges[e] = create(pb.EdgeSchema, {
      dependentKind: dep.kind,
      dependentName: dep.name,
      dependencyKind: up.kind,
      dependencyName: up.name,
      valueFlows: set > 0 ? (c.flowSets[set - 1] as pb.ValueFlows).flows : [],
    });
  }
  return { children, edges };
}

/**
 * spelled returns c, or, when its outcome carries a composition in columns,
 * a copy of it with them spelled out as children and edges (for a broker
 * that did not ask for columns). c is not changed: the copy is shallow
 * (it shares c's other fields), so it is for sending, never for changing.
 */
export function spelled(c: pb.StageComplete): pb.StageComplete {
  if (c.result.case !== "outcome" || c.result.value.composition === undefined) {
    return c;
  }
  const o = c.result.value;
  let lists;
  try {
    lists = spellComposition(o.composition as pb.CompositionColumns);
  } catch (err) {
    throw new Error(`result of ${c.taskId}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
  const outcome: pb.Outcome = { ...o, children: lists.children, edges: lists.edges, composition: undefined };
  return { ...c, result: { case: "outcome", value: outcome } };
}
