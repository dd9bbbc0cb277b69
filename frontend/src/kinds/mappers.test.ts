import { describe, expect, it } from 'vitest';
import { breakingChange, policyDraft, policyInput, reactionRole, rebaseDraft } from './mappers';

const current = { maxInflight: 10, taskDeadlineSecs: 0, resyncIntervalSecs: 60, resyncRecomposes: false, orphanGraceSecs: 0, maxTransientAttempts: 20, updatedAt: '' };

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

describe('breakingChange', () => {
  it('reads the gate refusal', () => {
    const err = { errors: [{ message: 'breaks 2', extensions: { code: 'CONFLICT', rule: 'breaking_change', resourceCount: 2, resources: ['a', 'b'], fields: ['spec/team [type]'] } }] };
    expect(breakingChange(err)).toEqual({ message: 'breaks 2', resourceCount: 2, resources: ['a', 'b'], fields: ['spec/team [type]'] });
  });
  it('is null for other errors', () => {
    expect(breakingChange({ errors: [{ message: 'x', extensions: { code: 'BAD_USER_INPUT' } }] })).toBeNull();
    expect(breakingChange(null)).toBeNull();
  });
});

describe('policyInput maxTransientAttempts', () => {
  it('sends the dead-letter bound when changed', () => {
    const d = { ...policyDraft(current), maxTransientAttempts: '3' };
    expect(policyInput(d, current)).toEqual({ input: { maxTransientAttempts: 3 }, errors: {} });
  });
});

describe('rebaseDraft', () => {
  it('moves the fields left as served to the new values and keeps the edits', () => {
    const old = policyDraft(current);
    const next = policyDraft({ ...current, maxInflight: 11, resyncIntervalSecs: 90, resyncRecomposes: true });
    const draft = { ...old, resyncIntervalSecs: '30' };
    expect(rebaseDraft(draft, old, next)).toEqual({ ...next, resyncIntervalSecs: '30' });
  });
});

describe('policyInput limits', () => {
  it('names the bound a value passes (the server refuses past 2,147,483,647)', () => {
    const r = policyInput({ ...policyDraft(current), orphanGraceSecs: '2147483648' }, current);
    expect(r.errors.orphanGraceSecs).toBe('at most 2,147,483,647');
    expect(r.input).toEqual({});
    expect(policyInput({ ...policyDraft(current), orphanGraceSecs: '2147483647' }, current)).toEqual({ input: { orphanGraceSecs: 2147483647 }, errors: {} });
  });
});
