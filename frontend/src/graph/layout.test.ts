import { describe, expect, it } from 'vitest';
import { failurePaths } from './failures';
import { defaultLayout, layout, siblingRanks, type GraphInput } from './layout';

const n = (id: string, owner: string | null, deps: string[] = []): GraphInput => ({ id, owner, deps });

describe('siblingRanks', () => {
  it('ranks by the longest dependency path among siblings', () => {
    const r = siblingRanks([n('vpc', 'r'), n('tgw', 'r'), n('route', 'r', ['vpc', 'tgw']), n('app', 'r', ['route', 'vpc'])]);
    expect(Object.fromEntries(r)).toEqual({ vpc: 0, tgw: 0, route: 1, app: 2 });
  });
  it('puts a cycle below everything else instead of looping', () => {
    const r = siblingRanks([n('a', 'r', ['b']), n('b', 'r', ['a']), n('c', 'r')]);
    expect(r.get('c')).toBe(0);
    expect(r.get('a')).toBe(1);
    expect(r.get('b')).toBe(1);
  });
  it('ignores dependencies outside the siblings', () => {
    expect(siblingRanks([n('a', 'r', ['elsewhere'])]).get('a')).toBe(0);
  });
});

describe('layout', () => {
  it('places owners above children and upstreams above dependents', () => {
    const l = layout('r', [n('r', null), n('vpc', 'r'), n('route', 'r', ['vpc']), n('sub', 'vpc')]);
    const y = (id: string) => l.nodes.get(id)!.y;
    expect(y('r')).toBeLessThan(y('vpc'));
    expect(y('vpc')).toBeLessThan(y('route'));
    expect(y('vpc')).toBeLessThan(y('sub'));
    expect(l.edges).toEqual(
      expect.arrayContaining([
        { from: 'r', to: 'vpc', kind: 'own', drawn: true },
        { from: 'r', to: 'route', kind: 'own', drawn: false },
        { from: 'vpc', to: 'route', kind: 'dep', drawn: true },
        { from: 'vpc', to: 'sub', kind: 'own', drawn: true },
      ]),
    );
  });

  it('hangs nodes whose owner is not loaded off the root', () => {
    const l = layout('r', [n('r', null), n('x', 'unknown')]);
    expect(l.nodes.get('x')!.layer).toBe(1);
  });

  it('draws a block (an expanded aggregate) as a grid under its upstreams, never overlapping', () => {
    const nodes = [n('r', null), n('vpc', 'r'), ...Array.from({ length: 100 }, (_, i) => n(`c${i}`, 'r', ['vpc']))];
    const l = layout('r', nodes, { ...defaultLayout, maxPerRow: 30 }, new Map([['agg:c', nodes.slice(2).map((x) => x.id)]]));
    const seen = new Set<string>();
    for (const p of l.nodes.values()) {
      const k = `${p.x},${p.y}`;
      expect(seen.has(k)).toBe(false);
      seen.add(k);
    }
    const ys = new Set(nodes.slice(2).map((x) => l.nodes.get(x.id)!.y));
    const xs = new Set(nodes.slice(2).map((x) => l.nodes.get(x.id)!.x));
    expect(xs.size).toBe(20); // ceil(sqrt(400)) columns: a screen-shaped grid
    expect(ys.size).toBe(5);
    expect(Math.min(...ys)).toBeGreaterThan(l.nodes.get('vpc')!.y);
    expect(new Set(nodes.slice(2).map((x) => l.nodes.get(x.id)!.layer))).toEqual(new Set([2]));
    const b = l.blocks.get('agg:c')!;
    expect(b.members).toHaveLength(100);
    for (const m of b.members) {
      const p = l.nodes.get(m)!;
      expect(p.x >= b.x && p.x + defaultLayout.nodeW <= b.x + b.width && p.y >= b.y && p.y + defaultLayout.nodeH <= b.y + b.height).toBe(true);
    }
  });

  it('tiers by dependency depth: a leaf sits one tier below its owner, not on the bottom tier', () => {
    const l = layout('r', [n('r', null), n('acct', 'r'), n('vpc', 'r', ['acct']), n('route', 'r', ['vpc']), n('lone', 'r')]);
    const layer = (id: string) => l.nodes.get(id)!.layer;
    expect([layer('r'), layer('acct'), layer('vpc'), layer('route'), layer('lone')]).toEqual([0, 1, 2, 3, 1]);
  });

  it('lays out a fully expanded 1,001-node bom quickly', () => {
    const nodes: GraphInput[] = [n('bom', null)];
    const blocks = new Map<string, string[]>([['a', []], ['v', []], ['r', []]]);
    for (let t = 0; t < 250; t++) {
      nodes.push(n(`a${t}`, 'bom'), n(`v${t}`, 'bom', [`a${t}`]), n(`r${t}a`, 'bom', [`v${t}`]), n(`r${t}b`, 'bom', [`v${t}`]));
      blocks.get('a')!.push(`a${t}`);
      blocks.get('v')!.push(`v${t}`);
      blocks.get('r')!.push(`r${t}a`, `r${t}b`);
    }
    expect(nodes).toHaveLength(1001);
    const t0 = performance.now();
    const l = layout('bom', nodes, defaultLayout, blocks);
    const ms = performance.now() - t0;
    expect(l.nodes.size).toBe(1001);
    expect(new Set([...l.nodes.values()].map((p) => p.layer))).toEqual(new Set([0, 1, 2, 3]));
    // dagre sees four nodes; a bound that only catches a regression on a loaded CI machine.
    expect(ms).toBeLessThan(1000);
  });
});

describe('failurePaths', () => {
  it('highlights the ownership chain to each failure and the dependents it holds up', () => {
    const nodes = [n('r', null), n('net', 'r'), n('vpc', 'net'), n('route', 'net', ['vpc']), n('app', 'r', ['route']), n('ok', 'r')];
    const h = failurePaths(nodes, (id) => (id === 'vpc' ? 'FAILED' : 'READY'));
    expect(h.failed).toEqual(['vpc']);
    expect([...h.nodes].sort()).toEqual(['app', 'net', 'r', 'route', 'vpc']);
    expect([...h.edges].sort()).toEqual(['net>vpc', 'r>net', 'route>app', 'vpc>route']);
  });
  it('is empty when nothing failed', () => {
    const h = failurePaths([n('r', null), n('a', 'r')], () => 'DEGRADED');
    expect(h.nodes.size).toBe(0);
  });
});
