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
        { from: 'r', to: 'vpc', kind: 'own' },
        { from: 'vpc', to: 'route', kind: 'dep' },
        { from: 'vpc', to: 'sub', kind: 'own' },
      ]),
    );
  });

  it('hangs nodes whose owner is not loaded off the root', () => {
    const l = layout('r', [n('r', null), n('x', 'unknown')]);
    expect(l.nodes.get('x')!.layer).toBe(1);
  });

  it('wraps wide layers into rows and never overlaps nodes', () => {
    const nodes = [n('r', null), ...Array.from({ length: 100 }, (_, i) => n(`c${i}`, 'r'))];
    const l = layout('r', nodes, { ...defaultLayout, maxPerRow: 30 });
    expect(l.rows.map((r) => r.length)).toEqual([1, 30, 30, 30, 10]);
    const seen = new Set<string>();
    for (const p of l.nodes.values()) {
      const k = `${p.x},${p.y}`;
      expect(seen.has(k)).toBe(false);
      seen.add(k);
    }
    expect(l.width).toBe(30 * (defaultLayout.nodeW + defaultLayout.gapX) - defaultLayout.gapX);
  });

  it('lays out 1,000 nodes with edges quickly', () => {
    const nodes: GraphInput[] = [n('r', null)];
    for (let i = 0; i < 10; i++) {
      nodes.push(n(`team${i}`, 'r'));
      for (let j = 0; j < 99; j++) nodes.push(n(`t${i}-${j}`, `team${i}`, j > 0 ? [`t${i}-${j - 1}`.replace(/-\d+$/, '-0')] : []));
    }
    expect(nodes).toHaveLength(1001);
    const t0 = performance.now();
    const l = layout('r', nodes);
    const ms = performance.now() - t0;
    expect(l.nodes.size).toBe(1001);
    // Typically ~20 ms; the bound only catches a quadratic regression on a loaded CI machine.
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
