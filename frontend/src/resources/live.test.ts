import { describe, expect, it } from 'vitest';
import type { ResourceRowFragment } from '../gql/graphql';
import { applyRowEvent, cursorKey, livePage, matchesFilter, timeKey, type RowFilter } from './live';

function row(id: string, createdAt: string, patch: Partial<ResourceRowFragment> = {}): ResourceRowFragment {
  return { id, kind: 'vpc', version: 'v1', name: `n-${id}`, phase: 'RECONCILING', labels: {}, generation: 1, syncedGeneration: 0, healthOk: true, createdAt, updatedAt: createdAt, owner: null, ...patch };
}

const all: RowFilter = { kind: '', phases: [], labels: null, owner: '' };
const first = { first: true, last: false, maxFresh: 50 };

// A page, newest first.
const page = () => livePage([row('c', '2026-01-01T00:00:03Z'), row('b', '2026-01-01T00:00:02Z'), row('a', '2026-01-01T00:00:01Z')]);

describe('applyRowEvent', () => {
  it('updates a row in place when its phase changes', () => {
    const p = page();
    const r = applyRowEvent(p, { type: 'UPSERTED', id: 'b', previousPhase: 'RECONCILING', resource: row('b', '2026-01-01T00:00:02Z', { phase: 'READY' }) }, all, first);
    expect(r.resync).toBe(false);
    expect(r.page.rows.map((e) => e.row.id)).toEqual(['c', 'b', 'a']);
    expect(r.page.rows[1]!.row.phase).toBe('READY');
    // Other rows keep their identity (memoized rows do not re-render).
    expect(r.page.rows[0]).toBe(p.rows[0]);
  });

  it('ignores an event older than the row it would replace', () => {
    const p = livePage([row('a', '2026-01-01T00:00:01Z', { phase: 'READY', updatedAt: '2026-01-01T00:00:09.5Z' })]);
    const r = applyRowEvent(p, { type: 'UPSERTED', id: 'a', previousPhase: null, resource: row('a', '2026-01-01T00:00:01Z', { phase: 'RECONCILING', updatedAt: '2026-01-01T00:00:09.25Z' }) }, all, first);
    expect(r.page).toBe(p);
  });

  it('marks a row that left the filter as stale instead of dropping it', () => {
    const f: RowFilter = { ...all, phases: ['RECONCILING'] };
    const r = applyRowEvent(page(), { type: 'UPSERTED', id: 'a', previousPhase: 'RECONCILING', resource: row('a', '2026-01-01T00:00:01Z', { phase: 'READY' }) }, f, first);
    expect(r.page.rows[2]).toMatchObject({ stale: true });
  });

  it('marks deleted rows', () => {
    const r = applyRowEvent(page(), { type: 'DELETED', id: 'c', previousPhase: 'READY', resource: null }, all, first);
    expect(r.page.rows[0]).toMatchObject({ gone: true });
  });

  it('asks for a re-query on RESYNC', () => {
    expect(applyRowEvent(page(), { type: 'RESYNC', id: '', previousPhase: null, resource: null }, all, first).resync).toBe(true);
  });

  it('slots a new row in at its keyset position on the first page', () => {
    const r = applyRowEvent(page(), { type: 'UPSERTED', id: 'd', previousPhase: null, resource: row('d', '2026-01-01T00:00:04Z') }, all, first);
    expect(r.page.rows.map((e) => e.row.id)).toEqual(['d', 'c', 'b', 'a']);
    expect(r.page.rows[0]).toMatchObject({ fresh: true });
    expect(r.page.freshCount).toBe(1);
  });

  it('ignores new rows that belong to another page', () => {
    const mid = { first: false, last: false, maxFresh: 50 };
    const newer = applyRowEvent(page(), { type: 'UPSERTED', id: 'd', previousPhase: null, resource: row('d', '2026-01-01T00:00:04Z') }, all, mid);
    expect(newer.page.rows).toHaveLength(3);
    const older = applyRowEvent(page(), { type: 'UPSERTED', id: 'z', previousPhase: null, resource: row('z', '2026-01-01T00:00:00Z') }, all, mid);
    expect(older.page.rows).toHaveLength(3);
    // …but on the last page, older rows belong here.
    const last = applyRowEvent(page(), { type: 'UPSERTED', id: 'z', previousPhase: null, resource: row('z', '2026-01-01T00:00:00Z') }, all, { ...mid, last: true });
    expect(last.page.rows.map((e) => e.row.id)).toEqual(['c', 'b', 'a', 'z']);
  });

  it('slots in a row between the cursor of a later page and its first row', () => {
    // Filter: FAILED. Page 1 ended with a row created at 10:00:06 (the cursor
    // of page 2); page 2 holds rows created at 10:00:04 … 10:00:02.
    const f: RowFilter = { ...all, phases: ['FAILED'] };
    const failed = (id: string, at: string) => row(id, at, { phase: 'FAILED', updatedAt: '2026-01-02T00:00:00Z' });
    const page2 = livePage([failed('a', '2026-01-01T10:00:04Z'), failed('b', '2026-01-01T10:00:03Z'), failed('c', '2026-01-01T10:00:02Z')]);
    const afterKey = cursorKey('awAGR1CoQDWA_____________________g'); // 10:00:06, id ffffffff-…-fffffffffffe
    // A resource created at 10:00:05 fails: it now sorts after the cursor and
    // before 10:00:04, on page 2.
    const ev = { type: 'UPSERTED' as const, id: 'x', previousPhase: 'READY' as const, resource: failed('x', '2026-01-01T10:00:05Z') };
    expect(applyRowEvent(page2, ev, f, { first: false, last: false, maxFresh: 50, afterKey }).page.rows.map((e) => e.row.id)).toEqual(['x', 'a', 'b', 'c']);
    // One created at 10:00:07 belongs before the cursor, on page 1.
    const newer = { ...ev, id: 'y', resource: failed('y', '2026-01-01T10:00:07Z') };
    expect(applyRowEvent(page2, newer, f, { first: false, last: false, maxFresh: 50, afterKey }).page.rows).toHaveLength(3);
    // And page 1 (whose last row is the cursor, 10:00:06) does not take it either.
    const page1 = livePage([failed('p', '2026-01-01T10:00:08Z'), failed('q', '2026-01-01T10:00:06Z')]);
    expect(applyRowEvent(page1, ev, f, first).page.rows.map((e) => e.row.id)).toEqual(['p', 'q']);
  });

  it('ignores new rows that do not match the filters', () => {
    const r = applyRowEvent(page(), { type: 'UPSERTED', id: 'd', previousPhase: null, resource: row('d', '2026-01-01T00:00:04Z', { kind: 'tgw' }) }, { ...all, kind: 'vpc' }, first);
    expect(r.page.rows).toHaveLength(3);
  });

  it('overflows instead of growing past maxFresh', () => {
    let p = page();
    for (let i = 0; i < 3; i++) {
      p = applyRowEvent(p, { type: 'UPSERTED', id: `n${i}`, previousPhase: null, resource: row(`n${i}`, `2026-01-01T00:01:0${i}Z`) }, all, { ...first, maxFresh: 2 }).page;
    }
    expect(p.rows).toHaveLength(5);
    expect(p.overflow).toBe(true);
  });
});

describe('matchesFilter', () => {
  it.each([
    { reason: 'no filter', f: all, want: true },
    { reason: 'kind', f: { ...all, kind: 'tgw' }, want: false },
    { reason: 'phase union', f: { ...all, phases: ['READY', 'RECONCILING'] as const }, want: true },
    { reason: 'phase miss', f: { ...all, phases: ['FAILED'] as const }, want: false },
    { reason: 'labels contained', f: { ...all, labels: { team: 'a' } }, want: true },
    { reason: 'labels missing', f: { ...all, labels: { team: 'b' } }, want: false },
    { reason: 'owner', f: { ...all, owner: 'p' }, want: true },
    { reason: 'owner miss', f: { ...all, owner: 'q' }, want: false },
  ])('$reason', ({ f, want }) => {
    const r = row('x', '2026-01-01T00:00:00Z', { labels: { team: 'a', env: 'prod' }, owner: { id: 'p', kind: 'net', name: 'n' } });
    expect(matchesFilter(r, { ...f, phases: [...f.phases] })).toBe(want);
  });
});

describe('timeKey', () => {
  it('orders instants whose fractions have different lengths', () => {
    const a = '2026-01-01T00:00:05.1Z';
    const b = '2026-01-01T00:00:05.12Z';
    const c = '2026-01-01T00:00:05Z';
    expect(a < b).toBe(false); // the raw strings sort wrongly
    expect(timeKey(a) < timeKey(b)).toBe(true);
    expect(timeKey(c) < timeKey(a)).toBe(true);
  });
});

describe('cursorKey', () => {
  it('decodes a resources cursor into the keyset position of its row', () => {
    // Cursors as core/store encodes them (encodeKeyset).
    expect(cursorKey('awAGR1CoQhfAAZbwons8fe-BI0VniavN7w')).toBe(`${timeKey('2026-01-01T10:00:06.123456Z')}|0196f0a2-7b3c-7def-8123-456789abcdef`);
    expect(cursorKey('awAGR1CoQDWA_____________________g')).toBe(`${timeKey('2026-01-01T10:00:06Z')}|ffffffff-ffff-ffff-ffff-fffffffffffe`);
  });

  it('returns null for anything else', () => {
    expect(cursorKey('ZQAAAAAAAAAq')).toBeNull(); // an event cursor (tag 'e')
    expect(cursorKey('not a cursor!')).toBeNull();
    expect(cursorKey('')).toBeNull();
  });
});
