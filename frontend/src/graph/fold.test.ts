import { describe, expect, it } from 'vitest';
import { fold, isAggregate, recolour } from './fold';
import type { GNode } from './load';

const n = (id: string, kind: string, owner: string | null, deps: string[] = [], phase: GNode['phase'] = 'READY'): GNode => ({ id, kind, name: id, phase, owner, deps, updatedAt: '2026-01-01T00:00:00Z' });

// A bom of `teams` teams: per team an account, a vpc on it and two routes on the vpc.
function bom(teams: number): Map<string, GNode> {
  const m = new Map<string, GNode>([['bom', n('bom', 'bom', null)]]);
  for (let t = 0; t < teams; t++) {
    m.set(`a${t}`, n(`a${t}`, 'account', 'bom'));
    m.set(`v${t}`, n(`v${t}`, 'vpc', 'bom', [`a${t}`]));
    m.set(`r${t}a`, n(`r${t}a`, 'route', 'bom', [`v${t}`], t === 3 ? 'FAILED' : 'READY'));
    m.set(`r${t}b`, n(`r${t}b`, 'route', 'bom', [`v${t}`]));
  }
  return m;
}

describe('fold', () => {
  it('folds a 1,001-node bom into one aggregate per kind and tier, with phase counts and edges between tiers', () => {
    const f = fold(bom(250), 'bom', new Set());
    expect(f.nodes.size).toBe(4);
    const aggs = [...f.aggregates.values()].map((a) => `${a.kind}:${a.members.length}`).sort();
    expect(aggs).toEqual(['account:250', 'route:500', 'vpc:250']);
    const route = [...f.aggregates.values()].find((a) => a.kind === 'route')!;
    expect(route.counts).toEqual([
      { phase: 'FAILED', count: 1 },
      { phase: 'READY', count: 499 },
    ]);
    const routeNode = f.nodes.get(route.id)!;
    expect(routeNode.phase).toBe('FAILED');
    expect(routeNode.name).toBe('×500');
    const vpc = [...f.aggregates.values()].find((a) => a.kind === 'vpc')!;
    expect(routeNode.deps).toEqual([vpc.id]);
    expect(routeNode.owner).toBe('bom');
    expect(f.shownAs.get('r3a')).toBe(route.id);
  });

  it('keeps small groups as they are, and an expanded aggregate shows its members', () => {
    const small = fold(bom(2), 'bom', new Set());
    expect(small.aggregates.size).toBe(0);
    expect(small.nodes.size).toBe(9);
    const big = fold(bom(20), 'bom', new Set());
    const vpc = [...big.aggregates.values()].find((a) => a.kind === 'vpc')!;
    const open = fold(bom(20), 'bom', new Set([vpc.id]));
    expect(open.aggregates.has(vpc.id)).toBe(false);
    expect(open.nodes.get('v7')!.deps.every(isAggregate)).toBe(true); // its account is still folded
    expect([...open.nodes.values()].filter((x) => x.kind === 'vpc')).toHaveLength(20);
  });

  it('separates siblings of one kind in different tiers (a hub and its spokes)', () => {
    const m = new Map<string, GNode>([['net', n('net', 'net', null)], ['hub', n('hub', 'leaf', 'net')]]);
    for (let i = 0; i < 1000; i++) m.set(`s${i}`, n(`s${i}`, 'leaf', 'net', ['hub']));
    const f = fold(m, 'net', new Set());
    expect(f.nodes.size).toBe(3);
    expect(f.nodes.has('hub')).toBe(true);
    expect([...f.aggregates.values()][0]!.members).toHaveLength(1000);
  });

  it('recolours a folded picture for phase changes without folding again, and refuses a structural change', () => {
    const before = bom(250);
    const f = fold(before, 'bom', new Set());
    const after = new Map(before);
    after.set('r7a', { ...before.get('r7a')!, phase: 'FAILED' });
    after.set('bom', { ...before.get('bom')!, phase: 'DEGRADED' });
    const r = recolour(f, before, after)!;
    expect(r.shownAs).toBe(f.shownAs);
    const route = [...r.aggregates.values()].find((a) => a.kind === 'route')!;
    expect(route.counts).toEqual([
      { phase: 'FAILED', count: 2 },
      { phase: 'READY', count: 498 },
    ]);
    expect(r.nodes.get('bom')!.phase).toBe('DEGRADED');
    expect(r.nodes.get(route.id)!.phase).toBe('FAILED');
    expect(f.nodes.get('bom')!.phase).toBe('READY'); // the previous picture is untouched
    expect(r).toEqual({ ...fold(after, 'bom', new Set()) });
    const moved = new Map(after);
    moved.set('r7b', { ...after.get('r7b')!, deps: ['v8'] });
    expect(recolour(r, after, moved)).toBeNull();
    const grown = new Map(after).set('x', { ...after.get('r7b')!, id: 'x' });
    expect(recolour(r, after, grown)).toBeNull();
  });
});
