// The graph drawing: an SVG of the laid-out nodes and edges, pannable
// (drag, arrow keys with Shift) and zoomable (wheel, + and -, 0 fits).
// Arrow keys move the focus from node to node; Enter opens the focused one.
// Pan and zoom only change one transform: the nodes are a memoized layer.
import { memo, useCallback, useEffect, useMemo, useRef, useState } from 'react';
import type { Phase } from '../gql/graphql';
import { phaseClass, phaseLabel } from '../resources/mappers';
import { edgeKey, type FailureHighlight } from './failures';
import { defaultLayout, edgePath, type Layout } from './layout';
import type { Aggregate } from './fold';
import type { GNode } from './load';

interface View {
  x: number;
  y: number;
  k: number;
}

const clampK = (k: number) => Math.min(4, Math.max(0.05, k));

function fit(l: Layout, w: number, h: number): View {
  const pad = 24;
  const k = clampK(Math.min((w - pad * 2) / l.width, (h - pad * 2) / l.height, 1.5));
  return { k, x: (w - l.width * k) / 2, y: Math.max(pad, (h - l.height * k) / 2) };
}

/** PhaseBar draws an aggregate's members by phase, worst first, with its counts. */
function PhaseBar({ agg, width }: { agg: Aggregate; width: number }) {
  const total = agg.members.length;
  let x = 0;
  return (
    <g className="phase-bar" transform="translate(8,26)">
      {agg.counts.map(({ phase, count }) => {
        const w = Math.max(2, (count / total) * width);
        const r = <rect key={phase} x={x} y={0} width={w} height={8} className={`bar ${phaseClass(phase)}`} />;
        x += w;
        return r;
      })}
    </g>
  );
}

const Layer = memo(function Layer({ layout, nodes, aggregates, highlight, selected, focused, onPick }: { layout: Layout; nodes: Map<string, GNode>; aggregates: Map<string, Aggregate>; highlight: FailureHighlight; selected: string | null; focused: string | null; onPick: (id: string) => void }) {
  const o = defaultLayout;
  return (
    <>
      <g className="edges">
        {layout.edges.map((e) => {
          const a = layout.nodes.get(e.from)!;
          const b = layout.nodes.get(e.to)!;
          const hot = highlight.edges.has(edgeKey(e.from, e.to));
          return <path key={`${e.kind}:${e.from}>${e.to}`} d={edgePath(a, b)} className={`edge edge-${e.kind}${hot ? ' hot' : ''}`} markerEnd={e.kind === 'dep' ? 'url(#arrow)' : undefined} />;
        })}
      </g>
      <g className="nodes">
        {[...layout.nodes.values()].map((p) => {
          const n = nodes.get(p.id);
          if (!n) return null;
          const cls = ['node', phaseClass(n.phase), highlight.nodes.has(p.id) ? 'hot' : '', p.id === selected ? 'selected' : '', p.id === focused ? 'focused' : ''].filter(Boolean).join(' ');
          const agg = aggregates.get(p.id);
          if (agg) {
            const counts = agg.counts.map((c) => `${c.count} ${phaseLabel(c.phase)}`).join(', ');
            return (
              <g key={p.id} className={`${cls} aggregate`} transform={`translate(${p.x},${p.y})`} onClick={() => onPick(p.id)} data-id={p.id} data-aggregate={agg.members.length} data-phase={n.phase}>
                <title>{`${agg.members.length} ${n.kind} resources — ${counts}. Click to expand.`}</title>
                <rect width={o.nodeW} height={o.nodeH} rx={6} />
                <text x={8} y={17} className="node-name">
                  {`${n.kind} ${n.name}`}
                </text>
                <text x={o.nodeW - 8} y={17} className="node-kind" textAnchor="end">
                  {agg.counts[0]!.phase === 'READY' ? 'all ready' : `${agg.counts[0]!.count} ${phaseLabel(agg.counts[0]!.phase).toLowerCase()}`}
                </text>
                <PhaseBar agg={agg} width={o.nodeW - 16} />
              </g>
            );
          }
          return (
            <g key={p.id} className={cls} transform={`translate(${p.x},${p.y})`} onClick={() => onPick(p.id)} data-id={p.id} data-name={n.name} data-phase={n.phase}>
              <title>{`${n.kind}/${n.name} — ${phaseLabel(n.phase)}`}</title>
              <rect width={o.nodeW} height={o.nodeH} rx={6} />
              <text x={8} y={16} className="node-kind">
                {n.kind}
              </text>
              <text x={8} y={32} className="node-name">
                {n.name.length > 24 ? `${n.name.slice(0, 23)}…` : n.name}
              </text>
            </g>
          );
        })}
      </g>
    </>
  );
});

export function GraphCanvas({ layout, nodes, aggregates, highlight, selected, onSelect }: { layout: Layout; nodes: Map<string, GNode>; aggregates: Map<string, Aggregate>; highlight: FailureHighlight; selected: string | null; onSelect: (id: string) => void }) {
  const box = useRef<HTMLDivElement>(null);
  const [view, setView] = useState<View | null>(null);
  const [focused, setFocused] = useState<string | null>(selected);
  const drag = useRef<{ x: number; y: number; vx: number; vy: number; moved: boolean } | null>(null);
  const dragged = useRef(false);
  /** The user moved the view: re-layouts no longer refit it. */
  const userMoved = useRef(false);
  const pick = useCallback(
    (id: string) => {
      if (dragged.current) return;
      setFocused(id);
      onSelect(id);
    },
    [onSelect],
  );
  const size = () => ({ w: box.current?.clientWidth ?? 800, h: box.current?.clientHeight ?? 600 });

  // Fit the picture on every re-layout until the user pans or zooms.
  useEffect(() => {
    if (userMoved.current || layout.nodes.size === 0) return;
    const { w, h } = size();
    setView(fit(layout, w, h));
  }, [layout]);

  // Wheel zoom needs a non-passive listener to keep the page from scrolling.
  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const onWheel = (e: WheelEvent) => {
      e.preventDefault();
      userMoved.current = true;
      const r = el.getBoundingClientRect();
      const mx = e.clientX - r.left;
      const my = e.clientY - r.top;
      setView((v) => {
        if (!v) return v;
        const k = clampK(v.k * Math.exp(-e.deltaY * 0.0015));
        return { k, x: mx - ((mx - v.x) * k) / v.k, y: my - ((my - v.y) * k) / v.k };
      });
    };
    el.addEventListener('wheel', onWheel, { passive: false });
    return () => el.removeEventListener('wheel', onWheel);
  }, []);

  const pos = useMemo(() => {
    const m = new Map<string, { row: number; col: number }>();
    layout.rows.forEach((r, ri) => r.forEach((id, ci) => m.set(id, { row: ri, col: ci })));
    return m;
  }, [layout]);

  const zoom = (f: number) => {
    userMoved.current = true;
    const { w, h } = size();
    setView((v) => {
      if (!v) return v;
      const k = clampK(v.k * f);
      return { k, x: w / 2 - ((w / 2 - v.x) * k) / v.k, y: h / 2 - ((h / 2 - v.y) * k) / v.k };
    });
  };

  const centerOn = (id: string) => {
    const p = layout.nodes.get(id);
    if (!p) return;
    const { w, h } = size();
    setView((v) => {
      if (!v) return v;
      const sx = v.x + (p.x + defaultLayout.nodeW / 2) * v.k;
      const sy = v.y + (p.y + defaultLayout.nodeH / 2) * v.k;
      if (sx > 40 && sx < w - 40 && sy > 40 && sy < h - 40) return v;
      userMoved.current = true;
      return { ...v, x: w / 2 - (p.x + defaultLayout.nodeW / 2) * v.k, y: h / 2 - (p.y + defaultLayout.nodeH / 2) * v.k };
    });
  };

  const move = (dr: number, dc: number) => {
    const cur = focused && pos.get(focused) ? pos.get(focused)! : null;
    let row = cur ? cur.row + dr : 0;
    row = Math.max(0, Math.min(layout.rows.length - 1, row));
    const r = layout.rows[row];
    if (!r || r.length === 0) return;
    let col: number;
    if (!cur) col = 0;
    else if (dr !== 0) {
      // Keep the horizontal position when changing rows.
      const x = layout.nodes.get(focused!)!.x;
      col = r.reduce((best, id, i) => (Math.abs(layout.nodes.get(id)!.x - x) < Math.abs(layout.nodes.get(r[best]!)!.x - x) ? i : best), 0);
    } else col = Math.max(0, Math.min(r.length - 1, cur.col + dc));
    const id = r[col]!;
    setFocused(id);
    centerOn(id);
  };

  const onKeyDown = (e: React.KeyboardEvent) => {
    const pan = 60;
    if (e.shiftKey && e.key.startsWith('Arrow')) {
      e.preventDefault();
      const d = { ArrowLeft: [pan, 0], ArrowRight: [-pan, 0], ArrowUp: [0, pan], ArrowDown: [0, -pan] }[e.key] ?? [0, 0];
      userMoved.current = true;
      setView((v) => (v ? { ...v, x: v.x + d[0]!, y: v.y + d[1]! } : v));
      return;
    }
    switch (e.key) {
      case 'ArrowLeft':
        return e.preventDefault(), move(0, -1);
      case 'ArrowRight':
        return e.preventDefault(), move(0, 1);
      case 'ArrowUp':
        return e.preventDefault(), move(-1, 0);
      case 'ArrowDown':
        return e.preventDefault(), move(1, 0);
      case 'Enter':
      case ' ':
        if (focused) {
          e.preventDefault();
          onSelect(focused);
        }
        return;
      case '+':
      case '=':
        return e.preventDefault(), zoom(1.25);
      case '-':
        return e.preventDefault(), zoom(0.8);
      case '0': {
        e.preventDefault();
        userMoved.current = false;
        const { w, h } = size();
        return setView(fit(layout, w, h));
      }
    }
  };

  const fn = focused ? nodes.get(focused) : undefined;
  return (
    <div className="graph-wrap">
      <div className="graph-tools" role="toolbar" aria-label="Zoom">
        <button type="button" onClick={() => zoom(1.25)} aria-label="Zoom in">
          +
        </button>
        <button type="button" onClick={() => zoom(0.8)} aria-label="Zoom out">
          −
        </button>
        <button
          type="button"
          onClick={() => {
            userMoved.current = false;
            setView(fit(layout, size().w, size().h));
          }}
        >
          Fit
        </button>
      </div>
      <div
        ref={box}
        className={`graph-box${view && view.k < 0.35 ? ' far' : ''}`}
        tabIndex={0}
        role="application"
        aria-roledescription="resource graph"
        aria-label="Resource graph. Arrow keys move between nodes, Enter opens one, Shift+arrows pan, + and − zoom, 0 fits."
        onKeyDown={onKeyDown}
        onPointerDown={(e) => {
          if (!view) return;
          dragged.current = false;
          drag.current = { x: e.clientX, y: e.clientY, vx: view.x, vy: view.y, moved: false };
        }}
        onPointerMove={(e) => {
          const d = drag.current;
          if (!d) return;
          const dx = e.clientX - d.x;
          const dy = e.clientY - d.y;
          if (!d.moved && Math.abs(dx) + Math.abs(dy) < 4) return;
          if (!d.moved) (e.currentTarget as HTMLElement).setPointerCapture?.(e.pointerId);
          d.moved = true;
          userMoved.current = true;
          setView((v) => (v ? { ...v, x: d.vx + dx, y: d.vy + dy } : v));
        }}
        onPointerUp={() => {
          dragged.current = !!drag.current?.moved;
          drag.current = null;
        }}
        data-testid="graph"
      >
        <svg width="100%" height="100%" aria-hidden="true">
          <defs>
            <marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">
              <path d="M0,0L10,5L0,10z" className="arrow" />
            </marker>
          </defs>
          {view ? (
            <g transform={`translate(${view.x},${view.y}) scale(${view.k})`}>
              <Layer layout={layout} nodes={nodes} aggregates={aggregates} highlight={highlight} selected={selected} focused={focused} onPick={pick} />
            </g>
          ) : null}
        </svg>
      </div>
      <p className="sr-only" aria-live="polite">
        {fn ? (aggregates.has(fn.id) ? `${fn.kind} ${fn.name}, Enter expands` : `${fn.kind}/${fn.name}, ${phaseLabel(fn.phase as Phase)}`) : ''}
      </p>
    </div>
  );
}
