// Loading a composite's subtree for the graph view, breadth first, a page
// of children at a time, only below nodes whose kind composes children, up
// to a node budget (past it, the owners with unloaded children are kept so
// the view can offer to load more). Live events then keep it current.
import type { ApiClient } from '../client/client';
import { GraphChildrenDocument, GraphRootDocument, type GraphNodeFragment, type Phase, type ResourceEventType } from '../gql/graphql';
import { timeKey } from '../resources/live';

export interface GNode {
  id: string;
  kind: string;
  name: string;
  phase: Phase;
  owner: string | null;
  deps: string[];
  updatedAt: string;
}

export interface Subtree {
  rootId: string;
  nodes: Map<string, GNode>;
  /** Kinds that compose children. */
  composites: Set<string>;
  /** Owners whose children are not all loaded: the cursor to go on from ('' = none loaded yet). */
  more: Map<string, string>;
}

export const NODE_BUDGET = 2000;
const PAGE = 250;

export function toNode(f: GraphNodeFragment): GNode {
  return { id: f.id, kind: f.kind, name: f.name, phase: f.phase, owner: f.owner?.id ?? null, deps: f.dependencies.map((d) => d.upstream.id), updatedAt: f.updatedAt };
}

type Requester = Pick<ApiClient, 'request'>;

/**
 * Watch is called with each owner before its children are first read, so
 * the caller can subscribe to its changes first: a change that lands
 * between the read and the subscription cannot be missed.
 */
export type Watch = (ownerId: string) => void;

export async function loadSubtree(client: Requester, root: { kind: string; name: string }, budget = NODE_BUDGET, signal?: AbortSignal, watch: Watch = () => {}, onRoot: (root: GNode) => void = () => {}): Promise<Subtree | null> {
  const r = await client.request(GraphRootDocument, root, signal);
  if (!r.resource) return null;
  onRoot(toNode(r.resource));
  const composites = new Set(r.kinds.filter((k) => k.reactions.some((x) => x.emits.includes('CHILDREN'))).map((k) => k.name));
  const t: Subtree = { rootId: r.resource.id, nodes: new Map([[r.resource.id, toNode(r.resource)]]), composites, more: new Map() };
  if (composites.has(r.resource.kind)) t.more.set(r.resource.id, '');
  await loadMore(client, t, budget, signal, watch);
  return t;
}

/** loadMore continues loading children of the owners in t.more, breadth first, until the budget. */
export async function loadMore(client: Requester, t: Subtree, budget: number, signal?: AbortSignal, watch: Watch = () => {}): Promise<void> {
  while (t.more.size && t.nodes.size < budget) {
    signal?.throwIfAborted(); // an ended load watches nothing more
    const [owner, cursor] = t.more.entries().next().value as [string, string];
    t.more.delete(owner);
    if (!cursor) watch(owner);
    let after: string | null = cursor || null;
    do {
      const page = await client.request(GraphChildrenDocument, { ownerId: owner, first: Math.min(PAGE, budget - t.nodes.size), after }, signal);
      for (const item of page.resources.items) {
        if (t.nodes.has(item.id)) continue;
        t.nodes.set(item.id, toNode(item));
        if (t.composites.has(item.kind)) t.more.set(item.id, '');
      }
      after = page.resources.nextCursor;
    } while (after && t.nodes.size < budget);
    if (after) t.more.set(owner, after);
  }
}

export interface GraphEvent {
  type: ResourceEventType;
  id: string;
  resource: GraphNodeFragment | null;
}

/**
 * applyGraphEvent folds one resourceChanged event into the subtree.
 * structural: nodes or edges changed (re-layout); resync: re-load.
 */
export function applyGraphEvent(t: Subtree, ev: GraphEvent, budget = NODE_BUDGET): { tree: Subtree; structural: boolean; changed: boolean; resync: boolean } {
  return applyGraphEvents(t, [ev], budget);
}

/**
 * applyGraphEvents folds a batch of events into one new subtree (copied
 * once, not once per event: a batch of 1,000 phase changes costs one copy).
 * The tree is returned as is when nothing changed.
 */
export function applyGraphEvents(t: Subtree, evs: readonly GraphEvent[], budget = NODE_BUDGET): { tree: Subtree; structural: boolean; changed: boolean; resync: boolean } {
  const out = { tree: t, structural: false, changed: false, resync: false };
  let copy: Subtree | null = null;
  for (const ev of evs) {
    if (ev.type === 'RESYNC') {
      out.resync = true;
      continue;
    }
    const cur = (copy ?? t).nodes.get(ev.id);
    const own = () => (copy ??= cloneTree(t));
    if (ev.type === 'DELETED') {
      if (!cur || ev.id === t.rootId) continue;
      const c = own();
      c.nodes.delete(ev.id);
      c.more.delete(ev.id);
      out.structural = out.changed = true;
      continue;
    }
    if (!ev.resource) continue;
    const n = toNode(ev.resource);
    if (cur) {
      // Events can overtake the read they update: never go back in time.
      if (timeKey(n.updatedAt) < timeKey(cur.updatedAt)) continue;
      const structural = cur.owner !== n.owner || cur.deps.join() !== n.deps.join();
      if (!structural && cur.phase === n.phase) continue;
      own().nodes.set(n.id, n);
      out.changed = true;
      out.structural ||= structural;
      continue;
    }
    // A new child of a loaded node. A composite's own children are read once
    // it is watched (more), like the ones loaded at first.
    const base = copy ?? t;
    if (!n.owner || !base.nodes.has(n.owner) || base.nodes.size >= budget) continue;
    const c = own();
    c.nodes.set(n.id, n);
    if (c.composites.has(n.kind)) c.more.set(n.id, '');
    out.structural = out.changed = true;
  }
  if (copy) out.tree = copy;
  return out;
}

/** cloneTree copies a subtree so loadMore can fill it while the shown one keeps taking events. */
export function cloneTree(t: Subtree): Subtree {
  return { ...t, nodes: new Map(t.nodes), more: new Map(t.more) };
}

/**
 * mergeLoaded folds what loadMore read (into a copy, from the owners in
 * started) into cur, which took live events meanwhile: new nodes under
 * owners still present are added and cur's own nodes win; the started
 * owners leave cur.more and what the copy still has to load joins it.
 */
export function mergeLoaded(cur: Subtree, loaded: Subtree, started: ReadonlySet<string>): Subtree {
  const nodes = new Map(cur.nodes);
  for (const [id, n] of loaded.nodes) if (!nodes.has(id) && n.owner && nodes.has(n.owner)) nodes.set(id, n);
  const more = new Map([...cur.more].filter(([id]) => !started.has(id)));
  for (const [id, c] of loaded.more) if (nodes.has(id)) more.set(id, c);
  return { ...cur, nodes, more };
}
