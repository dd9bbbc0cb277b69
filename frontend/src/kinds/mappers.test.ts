import { describe, expect, it } from 'vitest';
import { policyDraft, policyInput, reactionRole } from './mappers';

const current = { maxInflight: 10, taskDeadlineSecs: 0, resyncIntervalSecs: 60, resyncRecomposes: false, orphanGraceSecs: 0, updatedAt: '' };

describe('policyInput', () => {
  it('sends only the fields that changed', () => {
    const d = { ...policyDraft(current), maxInflight: '25', resyncRecomposes: true };
    expect(policyInput(d, current)).toEqual({ input: { maxInflight: 25, resyncRecomposes: true }, errors: {} });
  });
  it.each([
    { reason: 'negative', v: '-1' },
    { reason: 'fraction', v: '1.5' },
    { reason: 'blank', v: ' ' },
    { reason: 'text', v: 'ten' },
  ])('rejects $reason numbers at the field', ({ v }) => {
    const r = policyInput({ ...policyDraft(current), taskDeadlineSecs: v }, current);
    expect(r.errors.taskDeadlineSecs).toBe('a whole number, 0 or more');
    expect(r.input).toEqual({});
  });
});

describe('reactionRole', () => {
  it.each([
    { reason: 'composer', r: { trigger: 'SPEC_CHANGE', emits: ['CHILDREN', 'STATUS'] }, want: 'composer' },
    { reason: 'worker', r: { trigger: 'SPEC_CHANGE', emits: ['STATUS'] }, want: 'worker' },
    { reason: 'rollup', r: { trigger: 'CHILDREN_SETTLED', emits: ['STATUS'] }, want: 'status rollup' },
    { reason: 'verb', r: { trigger: 'OPERATION', emits: ['OPERATION_OUTPUT'], verb: 'ping' }, want: 'operator verb ping' },
  ] as const)('$reason', ({ r, want }) => {
    expect(reactionRole({ name: 'x', verb: null, finalizer: null, ...r, emits: [...r.emits] })).toBe(want);
  });
});
