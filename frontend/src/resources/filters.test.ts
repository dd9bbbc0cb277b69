import { describe, expect, it } from 'vitest';
import { emptyList, listSearch, nextPage, pageNumber, parseLabelSelector, parseListState, parseRef, prevPage, queryVariables, togglePhase, withFilters } from './filters';

describe('list state in the URL', () => {
  it('round-trips every field through the query string', () => {
    const s = { kind: 'vpc', phases: ['FAILED', 'READY'] as const, labels: 'team=a', owner: 'abc', size: 100, cursors: ['c1', 'c2'], sel: { kind: 'vpc', name: 'a/b' } };
    const q = listSearch({ ...s, phases: [...s.phases] });
    // Phases are canonical (schema order), so links are stable.
    expect(q.toString()).toBe('kind=vpc&phase=READY&phase=FAILED&labels=team%3Da&owner=abc&size=100&cursors=c1.c2&sel=vpc%2Fa%2Fb');
    expect(parseListState(q)).toEqual({ ...s, phases: ['READY', 'FAILED'] });
  });

  it('drops unknown phases, sizes and malformed cursors', () => {
    const s = parseListState(new URLSearchParams('phase=NOPE&phase=READY&phase=READY&size=7&cursors=ok.%25bad'));
    expect(s.phases).toEqual(['READY']);
    expect(s.size).toBe(50);
    expect(s.cursors).toEqual(['ok']);
  });

  it('omits defaults', () => {
    expect(listSearch(emptyList).toString()).toBe('');
  });

  it('parses kind/name references whose names hold slashes', () => {
    expect(parseRef('vpc/team/a')).toEqual({ kind: 'vpc', name: 'team/a' });
    expect(parseRef('vpc')).toBeNull();
    expect(parseRef('/x')).toBeNull();
    expect(parseRef('x/')).toBeNull();
  });
});

describe('filters and pages', () => {
  it('phase chips union and reset the page', () => {
    let s = nextPage(emptyList, 'c1');
    s = togglePhase(s, 'FAILED');
    expect(s.cursors).toEqual([]);
    s = togglePhase(s, 'READY');
    expect(s.phases).toEqual(['READY', 'FAILED']);
    s = togglePhase(s, 'FAILED');
    expect(s.phases).toEqual(['READY']);
  });

  it('keeps a cursor stack for Prev and counts pages', () => {
    let s = nextPage(emptyList, 'c1');
    s = nextPage(s, 'c2');
    expect(pageNumber(s)).toBe(3);
    expect(queryVariables(s)?.after).toBe('c2');
    s = prevPage(s);
    expect(pageNumber(s)).toBe(2);
    expect(queryVariables(s)?.after).toBe('c1');
    s = prevPage(prevPage(s));
    expect(pageNumber(s)).toBe(1);
    expect(queryVariables(s)?.after).toBeNull();
  });

  it('any filter change goes back to page 1', () => {
    const s = withFilters(nextPage(emptyList, 'c1'), { kind: 'vpc' });
    expect(s.cursors).toEqual([]);
  });

  it('builds server-side variables; blank filters are null', () => {
    expect(queryVariables(emptyList)).toEqual({ kind: null, phases: null, labels: null, ownerId: null, first: 50, after: null });
    expect(queryVariables({ ...emptyList, kind: 'vpc', phases: ['FAILED'], labels: 'a=1, b=2', owner: 'o' })).toEqual({
      kind: 'vpc',
      phases: ['FAILED'],
      labels: { a: '1', b: '2' },
      ownerId: 'o',
      first: 50,
      after: null,
    });
    expect(queryVariables({ ...emptyList, labels: 'nope' })).toBeNull();
  });
});

describe('label selectors', () => {
  it.each([
    { reason: 'blank is no selector', text: '  ', want: { ok: true, labels: null } },
    { reason: 'pairs, trimmed', text: ' team = a , env=prod ', want: { ok: true, labels: { team: 'a', env: 'prod' } } },
    { reason: 'empty value allowed', text: 'flag=', want: { ok: true, labels: { flag: '' } } },
    { reason: 'values may hold =', text: 'q=a=b', want: { ok: true, labels: { q: 'a=b' } } },
    { reason: 'missing =', text: 'team', want: { ok: false, error: '"team" is not key=value' } },
    { reason: 'empty key', text: '=a', want: { ok: false, error: '"=a" is not key=value' } },
    { reason: 'conflicting repeats', text: 'a=1,a=2', want: { ok: false, error: 'label a is given twice' } },
  ])('$reason', ({ text, want }) => {
    expect(parseLabelSelector(text)).toEqual(want);
  });
});
