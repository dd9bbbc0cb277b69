import { describe, expect, it } from 'vitest';
import { activity, addSample, failingMost, MAX_SAMPLES, toSample } from './history';

const s = (t: number, ready: number, reconciling = 0, failed = 0) =>
  toSample(t, [
    { phase: 'READY', count: ready },
    { phase: 'RECONCILING', count: reconciling },
    { phase: 'FAILED', count: failed },
  ]);

describe('history', () => {
  it('keeps a sample per change, dropping repeats and the oldest past the cap', () => {
    let h = addSample([], s(0, 1));
    h = addSample(h, s(1, 1));
    expect(h).toHaveLength(1);
    for (let i = 0; i < MAX_SAMPLES + 10; i++) h = addSample(h, s(i + 2, i + 2));
    expect(h).toHaveLength(MAX_SAMPLES);
    expect(h[h.length - 1]!.counts.READY).toBe(MAX_SAMPLES + 11);
    expect(h[0]!.counts.DELETING).toBe(0);
  });

  it('buckets the rises by minute', () => {
    const a = activity([s(0, 0, 10), s(30, 4, 6), s(59, 9, 0, 1), s(61, 9, 5, 1), s(125, 14, 0, 1)]);
    expect(a.minutes).toEqual([0, 60, 120]);
    expect(a.ready).toEqual([9, 0, 5]);
    expect(a.failed).toEqual([1, 0, 0]);
    expect(a.started).toEqual([0, 5, 0]);
  });

  it('ranks the kinds failing most: failed first, then degraded', () => {
    const ks = failingMost([
      { kind: 'vpc', phase: 'READY', count: 10 },
      { kind: 'vpc', phase: 'DEGRADED', count: 3 },
      { kind: 'route', phase: 'FAILED', count: 2 },
      { kind: 'account', phase: 'FAILED', count: 2 },
      { kind: 'account', phase: 'DEGRADED', count: 1 },
      { kind: 'ok', phase: 'READY', count: 5 },
    ]);
    expect(ks.map((k) => k.kind)).toEqual(['account', 'route', 'vpc']);
    expect(ks[2]).toEqual({ kind: 'vpc', failed: 0, degraded: 3, total: 13 });
  });
});

describe('the server history', () => {
  it('comes before the page samples, without duplicates', async () => {
    const { mergeSamples } = await import('./history');
    const s = (t: number) => toSample(t, [{ phase: 'READY', count: t }]);
    expect(mergeSamples([s(1), s(2)], [s(2), s(3)]).map((x) => x.t)).toEqual([1, 2, 3]);
    expect(mergeSamples([], [s(3)]).map((x) => x.t)).toEqual([3]);
  });
  it('charts the busiest kinds of the queue, pending and in flight', async () => {
    const { queueSeries } = await import('./history');
    const q = queueSeries([
      { t: 1, kinds: [{ kind: 'route', pending: 40, leased: 8 }] },
      { t: 2, kinds: [{ kind: 'vpc', pending: 2, leased: 1 }, { kind: 'route', pending: 10, leased: 8 }] },
      { t: 3, kinds: [] },
    ]);
    expect(q.t).toEqual([1, 2, 3]);
    expect(q.kinds).toEqual([
      { kind: 'route', pending: [40, 10, 0], leased: [8, 8, 0] },
      { kind: 'vpc', pending: [0, 2, 0], leased: [0, 1, 0] },
    ]);
  });
});
