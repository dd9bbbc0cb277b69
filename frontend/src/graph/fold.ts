// Folding for a graph that reads at scale: siblings of one kind in one
// dependency tier (same owner, same kind, same sibling rank) past FOLD_AT
// are drawn as one aggregate node — "route ×100" with a phase bar and
// counts — until the user expands it. A bom of 250 teams (1,001 nodes) is
// then four tiers of four nodes whose labels read at the default fit.
// O(n + edges); the folded picture is what the layout lays out.
import type { Phase } from '../gql/graphql';
import { siblingRanks, type GraphInput } from './layout';
import type { GNode } from './load';

/** Groups larger than this fold. */
export const FOLD_AT = 8;

/** aggPrefix starts every aggregate node's id. */
export const aggPrefix = 'agg:';

export const isAggregate = (id: string) => id.startsWith(aggPrefix);

/** The display order of phases in an aggregate's bar and its colour (worst first). */
const worst: Phase[] = ['FAILED', 'DEGRADED', 'RECONCILING', 'DELETING', 'ORPHANED', 'QUARANTINED', 'READY'];

export interface PhaseShare {
  phase: Phase;
  count: number;
}

/** An aggregate: its members (real node ids) and their phase counts. */
export interface Aggregate {
  id: string;
  kind: string;
  members: string[];
  counts: PhaseShare[];
}

export interface Folded {
  /** The nodes drawn: real ones and aggregates (kind, name "×N", the worst phase). */
  nodes: Map<string, GNode>;
  aggregates: Map<string, Aggregate>;
  /** Where each real node is drawn (itself, or its aggregate). */
  shownAs: Map<string, string>;
  /** Expanded aggregates: their members, drawn one by one as a block (a grid). */
  blocks: Map<string, string[]>;
}

/**
 * fold computes the picture: nodes is the loaded subtree, expanded the
 * aggregates the user opened.
 */
export function fold(nodes: ReadonlyMap<string, GNode>, rootId: string, expanded: ReadonlySet<string>, at = FOLD_AT): Folded {
  const kids = new Map<string, GNode[]>();
  for (const n of nodes.values()) {
    if (n.id === rootId) continue;
    const o = n.owner && nodes.has(n.owner) ? n.owner : rootId;
    const l = kids.get(o);
    if (l) l.push(n);
    else kids.set(o, [n]);
  }
  const shownAs = new Map<string, string>([[rootId, rootId]]);
  const aggregates = new Map<string, Aggregate>();
  const blocks = new Map<string, string[]>();
  // Top down, so an owner's place is known before its children are grouped.
  const queue = [rootId];
  for (let q = 0; q < queue.length; q++) {
    const owner = queue[q]!;
    const sibs = kids.get(owner) ?? [];
    if (!sibs.length) continue;
    const ranks = siblingRanks(sibs.map((s): GraphInput => ({ id: s.id, owner: s.owner, deps: s.deps })));
    const groups = new Map<string, GNode[]>();
    for (const s of sibs) {
      const key = `${s.kind}@${ranks.get(s.id) ?? 0}`;
      const g = groups.get(key);
      if (g) g.push(s);
      else groups.set(key, [s]);
    }
    const ownerShown = shownAs.get(owner) ?? owner;
    for (const [key, g] of groups) {
      const id = `${aggPrefix}${ownerShown}:${key}`;
      // Under a folded owner, its children fold too (whatever their number).
      const folded = (g.length > at || isAggregate(ownerShown)) && !expanded.has(id);
      if (!folded && g.length > at) blocks.set(id, g.map((s) => s.id));
      let agg = folded ? aggregates.get(id) : undefined;
      if (folded && !agg) {
        agg = { id, kind: g[0]!.kind, members: [], counts: [] };
        aggregates.set(id, agg);
      }
      for (const s of g) {
        shownAs.set(s.id, agg ? agg.id : s.id);
        agg?.members.push(s.id);
        queue.push(s.id);
      }
    }
  }
  const out = new Map<string, GNode>();
  const shown = (id: string) => shownAs.get(id) ?? id;
  for (const n of nodes.values()) {
    const at = shown(n.id);
    const deps = [...new Set(n.deps.filter((d) => nodes.has(d)).map(shown))].filter((d) => d !== at);
    const owner = n.owner ? shown(n.owner) : null;
    const cur = out.get(at);
    if (!isAggregate(at)) {
      out.set(at, { ...n, owner, deps });
      continue;
    }
    if (!cur) out.set(at, { id: at, kind: n.kind, name: '', phase: n.phase, owner, deps, updatedAt: n.updatedAt });
    else {
      cur.deps = [...new Set([...cur.deps, ...deps])];
      if (n.updatedAt > cur.updatedAt) cur.updatedAt = n.updatedAt;
    }
  }
  for (const a of aggregates.values()) {
    const by = new Map<Phase, number>();
    for (const m of a.members) {
      const p = nodes.get(m)!.phase;
      by.set(p, (by.get(p) ?? 0) + 1);
    }
    a.counts = worst.filter((p) => by.has(p)).map((p) => ({ phase: p, count: by.get(p)! }));
    const g = out.get(a.id)!;
    g.name = `×${a.members.length.toLocaleString('en-US')}`;
    g.phase = a.counts[0]!.phase;
  }
  return { nodes: out, aggregates, shownAs, blocks };
}

/**
 * recolour updates a folded picture for phase changes only, in O(changes +
 * members of the aggregates they touch) instead of a full fold: prev was
 * folded from before, nodes is the new subtree. It returns null when the
 * structure changed (a node added, removed, moved or re-wired): fold again.
 */
export function recolour(prev: Folded, before: ReadonlyMap<string, GNode>, nodes: ReadonlyMap<string, GNode>): Folded | null {
  if (before === nodes) return prev;
  if (before.size !== nodes.size) return null;
  const changed: GNode[] = [];
  for (const [id, n] of nodes) {
    const b = before.get(id);
    if (!b) return null;
    if (b === n) continue;
    if (b.owner !== n.owner || b.deps.length !== n.deps.length || b.deps.some((d, i) => d !== n.deps[i])) return null;
    if (b.phase !== n.phase) changed.push(n);
  }
  if (!changed.length) return prev;
  const out = new Map(prev.nodes);
  const aggregates = new Map(prev.aggregates);
  const dirty = new Set<string>();
  for (const n of changed) {
    const at = prev.shownAs.get(n.id) ?? n.id;
    if (isAggregate(at)) dirty.add(at);
    else {
      const cur = out.get(at);
      if (cur) out.set(at, { ...cur, phase: n.phase, updatedAt: n.updatedAt });
    }
  }
  for (const id of dirty) {
    const a = prev.aggregates.get(id);
    if (!a) continue;
    const by = new Map<Phase, number>();
    for (const m of a.members) {
      const p = nodes.get(m)!.phase;
      by.set(p, (by.get(p) ?? 0) + 1);
    }
    const counts = worst.filter((p) => by.has(p)).map((p) => ({ phase: p, count: by.get(p)! }));
    aggregates.set(id, { ...a, counts });
    const g = out.get(id);
    if (g) out.set(id, { ...g, phase: counts[0]!.phase });
  }
  return { nodes: out, aggregates, shownAs: prev.shownAs, blocks: prev.blocks };
}
