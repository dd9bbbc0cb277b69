// A layered layout for a composite's subtree: the root on top, each node's
// children below it, and among siblings every dependency pushes the
// dependent one layer further down (longest path), so ownership and
// dependency edges both point downwards. Nodes in a layer are ordered by
// the mean position of their owner and upstreams (one barycentric sweep),
// and layers wider than maxPerRow wrap into several rows so a 1,000-node
// tree stays a screen-shaped picture. O(n log n + edges).

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

export const defaultLayout: LayoutOptions = { nodeW: 168, nodeH: 40, gapX: 16, gapY: 40, maxPerRow: 24 };

export interface Placed {
  id: string;
  x: number;
  y: number;
  layer: number;
  row: number;
}

export interface LayoutEdge {
  from: string;
  to: string;
  kind: 'own' | 'dep';
}

export interface Layout {
  nodes: Map<string, Placed>;
  edges: LayoutEdge[];
  /** Node ids row by row, left to right (keyboard navigation). */
  rows: string[][];
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

export function layout(rootId: string, input: readonly GraphInput[], opts: LayoutOptions = defaultLayout): Layout {
  const byId = new Map(input.map((n) => [n.id, n]));
  const kids = new Map<string, GraphInput[]>();
  for (const n of input) {
    if (n.id === rootId) continue;
    // A node whose owner is not loaded hangs off the root.
    const o = n.owner && byId.has(n.owner) && n.owner !== n.id ? n.owner : rootId;
    const l = kids.get(o);
    if (l) l.push(n);
    else kids.set(o, [n]);
  }
  // Layers: root 0; a child one below its owner plus its sibling rank.
  const layerOf = new Map<string, number>();
  const ownerOf = new Map<string, string>();
  if (byId.has(rootId)) layerOf.set(rootId, 0);
  const stack = [rootId];
  while (stack.length) {
    const p = stack.pop()!;
    const cs = kids.get(p);
    if (!cs) continue;
    const ranks = siblingRanks(cs);
    for (const c of cs) {
      if (layerOf.has(c.id)) continue; // ownership cycle: keep the first placement
      layerOf.set(c.id, layerOf.get(p)! + 1 + ranks.get(c.id)!);
      ownerOf.set(c.id, p);
      stack.push(c.id);
    }
  }
  const layers: string[][] = [];
  for (const [id, l] of layerOf) (layers[l] ??= []).push(id);

  const step = opts.nodeW + opts.gapX;
  const rowH = opts.nodeH + opts.gapY;
  const center = new Map<string, number>(); // provisional x centre, in node slots
  const nodes = new Map<string, Placed>();
  const rows: string[][] = [];
  let maxRow = 1;
  for (const layer of layers) if (layer) maxRow = Math.max(maxRow, Math.min(layer.length, opts.maxPerRow));

  let rowIndex = 0;
  layers.forEach((layer, li) => {
    if (!layer || layer.length === 0) return;
    // Barycentre of owner and upstreams already placed.
    const bary = new Map<string, number>();
    for (const id of layer) {
      let sum = 0;
      let n = 0;
      const o = ownerOf.get(id);
      if (o !== undefined && center.has(o)) {
        sum += center.get(o)! * 2; // the owner weighs double: siblings stay together
        n += 2;
      }
      for (const d of byId.get(id)!.deps) {
        const c = center.get(d);
        if (c !== undefined) {
          sum += c;
          n++;
        }
      }
      bary.set(id, n ? sum / n : maxRow / 2);
    }
    const sorted = layer.slice().sort((a, b) => bary.get(a)! - bary.get(b)! || cmp(byId.get(a)!.sortKey ?? a, byId.get(b)!.sortKey ?? b) || cmp(a, b));
    for (let start = 0; start < sorted.length; start += opts.maxPerRow) {
      const row = sorted.slice(start, start + opts.maxPerRow);
      const offset = (maxRow - row.length) / 2;
      row.forEach((id, i) => {
        const slot = offset + i;
        center.set(id, slot + 0.5);
        nodes.set(id, { id, x: slot * step, y: rowIndex * rowH, layer: li, row: rowIndex });
      });
      rows.push(row);
      rowIndex++;
    }
  });

  const edges: LayoutEdge[] = [];
  for (const n of input) {
    if (!nodes.has(n.id)) continue;
    const o = ownerOf.get(n.id);
    if (o !== undefined && nodes.has(o)) edges.push({ from: o, to: n.id, kind: 'own' });
    for (const d of new Set(n.deps)) if (d !== n.id && nodes.has(d)) edges.push({ from: d, to: n.id, kind: 'dep' });
  }
  return { nodes, edges, rows, width: Math.max(1, maxRow * step - opts.gapX), height: Math.max(1, rowIndex * rowH - opts.gapY) };
}

/** edgePath draws an edge from the bottom of one node to the top of another. */
export function edgePath(a: Placed, b: Placed, opts: LayoutOptions = defaultLayout): string {
  const x1 = a.x + opts.nodeW / 2;
  const y1 = a.y + opts.nodeH;
  const x2 = b.x + opts.nodeW / 2;
  const y2 = b.y;
  if (y2 > y1) {
    const my = (y1 + y2) / 2;
    return `M${x1},${y1}C${x1},${my} ${x2},${my} ${x2},${y2}`;
  }
  // Same row or upwards (a cross-owner dependency): loop out to the side.
  const bend = opts.nodeH + Math.abs(x2 - x1) * 0.1;
  return `M${x1},${y1}C${x1},${y1 + bend} ${x2},${y2 - bend} ${x2},${y2}`;
}
