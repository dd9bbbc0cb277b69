import { describe, expect, it } from 'vitest';
import { MAX_GAP_PAGES, readGap } from './eventHistory';

const at = '2026-01-01T00:00:00Z';
const ev = (id: number) => ({ id: String(id), type: 'NORMAL', reason: 'R', message: `event-${id}`, actor: 'x', createdAt: at });
// Newest first, 50 a page; the cursor is the id of the last event read (the next page starts below it).
const client = (reads: string[] = []) => ({
  request: (async (_doc: unknown, v: { after: string }) => {
    reads.push(v.after);
    const top = Number(v.after) - 1;
    const items = [];
    for (let i = top; i > Math.max(0, top - 50); i--) items.push(ev(i));
    return { resource: { id: 'r1', history: { items, nextCursor: top - 50 > 0 ? String(top - 49) : null } } };
  }) as never,
});
const target = { kind: 'vpc', name: 'a' };

describe('readGap', () => {
  it('stops at the first event already shown', async () => {
    const known = new Set(['50', '49']);
    const gap = await readGap(client(), target, '61', known);
    expect(gap?.map((e) => Number(e.id))).toEqual([60, 59, 58, 57, 56, 55, 54, 53, 52, 51]);
  });
  it('reads on across pages and to the end of the history', async () => {
    const reads: string[] = [];
    const gap = await readGap(client(reads), target, '101', new Set());
    expect(gap?.length).toBe(100);
    expect(reads).toEqual(['101', '51']);
  });
  it('gives up past MAX_GAP_PAGES pages', async () => {
    const reads: string[] = [];
    expect(await readGap(client(reads), target, '10001', new Set(['1']))).toBeNull();
    expect(reads.length).toBe(MAX_GAP_PAGES);
  });
});
