// The paths to failures: for every FAILED node, the ownership chain from
// the root down to it, and the dependents it holds up (transitively).
import type { Phase } from '../gql/graphql';
import type { GraphInput } from './layout';

export interface FailureHighlight {
  /** Nodes on a path to a failure, failures included. */
  nodes: Set<string>;
  /** Edges on those paths, as from>to. */
  edges: Set<string>;
  /** The FAILED nodes. */
  failed: string[];
}

export const edgeKey = (from: string, to: string) => `${from}>${to}`;

export function failurePaths(input: readonly GraphInput[], phaseOf: (id: string) => Phase | undefined): FailureHighlight {
  const byId = new Map(input.map((n) => [n.id, n]));
  const dependents = new Map<string, string[]>();
  for (const n of input) for (const d of n.deps) if (byId.has(d)) {
    const l = dependents.get(d);
    if (l) l.push(n.id);
    else dependents.set(d, [n.id]);
  }
  const nodes = new Set<string>();
  const edges = new Set<string>();
  const failed = input.filter((n) => phaseOf(n.id) === 'FAILED').map((n) => n.id);
  for (const f of failed) {
    // Up the ownership chain to the root.
    let cur = f;
    const seen = new Set<string>();
    nodes.add(cur);
    while (!seen.has(cur)) {
      seen.add(cur);
      const o = byId.get(cur)?.owner;
      if (!o || !byId.has(o)) break;
      edges.add(edgeKey(o, cur));
      nodes.add(o);
      cur = o;
    }
    // Down the dependents it holds up.
    const queue = [f];
    const down = new Set([f]);
    while (queue.length) {
      const u = queue.pop()!;
      for (const v of dependents.get(u) ?? []) {
        edges.add(edgeKey(u, v));
        nodes.add(v);
        if (!down.has(v)) {
          down.add(v);
          queue.push(v);
        }
      }
    }
  }
  return { nodes, edges, failed };
}
