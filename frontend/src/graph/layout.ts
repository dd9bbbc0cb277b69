// The graph's layered layout, by dagre (a maintained Sugiyama-style
// engine): tiers by dependency depth — the root on top, an owner above its
// children, an upstream above its dependents — with dagre's crossing
// minimisation ordering each tier. An expanded aggregate is a block: one
// dagre node sized as a grid of at most maxPerRow columns, its members then
// placed in the grid under their upstreams, so a 500-member tier stays a
// screen-shaped picture and dagre's cost follows the folded picture. Only
// structural changes re-run it: a phase change recolours nodes in place.
import dagre from '@dagrejs/dagre';

export interface GraphInput {
  id: string;
  /** The composing parent; null for the root. */
  owner: string | null;
  /** Upstream ids this node depends on. */
  deps: readonly string[];
  /** Secondary ordering key (kind/name), for stable layouts. */
  sortKey?: string;
}

export interface LayoutOptions {
  nodeW: number;
  nodeH: number;
  gapX: number;
  gapY: number;
  maxPerRow: number;
}

export const defaultLayout: LayoutOptions = { nodeW: 184, nodeH: 48, gapX: 20, gapY: 56, maxPerRow: 24 };

export interface Placed {
  id: string;
  x: number;
  y: number;
  /** The tier, from 0 at the top. */
  layer: number;
  row: number;
}

export interface LayoutEdge {
  from: string;
  to: string;
  kind: 'own' | 'dep';
  /** Drawn: an ownership edge is left out when its child depends on a sibling (the tier already shows it). */
  drawn: boolean;
}

/** Where a block (an expanded aggregate) is drawn: the box around its grid. */
export interface PlacedBlock {
  id: string;
  x: number;
  y: number;
  width: number;
  height: number;
  members: string[];
}

export interface Layout {
  nodes: Map<string, Placed>;
  blocks: Map<string, PlacedBlock>;
  edges: LayoutEdge[];
  width: number;
  height: number;
}

/** siblingRanks: each sibling's longest dependency path from a sibling with none (cycles go last). */
export function siblingRanks(sibs: readonly GraphInput[]): Map<string, number> {
  const ids = new Set(sibs.map((s) => s.id));
  const indeg = new Map<string, number>();
  const out = new Map<string, string[]>();
  for (const s of sibs) {
    const ups = [...new Set(s.deps)].filter((d) => ids.has(d) && d !== s.id);
    indeg.set(s.id, ups.length);
    for (const u of ups) {
      const l = out.get(u);
      if (l) l.push(s.id);
      else out.set(u, [s.id]);
    }
  }
  const rank = new Map<string, number>();
  const queue: string[] = [];
  for (const s of sibs) if (indeg.get(s.id) === 0) {
    queue.push(s.id);
    rank.set(s.id, 0);
  }
  for (let q = 0; q < queue.length; q++) {
    const u = queue[q]!;
    for (const v of out.get(u) ?? []) {
      rank.set(v, Math.max(rank.get(v) ?? 0, rank.get(u)! + 1));
      const d = indeg.get(v)! - 1;
      indeg.set(v, d);
      if (d === 0) queue.push(v);
    }
  }
  let max = 0;
  for (const r of rank.values()) max = Math.max(max, r);
  for (const s of sibs) if (indeg.get(s.id)! > 0) rank.set(s.id, max + 1); // in a cycle
  return rank;
}

const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/** layoutEdges lists the ownership and dependency edges between present nodes. */
export function layoutEdges(rootId: string, input: readonly GraphInput[]): LayoutEdge[] {
  const byId = new Map(input.map((n) => [n.id, n]));
  const ownerOf = (n: GraphInput) => (n.owner && byId.has(n.owner) && n.owner !== n.id ? n.owner : rootId);
  const edges: LayoutEdge[] = [];
  for (const n of input) {
    if (n.id === rootId) continue;
    const o = ownerOf(n);
    const deps = [...new Set(n.deps)].filter((d) => d !== n.id && byId.has(d));
    const onSibling = deps.some((d) => d !== rootId && ownerOf(byId.get(d)!) === o);
    if (byId.has(o)) edges.push({ from: o, to: n.id, kind: 'own', drawn: !onSibling });
    for (const d of deps) edges.push({ from: d, to: n.id, kind: 'dep', drawn: true });
  }
  return edges;
}

/** A block: siblings drawn as a grid (an expanded aggregate), laid out as one node. */
export type Blocks = ReadonlyMap<string, readonly string[]>;

export function layout(rootId: string, input: readonly GraphInput[], opts: LayoutOptions = defaultLayout, blocks: Blocks = new Map()): Layout {
  const edges = layoutEdges(rootId, input);
  const byId = new Map(input.map((n) => [n.id, n]));
  // dagre lays out the folded picture with each block as one node sized to
  // its grid: its cost follows what is drawn, not the number of members.
  const blockOf = new Map<string, string>();
  const step = opts.nodeW + opts.gapX;
  const cellH = opts.nodeH + opts.gapX;
  const grid = new Map<string, { cols: number; rows: number }>();
  for (const [b, members] of blocks) {
    const present = members.filter((m) => byId.has(m) && m !== rootId && !blockOf.has(m));
    if (present.length < 2) continue;
    const cols = Math.min(opts.maxPerRow, Math.ceil(Math.sqrt(present.length * 4)), present.length);
    grid.set(b, { cols, rows: Math.ceil(present.length / cols) });
    for (const m of present) blockOf.set(m, b);
  }
  const unit = (id: string) => blockOf.get(id) ?? id;
  const g = new dagre.graphlib.Graph({ multigraph: false });
  g.setGraph({ rankdir: 'BT', nodesep: opts.gapX, ranksep: opts.gapY, ranker: 'longest-path' });
  g.setDefaultEdgeLabel(() => ({}));
  const sorted = [...input].sort((a, b) => cmp(a.sortKey ?? a.id, b.sortKey ?? b.id) || cmp(a.id, b.id));
  for (const n of sorted) {
    const u = unit(n.id);
    if (g.hasNode(u)) continue;
    const gr = grid.get(u);
    g.setNode(u, gr ? { width: gr.cols * step - opts.gapX, height: gr.rows * cellH - opts.gapX } : { width: opts.nodeW, height: opts.nodeH });
  }
  // The edges go in reversed and drawn bottom-up: longest-path then ranks
  // each node one tier below its deepest owner or upstream (its dependency
  // depth from the root), which a forward longest-path would not (it sinks
  // every leaf to the bottom tier). A child that depends on a sibling is
  // below its owner through that sibling: its ownership edge is left out.
  for (const e of edges) {
    const [from, to] = [unit(e.from), unit(e.to)];
    if (from !== to && e.drawn) g.setEdge(to, from);
  }
  dagre.layout(g);

  const nodes = new Map<string, Placed>();
  const box = (u: string) => {
    const p = g.node(u) as { x: number; y: number; width: number; height: number };
    return { x: p.x - p.width / 2, y: p.y - p.height / 2 };
  };
  const ys = [...new Set(g.nodes().map((u) => box(u).y))].sort((a, b) => a - b);
  const layerOf = (u: string) => ys.indexOf(box(u).y);
  for (const n of sorted) if (!blockOf.has(n.id)) nodes.set(n.id, { id: n.id, ...box(n.id), layer: layerOf(n.id), row: layerOf(n.id) });
  // Blocks top down, so a block's upstream members are placed before it;
  // each member's cell follows the reading order (row, then column) of its
  // upstreams: the routes of a vpc sit in the vpc's order.
  const order = [...grid.keys()].sort((a, b) => box(a).y - box(b).y);
  const placedBlocks = new Map<string, PlacedBlock>();
  const rank = (p: Placed) => p.y * 1e6 + p.x;
  for (const b of order) {
    const { x, y } = box(b);
    const { cols, rows } = grid.get(b)!;
    const layer = layerOf(b);
    const ms = blocks.get(b)!.filter((m) => blockOf.get(m) === b);
    const key = new Map<string, number>();
    for (const m of ms) {
      const rs = byId
        .get(m)!
        .deps.map((d) => nodes.get(d))
        .filter((p): p is Placed => p !== undefined)
        .map(rank);
      key.set(m, rs.length ? rs.reduce((s, v) => s + v, 0) / rs.length : 0);
    }
    placedBlocks.set(b, { id: b, x, y, width: cols * step - opts.gapX, height: rows * cellH - opts.gapX, members: ms });
    ms.sort((p, q) => key.get(p)! - key.get(q)! || cmp(byId.get(p)!.sortKey ?? p, byId.get(q)!.sortKey ?? q));
    ms.forEach((m, i) => nodes.set(m, { id: m, x: x + (i % cols) * step, y: y + Math.floor(i / cols) * cellH, layer, row: layer }));
  }
  const graph = g.graph() as { width?: number; height?: number };
  return { nodes, blocks: placedBlocks, edges, width: Math.max(1, graph.width ?? 1), height: Math.max(1, graph.height ?? 1) };
}
