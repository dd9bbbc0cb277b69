import { describe, expect, it } from 'vitest';
import { age, countsInOrder, failureOf, generationState, isComposite, labelEntries, verbsOf } from './mappers';

describe('countsInOrder', () => {
  it('shows served counts in schema order and never invents missing ones', () => {
    const out = countsInOrder([
      { phase: 'FAILED', count: 2 },
      { phase: 'READY', count: 10 },
    ]);
    expect(out.map((c) => c.phase)).toEqual(['READY', 'RECONCILING', 'DEGRADED', 'FAILED', 'DELETING', 'ORPHANED', 'QUARANTINED']);
    expect(out[0]).toEqual({ phase: 'READY', count: 10 });
    expect(out[1]).toEqual({ phase: 'RECONCILING', count: null });
    expect(out[3]).toEqual({ phase: 'FAILED', count: 2 });
  });
});

describe('generationState', () => {
  it.each([
    { reason: 'caught up', g: 3, s: 3, behind: false },
    { reason: 'spec change in flight', g: 4, s: 3, behind: true },
  ])('$reason', ({ g, s, behind }) => {
    expect(generationState({ generation: g, syncedGeneration: s })).toEqual({ generation: g, synced: s, behind });
  });
});

describe('failureOf', () => {
  const cond = (type: string, status: 'TRUE' | 'FALSE', reason: string) => ({ type, status, reason, message: `${reason} msg`, lastTransitionTime: '', observedGeneration: 1, synthesized: false });
  it('is null unless the served phase is FAILED', () => {
    expect(failureOf({ phase: 'DEGRADED', failureTerminal: false, conditions: [cond('Ready', 'FALSE', 'X')] })).toBeNull();
  });
  it('reports terminal vs retrying with the Synced=False reason first', () => {
    expect(failureOf({ phase: 'FAILED', failureTerminal: true, conditions: [cond('Ready', 'FALSE', 'R'), cond('Synced', 'FALSE', 'S')] })).toEqual({ terminal: true, reason: 'S', message: 'S msg' });
    expect(failureOf({ phase: 'FAILED', failureTerminal: false, conditions: [] })).toEqual({ terminal: false, reason: null, message: null });
  });
});

describe('kind facts', () => {
  const def = { name: 'k', version: 'v1', specSchema: null, reactions: [
    { name: 'compose', trigger: 'SPEC_CHANGE' as const, verb: null, emits: ['CHILDREN' as const, 'STATUS' as const] },
    { name: 'ping', trigger: 'OPERATION' as const, verb: 'ping', emits: ['OPERATION_OUTPUT' as const] },
  ] };
  it('finds verbs and composites', () => {
    expect(verbsOf({ definition: def })).toEqual(['ping']);
    expect(isComposite({ definition: def })).toBe(true);
    expect(isComposite({ definition: null })).toBe(false);
  });
});

describe('display helpers', () => {
  it('sorts labels and stringifies non-strings', () => {
    expect(labelEntries({ b: '2', a: 1 })).toEqual([
      ['a', '1'],
      ['b', '2'],
    ]);
    expect(labelEntries(null)).toEqual([]);
  });
  it.each([
    { reason: 'seconds', ms: 5_000, want: '5s' },
    { reason: 'minutes', ms: 125_000, want: '2m 5s' },
    { reason: 'hours', ms: 3_660_000, want: '1h 1m' },
    { reason: 'days', ms: 3 * 86_400_000, want: '3d' },
    { reason: 'future clamps to 0', ms: -5_000, want: '0s' },
  ])('age: $reason', ({ ms, want }) => {
    const now = Date.parse('2026-01-10T00:00:00Z');
    expect(age(new Date(now - ms).toISOString(), now)).toBe(want);
  });
});
