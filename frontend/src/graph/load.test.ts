import { describe, expect, it } from 'vitest';
import type { TypedDocument } from '../gql/typed';
import type { GraphNodeFragment } from '../gql/graphql';
import { applyGraphEvent, cloneTree, loadMore, loadSubtree, mergeLoaded, type Subtree } from './load';

const node = (id: string, kind: string, owner: string | null, deps: string[] = [], phase: GraphNodeFragment['phase'] = 'READY'): GraphNodeFragment => ({
  id,
  kind,
  name: `n-${id}`,
  phase,
  owner: owner ? { id: owner } : null,
  dependencies: deps.map((d) => ({ upstream: { id: d } })),
  updatedAt: '2026-01-01T00:00:01Z',
});

// A fake API: net composes hubs and spokes; hub composes leaves.
function fakeApi(children: Record<string, GraphNodeFragment[]>, pageSize = 2) {
  const calls: string[] = [];
  return {
    calls,
    request: async (doc: TypedDocument<unknown, unknown>, vars: unknown) => {
      const v = vars as { ownerId?: string; first?: number; after?: string | null };
      calls.push(`${doc.operationName}:${v.ownerId ?? ''}:${v.after ?? ''}`);
      if (doc.operationName === 'GraphRoot') {
        return { resource: node('root', 'net', null), kinds: [{ name: 'net', reactions: [{ emits: ['CHILDREN'] }] }, { name: 'hub', reactions: [{ emits: ['CHILDREN', 'STATUS'] }] }, { name: 'leaf', reactions: [{ emits: ['STATUS'] }] }] };
      }
      const all = children[v.ownerId!] ?? [];
      const start = v.after ? Number(v.after) : 0;
      const n = Math.min(pageSize, v.first ?? pageSize);
      const items = all.slice(start, start + n);
      return { resources: { items, nextCursor: start + n < all.length ? String(start + n) : null } };
    },
  };
}

describe('loadSubtree', () => {
  const kids = {
    root: [node('h1', 'hub', 'root'), node('l1', 'leaf', 'root', ['h1']), node('l2', 'leaf', 'root')],
    h1: [node('x1', 'leaf', 'h1'), node('x2', 'leaf', 'h1')],
  };
  it('walks composites breadth first, page by page, and skips leaves', async () => {
    const api = fakeApi(kids);
    const watched: string[] = [];
    const t = (await loadSubtree(api as never, { kind: 'net', name: 'n-root' }, undefined, undefined, (id) => {
      watched.push(id);
      api.calls.push(`watch:${id}`);
    }))!;
    expect([...t.nodes.keys()].sort()).toEqual(['h1', 'l1', 'l2', 'root', 'x1', 'x2']);
    expect(t.nodes.get('l1')!.deps).toEqual(['h1']);
    expect(t.more.size).toBe(0);
    // No child queries for leaf nodes.
    // Each owner is watched before its children are read.
    expect(api.calls).toEqual(['GraphRoot::', 'watch:root', 'GraphChildren:root:', 'GraphChildren:root:2', 'watch:h1', 'GraphChildren:h1:']);
    expect(watched).toEqual(['root', 'h1']);
  });
  it('hands the root to onRoot before anything is watched (a top-level root is followed by one rootId subscription)', async () => {
    const api = fakeApi(kids);
    const seen: string[] = [];
    await loadSubtree(api as never, { kind: 'net', name: 'n-root' }, undefined, undefined, (id) => seen.push(`watch:${id}`), (r) => seen.push(`root:${r.id}:${r.owner ?? 'top'}`));
    expect(seen.slice(0, 2)).toEqual(['root:root:top', 'watch:root']);
  });
  it('stops at the budget and remembers where to go on', async () => {
    const api = fakeApi(kids);
    const t = (await loadSubtree(api as never, { kind: 'net', name: 'n-root' }, 3))!;
    expect(t.nodes.size).toBe(3);
    expect(t.more.get('root')).toBe('2');
  });
});

describe('applyGraphEvent', () => {
  const tree = (): Subtree => ({
    rootId: 'r',
    composites: new Set(['net']),
    more: new Map(),
    nodes: new Map([
      ['r', { id: 'r', kind: 'net', name: 'r', phase: 'RECONCILING', owner: null, deps: [], updatedAt: '2026-01-01T00:00:00Z' }],
      ['a', { id: 'a', kind: 'leaf', name: 'a', phase: 'RECONCILING', owner: 'r', deps: [], updatedAt: '2026-01-01T00:00:00Z' }],
    ]),
  });
  it('recolours on a phase change without a re-layout', () => {
    const r = applyGraphEvent(tree(), { type: 'UPSERTED', id: 'a', resource: node('a', 'leaf', 'r', [], 'READY') });
    expect(r).toMatchObject({ changed: true, structural: false });
    expect(r.tree.nodes.get('a')!.phase).toBe('READY');
  });
  it('adds a new child of a loaded node (re-layout)', () => {
    const r = applyGraphEvent(tree(), { type: 'UPSERTED', id: 'b', resource: node('b', 'leaf', 'r', ['a']) });
    expect(r.structural).toBe(true);
    expect(r.tree.nodes.has('b')).toBe(true);
  });
  it('ignores strangers and removes deleted nodes', () => {
    expect(applyGraphEvent(tree(), { type: 'UPSERTED', id: 'z', resource: node('z', 'leaf', 'elsewhere') }).changed).toBe(false);
    const d = applyGraphEvent(tree(), { type: 'DELETED', id: 'a', resource: null });
    expect(d.tree.nodes.has('a')).toBe(false);
    expect(applyGraphEvent(tree(), { type: 'RESYNC', id: '', resource: null }).resync).toBe(true);
  });
  it('ignores an event older than the node', () => {
    const stale = { ...node('a', 'leaf', 'r', [], 'READY'), updatedAt: '2025-12-31T23:59:59Z' };
    expect(applyGraphEvent(tree(), { type: 'UPSERTED', id: 'a', resource: stale }).changed).toBe(false);
  });
  it('marks a new composite child to be watched and read', () => {
    const r = applyGraphEvent(tree(), { type: 'UPSERTED', id: 'n2', resource: node('n2', 'net', 'r') });
    expect(r.tree.more.get('n2')).toBe('');
  });
  it('respects the budget', () => {
    expect(applyGraphEvent(tree(), { type: 'UPSERTED', id: 'b', resource: node('b', 'leaf', 'r') }, 2).changed).toBe(false);
  });
});

describe('mergeLoaded', () => {
  it('folds a read made on a copy into a tree that changed meanwhile', async () => {
    const api = fakeApi({ root: [node('h1', 'hub', 'root'), node('l1', 'leaf', 'root')], h1: [node('x1', 'leaf', 'h1')] });
    const t = (await loadSubtree(api as never, { kind: 'net', name: 'n-root' }, 2))!;
    expect(t.more.get('root')).toBe('1');
    const copy = cloneTree(t);
    const started = new Set(copy.more.keys());
    await loadMore(api as never, copy, 10);
    // Meanwhile the shown tree recoloured h1.
    const cur = applyGraphEvent(t, { type: 'UPSERTED', id: 'h1', resource: { ...node('h1', 'hub', 'root', [], 'FAILED'), updatedAt: '2026-01-01T00:00:02Z' } }).tree;
    const m = mergeLoaded(cur, copy, started);
    expect([...m.nodes.keys()].sort()).toEqual(['h1', 'l1', 'root', 'x1']);
    expect(m.nodes.get('h1')!.phase).toBe('FAILED');
    expect(m.more.size).toBe(0);
  });
});
