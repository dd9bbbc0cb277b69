// The graph drawing, by React Flow (@xyflow/react): the laid-out nodes and
// edges, smooth zoom (wheel, pinch, + and −, 0 fits) and pan (drag, Shift
// and the arrow keys). Tab moves between nodes and Enter opens one; a click
// on an aggregate expands it. Node and edge objects are reused while what
// they draw is unchanged, so a live update re-renders only the nodes whose
// phase or highlight moved.
import { memo, useCallback, useEffect, useMemo, useRef } from 'react';
import { Handle, MarkerType, Position, ReactFlow, ReactFlowProvider, useReactFlow, type Edge, type Node, type NodeHandle, type NodeProps } from '@xyflow/react';
import '@xyflow/react/dist/base.css';
import type { Phase } from '../gql/graphql';
import { phaseClass, phaseLabel } from '../resources/mappers';
import { edgeKey, type FailureHighlight } from './failures';
import { defaultLayout, type Layout, type LayoutEdge } from './layout';
import type { Aggregate } from './fold';
import type { GNode } from './load';

const MIN_ZOOM = 0.05;
const MAX_ZOOM = 2.5;
/** The fit never magnifies past this: a four-node picture stays a picture. */
const FIT_MAX = 1.5;

export interface View {
  x: number;
  y: number;
  zoom: number;
}

/** fit is the viewport showing the whole layout in a w×h box. */
export function fit(l: Pick<Layout, 'width' | 'height'>, w: number, h: number): View {
  const pad = 24;
  const zoom = Math.min(FIT_MAX, Math.max(MIN_ZOOM, Math.min((w - pad * 2) / l.width, (h - pad * 2) / l.height)));
  return { zoom, x: (w - l.width * zoom) / 2, y: Math.max(pad, (h - l.height * zoom) / 2) };
}

interface ResData extends Record<string, unknown> {
  n: GNode;
  hot: boolean;
  sel: boolean;
}
interface AggData extends ResData {
  agg: Aggregate;
}
interface BlockData extends Record<string, unknown> {
  id: string;
  kind: string;
  count: number;
  onFold: (id: string) => void;
}
type ResFlowNode = Node<ResData, 'res'>;
type AggFlowNode = Node<AggData, 'agg'>;
type BlockFlowNode = Node<BlockData, 'block'>;
type FlowNode = ResFlowNode | AggFlowNode | BlockFlowNode;

/** The frame around an expanded aggregate's grid: its kind and count, a button folding it back. */
const BlockNode = memo(function BlockNode({ data }: NodeProps<BlockFlowNode>) {
  return (
    <div className="gblock" data-block={data.id} data-count={data.count}>
      {handles}
      <span className="gblock-head">
        {`${data.kind} ×${data.count.toLocaleString('en-US')}`}
        <button type="button" className="link nodrag" onClick={() => data.onFold(data.id)}>
          fold
        </button>
      </span>
    </div>
  );
});

/** A block's frame: this much around its grid, the head above it. */
const FRAME = 10;
const FRAME_HEAD = 26;

const handles = (
  <>
    <Handle type="target" position={Position.Top} isConnectable={false} />
    <Handle type="source" position={Position.Bottom} isConnectable={false} />
  </>
);

const nodeClass = (d: ResData) => ['gnode', phaseClass(d.n.phase), d.hot ? 'hot' : '', d.sel ? 'selected' : ''].filter(Boolean).join(' ');

const ResNode = memo(function ResNode({ data }: NodeProps<ResFlowNode>) {
  const { n } = data;
  return (
    <div className={nodeClass(data)} data-id={n.id} data-name={n.name} data-phase={n.phase} title={`${n.kind}/${n.name} — ${phaseLabel(n.phase)}`}>
      {handles}
      <span className="node-kind">{n.kind}</span>
      <span className="node-name">{n.name.length > 26 ? `${n.name.slice(0, 25)}…` : n.name}</span>
    </div>
  );
});

/** AggNode: an aggregate, "route ×500", its worst share and a bar of its members by phase. */
const AggNode = memo(function AggNode({ data }: NodeProps<AggFlowNode>) {
  const { n, agg } = data;
  const total = agg.members.length;
  const counts = agg.counts.map((c) => `${c.count} ${phaseLabel(c.phase)}`).join(', ');
  const head = agg.counts[0]!;
  return (
    <div className={`${nodeClass(data)} aggregate`} data-id={n.id} data-aggregate={total} data-phase={n.phase} title={`${total} ${n.kind} resources — ${counts}. Click to expand.`}>
      {handles}
      <span className="node-line">
        <span className="node-name">{`${n.kind} ${n.name}`}</span>
        <span className="node-kind">{head.phase === 'READY' ? 'all ready' : `${head.count} ${phaseLabel(head.phase).toLowerCase()}`}</span>
      </span>
      <span className="phase-bar" aria-hidden="true">
        {agg.counts.map(({ phase, count }) => (
          <span key={phase} className={`bar ${phaseClass(phase)}`} style={{ flexGrow: count, minWidth: 2 }} data-phase={phase} data-count={count} />
        ))}
      </span>
    </div>
  );
});

const nodeTypes = { res: ResNode, agg: AggNode, block: BlockNode };

/** Every node's two handles: edges leave the bottom centre and enter the top centre. */
const nodeHandles: NodeHandle[] = [
  { type: 'target', position: Position.Top, x: defaultLayout.nodeW / 2, y: 0, width: 1, height: 1 },
  { type: 'source', position: Position.Bottom, x: defaultLayout.nodeW / 2, y: defaultLayout.nodeH - 1, width: 1, height: 1 },
];

interface Props {
  layout: Layout;
  nodes: Map<string, GNode>;
  aggregates: Map<string, Aggregate>;
  highlight: FailureHighlight;
  selected: string | null;
  onSelect: (id: string) => void;
  /** Fold an expanded aggregate back. */
  onFold: (id: string) => void;
  /** Centre the view on this node once it is laid out (n: a new request). */
  focus: { id: string; n: number } | null;
}

/** useFlowNodes builds React Flow's nodes, reusing each object whose drawing is unchanged. */
function useFlowNodes({ layout, nodes, aggregates, highlight, selected, onFold }: Omit<Props, 'onSelect' | 'focus'>): FlowNode[] {
  const cache = useRef(new Map<string, { key: string; node: FlowNode }>());
  return useMemo(() => {
    const next = new Map<string, { key: string; node: FlowNode }>();
    const out: FlowNode[] = [];
    for (const b of layout.blocks.values()) {
      const kind = nodes.get(b.members[0]!)?.kind ?? '';
      const key = `block:${b.x},${b.y},${b.width},${b.height},${kind},${b.members.length}`;
      const prev = cache.current.get(b.id);
      const w = b.width + FRAME * 2;
      const h = b.height + FRAME + FRAME_HEAD;
      const node: FlowNode =
        prev && prev.key === key
          ? prev.node
          : { id: b.id, type: 'block', position: { x: b.x - FRAME, y: b.y - FRAME_HEAD }, width: w, height: h, measured: { width: w, height: h }, zIndex: -1, focusable: false, handles: [{ type: 'target', position: Position.Top, x: w / 2, y: 0, width: 1, height: 1 }], data: { id: b.id, kind, count: b.members.length, onFold } };
      next.set(b.id, { key, node });
      out.push(node);
    }
    const { nodeW: width, nodeH: height } = defaultLayout;
    // Sizes and handles given, not measured: an edge never waits for (or,
    // after a node object is replaced, loses) a DOM measurement.
    const measured = { width, height };
    for (const p of layout.nodes.values()) {
      const n = nodes.get(p.id);
      if (!n) continue;
      const agg = aggregates.get(p.id);
      const hot = highlight.nodes.has(p.id);
      const sel = p.id === selected;
      const key = `${p.x},${p.y},${n.phase},${n.name},${hot},${sel}${agg ? agg.counts.map((c) => `,${c.phase}${c.count}`).join('') : ''}`;
      const prev = cache.current.get(p.id);
      const node: FlowNode =
        prev && prev.key === key && prev.node.type !== 'block' && (prev.node.data as ResData).n.kind === n.kind
          ? prev.node
          : agg
            ? { id: p.id, type: 'agg', position: { x: p.x, y: p.y }, width, height, measured, handles: nodeHandles, data: { n, agg, hot, sel } }
            : { id: p.id, type: 'res', position: { x: p.x, y: p.y }, width, height, measured, handles: nodeHandles, data: { n, hot, sel } };
      next.set(p.id, { key, node });
      out.push(node);
    }
    cache.current = next;
    return out;
  }, [layout, nodes, aggregates, highlight, selected, onFold]);
}

function useFlowEdges(layout: Layout, highlight: FailureHighlight): Edge[] {
  const cache = useRef(new Map<string, Edge>());
  return useMemo(() => {
    const next = new Map<string, Edge>();
    const out: Edge[] = [];
    // A node outside any block with edges into two or more members of one
    // block (an expanded aggregate under its owner or upstream) gets one edge
    // to the block's frame instead of a fan of hundreds.
    const blockOf = new Map<string, string>();
    for (const b of layout.blocks.values()) for (const m of b.members) blockOf.set(m, b.id);
    const fan = new Map<string, { kind: LayoutEdge['kind']; from: string; to: string; n: number; hot: boolean }>();
    for (const e of layout.edges) {
      const b = blockOf.get(e.to);
      // Member-to-member edges between two blocks stay one by one (a vpc to its routes).
      if (!b || blockOf.has(e.from) || (!e.drawn && !highlight.edges.has(edgeKey(e.from, e.to)))) continue;
      const k = `${e.kind}:${e.from}>${b}`;
      const f = fan.get(k) ?? { kind: e.kind, from: e.from, to: b, n: 0, hot: false };
      f.n++;
      f.hot ||= highlight.edges.has(edgeKey(e.from, e.to));
      fan.set(k, f);
    }
    const fanned = (e: LayoutEdge) => {
      const b = blockOf.get(e.to);
      return b !== undefined && (fan.get(`${e.kind}:${e.from}>${b}`)?.n ?? 0) >= 2;
    };
    for (const [id, f] of fan) {
      if (f.n < 2) continue;
      const className = `edge-${f.kind} edge-fan${f.hot ? ' hot' : ''}`;
      const prev = cache.current.get(id);
      const edge: Edge = prev && prev.className === className ? prev : { id, source: f.from, target: f.to, className, focusable: false, markerEnd: f.kind === 'dep' ? { type: MarkerType.ArrowClosed, width: 16, height: 16 } : undefined };
      next.set(id, edge);
      out.push(edge);
    }
    for (const e of layout.edges) {
      if (fanned(e)) continue;
      if (!layout.nodes.has(e.from) || !layout.nodes.has(e.to)) continue;
      const hot = highlight.edges.has(edgeKey(e.from, e.to));
      // An ownership edge the tiers make redundant is still drawn on a failure path.
      if (!e.drawn && !hot) continue;
      const id = `${e.kind}:${e.from}>${e.to}`;
      const className = `edge-${e.kind}${hot ? ' hot' : ''}`;
      const prev = cache.current.get(id);
      const edge: Edge = prev && prev.className === className ? prev : { id, source: e.from, target: e.to, className, focusable: false, markerEnd: e.kind === 'dep' ? { type: MarkerType.ArrowClosed, width: 16, height: 16 } : undefined };
      next.set(id, edge);
      out.push(edge);
    }
    cache.current = next;
    return out;
  }, [layout, highlight]);
}

/** How far one Shift+arrow pans, in screen pixels, and which way each arrow moves the picture. */
const PAN_STEP = 80;
const PAN_KEYS: Record<'ArrowUp' | 'ArrowDown' | 'ArrowLeft' | 'ArrowRight', [number, number]> = {
  ArrowUp: [0, 1],
  ArrowDown: [0, -1],
  ArrowLeft: [1, 0],
  ArrowRight: [-1, 0],
};

function Flow(props: Props) {
  const { layout, nodes, aggregates, onSelect, focus } = props;
  const rf = useReactFlow();
  const box = useRef<HTMLDivElement>(null);
  /** The user moved the view: re-layouts no longer refit it. */
  const userMoved = useRef(false);
  const flowNodes = useFlowNodes(props);
  const flowEdges = useFlowEdges(layout, props.highlight);
  const size = () => ({ w: box.current?.clientWidth ?? 800, h: box.current?.clientHeight ?? 600 });
  const refit = useCallback(
    (duration = 0) => {
      const { w, h } = size();
      const v = fit(layout, w, h);
      void rf.setViewport({ x: v.x, y: v.y, zoom: v.zoom }, { duration });
    },
    [layout, rf],
  );
  // Fit the picture on every re-layout until the user pans or zooms.
  useEffect(() => {
    if (!userMoved.current && layout.nodes.size) refit();
  }, [layout, refit]);
  // A search result: centre on it once it is laid out, close enough to read.
  const focused = useRef(0);
  useEffect(() => {
    if (!focus || focused.current === focus.n) return;
    const p = layout.nodes.get(focus.id);
    if (!p) return;
    focused.current = focus.n;
    userMoved.current = true;
    void rf.setCenter(p.x + defaultLayout.nodeW / 2, p.y + defaultLayout.nodeH / 2, { zoom: Math.max(rf.getZoom(), 1.2), duration: 300 });
  }, [focus, layout, rf]);

  const onKeyDown = (e: React.KeyboardEvent) => {
    if ((e.target as HTMLElement).closest('input, button')) return;
    switch (e.key) {
      case 'Enter':
      case ' ': {
        const id = (document.activeElement as HTMLElement | null)?.closest<HTMLElement>('.react-flow__node')?.dataset.id;
        if (id) {
          e.preventDefault();
          onSelect(id);
        }
        return;
      }
      case '+':
      case '=':
        userMoved.current = true;
        return e.preventDefault(), void rf.zoomIn({ duration: 150 });
      case '-':
        userMoved.current = true;
        return e.preventDefault(), void rf.zoomOut({ duration: 150 });
      case '0':
        userMoved.current = false;
        return e.preventDefault(), refit(200);
      case 'ArrowUp':
      case 'ArrowDown':
      case 'ArrowLeft':
      case 'ArrowRight': {
        // Shift+arrows pan (plain arrows stay the page's and the nodes').
        if (!e.shiftKey) return;
        const [dx, dy] = PAN_KEYS[e.key];
        const v = rf.getViewport();
        userMoved.current = true;
        e.preventDefault();
        void rf.setViewport({ x: v.x + dx * PAN_STEP, y: v.y + dy * PAN_STEP, zoom: v.zoom }, { duration: 100 });
        return;
      }
    }
  };

  return (
    <div className="graph-wrap">
      <div className="graph-tools" role="toolbar" aria-label="Zoom">
        <button type="button" onClick={() => ((userMoved.current = true), void rf.zoomIn({ duration: 150 }))} aria-label="Zoom in">
          +
        </button>
        <button type="button" onClick={() => ((userMoved.current = true), void rf.zoomOut({ duration: 150 }))} aria-label="Zoom out">
          −
        </button>
        <button
          type="button"
          className="graph-fit"
          onClick={() => {
            userMoved.current = false;
            refit(200);
          }}
        >
          Fit
        </button>
      </div>
      <div
        ref={box}
        className="graph-box"
        tabIndex={0}
        role="application"
        aria-roledescription="resource graph"
        aria-label="Resource graph. Tab moves between nodes, Enter opens or expands one, drag or Shift+arrows pan, the wheel, + and − zoom, 0 fits."
        onKeyDown={onKeyDown}
        data-testid="graph"
      >
        <ReactFlow<FlowNode, Edge>
          nodes={flowNodes}
          edges={flowEdges}
          nodeTypes={nodeTypes}
          onNodeClick={(_, n) => n.type !== 'block' && onSelect(n.id)}
          onMoveStart={(ev) => {
            if (ev) userMoved.current = true;
          }}
          nodesDraggable={false}
          nodesConnectable={false}
          elementsSelectable={false}
          edgesFocusable={false}
          zoomOnDoubleClick={false}
          minZoom={MIN_ZOOM}
          maxZoom={MAX_ZOOM}
          onlyRenderVisibleElements={layout.nodes.size > 400}
          proOptions={{ hideAttribution: false }}
        />
      </div>
      <p className="sr-only" aria-live="polite">
        {props.selected && nodes.get(props.selected) ? (aggregates.has(props.selected) ? `${nodes.get(props.selected)!.kind} ${nodes.get(props.selected)!.name}` : `${nodes.get(props.selected)!.kind}/${nodes.get(props.selected)!.name}, ${phaseLabel(nodes.get(props.selected)!.phase as Phase)}`) : ''}
      </p>
    </div>
  );
}

export function GraphCanvas(props: Props) {
  return (
    <ReactFlowProvider>
      <Flow {...props} />
    </ReactFlowProvider>
  );
}
