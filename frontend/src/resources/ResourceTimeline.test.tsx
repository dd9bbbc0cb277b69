// @vitest-environment jsdom
import { cleanup, fireEvent, render, screen } from '@testing-library/react';
import { afterEach, describe, expect, it } from 'vitest';
import { LongJson, phaseMarks, ResourceTimeline } from './ResourceTimeline';

afterEach(cleanup);

const detail = {
  phase: 'READY',
  createdAt: '2026-01-01T00:00:00Z',
  conditions: [{ type: 'Ready', status: 'TRUE', reason: null, message: null, lastTransitionTime: '2026-01-01T00:05:00Z', observedGeneration: 2, synthesized: true }],
} as const;
const events = [
  // newest first, as served
  { id: '3', type: 'NORMAL', reason: 'RolledUp', message: 'Degraded → Ready', actor: 'system', createdAt: '2026-01-01T00:05:00Z' },
  { id: '2', type: 'WARNING', reason: 'ReconcileFailed', message: 'boom', actor: 'system', createdAt: '2026-01-01T00:02:00Z' },
  { id: '1', type: 'NORMAL', reason: 'Created', message: 'created', actor: 'admin', createdAt: '2026-01-01T00:00:00Z' },
] as const;

describe('phaseMarks', () => {
  it('dates the phases the history and the Ready condition name, oldest first', () => {
    const m = phaseMarks([...events].reverse(), detail as never);
    expect(m.map((x) => [x.phase, new Date(x.at).toISOString().slice(11, 16)])).toEqual([
      ['RECONCILING', '00:00'],
      ['FAILED', '00:02'],
      ['READY', '00:05'],
      ['READY', '00:05'],
    ]);
  });
});

describe('ResourceTimeline', () => {
  it('draws the phase bands and one tick per event on the time axis, warnings marked', () => {
    const { container } = render(<ResourceTimeline d={detail as never} events={events as never} now={Date.parse('2026-01-01T00:10:00Z')} />);
    const bands = [...container.querySelectorAll<HTMLElement>('.tl-band')];
    expect(bands.map((b) => b.dataset.phase)).toEqual(['RECONCILING', 'FAILED', 'READY', 'READY']);
    expect(parseFloat(bands[0]!.style.left)).toBe(0);
    expect(parseFloat(bands[1]!.style.left)).toBe(20); // 2 of 10 minutes
    const ticks = [...container.querySelectorAll<HTMLElement>('.tl-tick')];
    expect(ticks).toHaveLength(3);
    expect(ticks.filter((t) => t.classList.contains('warn')).map((t) => t.dataset.reason)).toEqual(['ReconcileFailed']);
    expect(screen.getByTestId('timeline').textContent).toContain('3 events');
  });
});

describe('LongJson', () => {
  it('shows a short document and folds a long one until asked', () => {
    const { container, rerender } = render(<LongJson value={{ a: 1 }} label="Status" />);
    expect(container.querySelector('pre')!.textContent).toContain('"a": 1');
    const long = Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`k${i}`, i]));
    rerender(<LongJson value={long} label="Status" />);
    expect(container.querySelector('pre')).toBeNull();
    expect(container.querySelector('summary')!.textContent).toContain('Status: 42 lines');
    const details = container.querySelector('details')!;
    details.open = true;
    fireEvent(details, new Event('toggle'));
    expect(container.querySelector('pre')!.textContent).toContain('"k39": 39');
  });
});
