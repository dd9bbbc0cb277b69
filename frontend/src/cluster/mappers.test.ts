import { describe, expect, it } from 'vitest';
import { canDrain, canKill, kindsText, memberName, roleText, shardMap, shardsText, statusTag, statusText } from './mappers';

describe('cluster mappers', () => {
  it.each([
    { reason: 'the full range (hi is exclusive)', lo: 0, hi: 256, want: '0-255' },
    { reason: 'one shard', lo: 7, hi: 8, want: '7' },
    { reason: 'an empty range', lo: 5, hi: 5, want: '—' },
    { reason: 'no shards', lo: null, hi: null, want: '—' },
  ])('shards: $reason', ({ lo, hi, want }) => {
    expect(shardsText({ shardLo: lo, shardHi: hi })).toBe(want);
  });
  it('renders status as served, kubectl style', () => {
    expect(statusText('READY')).toBe('Ready');
    expect(statusText('NOT_READY')).toBe('NotReady');
    expect(roleText('BROKER')).toBe('broker');
  });
  it('renders kinds and names', () => {
    expect(kindsText([])).toBe('<all>');
    expect(kindsText(['vpc', 'tgw'])).toBe('vpc, tgw');
    expect(memberName({ host: 'pod-a', pid: 7 })).toBe('pod-a:7');
  });
});

describe('member control', () => {
  it('renders the drain and kill statuses', () => {
    expect(statusText('DRAINING')).toBe('Draining');
    expect(statusText('KILLED')).toBe('Killed');
    expect(statusTag('DRAINING')).toBe('warn');
    expect(statusTag('READY')).toBe('ok');
  });
  it('offers drain to a running member and kill unless killed', () => {
    expect(canDrain('READY')).toBe(true);
    expect(canDrain('DRAINING')).toBe(false);
    expect(canKill('DRAINING')).toBe(true);
    expect(canKill('KILLED')).toBe(false);
  });
  it('tiles each role in shard order', () => {
    const m = (id: string, role: 'BROKER' | 'CONTROL', lo: number | null, hi: number | null) =>
      ({ id, role, host: 'h', pid: Number(id.slice(1)), shardLo: lo, shardHi: hi }) as never;
    const map = shardMap([m('b2', 'BROKER', 128, 256), m('b1', 'BROKER', 0, 128), m('b3', 'BROKER', null, null), m('c1', 'CONTROL', 0, 256)]);
    expect(map.get('BROKER')?.map((s) => s.id)).toEqual(['b1', 'b2']);
    expect(map.get('CONTROL')?.[0]?.hi).toBe(256);
  });
});
