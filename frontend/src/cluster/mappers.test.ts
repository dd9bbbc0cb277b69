import { describe, expect, it } from 'vitest';
import { kindsText, memberName, roleText, shardsText, statusText } from './mappers';

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
