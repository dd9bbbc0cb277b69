// @vitest-environment jsdom
import { cleanup, render, screen } from '@testing-library/react';
import { afterEach, describe, expect, it } from 'vitest';
import { failureText, phaseTotals, SubtreeView, type SubtreeSnapshot } from './SubtreeProgress';

afterEach(cleanup);

const snap: SubtreeSnapshot = {
  rootId: 'r',
  total: 5,
  ready: 2,
  counts: [
    { kind: 'account', phase: 'READY', count: 2 },
    { kind: 'vpc', phase: 'FAILED', count: 2 },
    { kind: 'vpc', phase: 'RECONCILING', count: 1 },
  ],
  failures: [
    { id: 'a', kind: 'vpc', name: 'v1', phase: 'FAILED', failureTerminal: true, reason: 'ReconcileError', message: 'quota exceeded' },
  ],
  failureCount: 2,
} as SubtreeSnapshot;

describe('SubtreeView', () => {
  it('sums the phases and names each failure with its reason', () => {
    expect(phaseTotals(snap)).toEqual([
      { phase: 'READY', count: 2 },
      { phase: 'RECONCILING', count: 1 },
      { phase: 'FAILED', count: 2 },
    ]);
    render(<SubtreeView p={snap} hrefOf={(r) => `/resources/${r.kind}/${r.name}`} />);
    expect(screen.getByTestId('subtree-ready').textContent).toBe('2/5 below it READY, 2 failing');
    const li = screen.getByRole('list', { name: 'Failures below it' });
    expect(li.textContent).toContain('vpc/v1');
    expect(li.textContent).toContain('terminal');
    expect(li.textContent).toContain('ReconcileError: quota exceeded');
    expect(li.textContent).toContain('…and 1 more');
  });
  it('says so when no reason came', () => {
    expect(failureText({ reason: null, message: null })).toBe('no reason reported');
    expect(failureText({ reason: null, message: 'boom' })).toBe('boom');
  });
});
