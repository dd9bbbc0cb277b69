// Finding a node in the graph by name, and unfolding the aggregates that
// hide it.
import { fold, isAggregate } from './fold';
import type { GNode } from './load';

/**
 * findNode: the node named q (or kind/name), else the first whose name
 * contains it (case-insensitive), in name order.
 */
export function findNode(nodes: Iterable<GNode>, q: string): GNode | undefined {
  const want = q.trim().toLowerCase();
  if (!want) return undefined;
  let partial: GNode | undefined;
  for (const n of nodes) {
    const name = n.name.toLowerCase();
    if (name === want || `${n.kind}/${n.name}`.toLowerCase() === want) return n;
    if (name.includes(want) && (!partial || n.name < partial.name)) partial = n;
  }
  return partial;
}

/**
 * revealIn returns expanded plus the aggregates that hide id (an aggregate
 * under a folded owner only appears once its owner is expanded, so this
 * unfolds level by level); expanded itself when id is already drawn.
 */
export function revealIn(nodes: ReadonlyMap<string, GNode>, rootId: string, expanded: ReadonlySet<string>, id: string): ReadonlySet<string> {
  let exp = expanded;
  for (let depth = 0; depth < 64; depth++) {
    const at = fold(nodes, rootId, exp).shownAs.get(id);
    if (!at || !isAggregate(at)) return exp;
    exp = new Set([...exp, at]);
  }
  return exp;
}
