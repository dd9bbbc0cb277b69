// @vitest-environment jsdom
import { act, cleanup, render } from '@testing-library/react';
import { afterEach, describe, expect, it } from 'vitest';
import type { ResourceRowFragment } from '../gql/graphql';
import { applyRowEvent, livePage } from './live';
import { ResourceTable } from './ResourceTable';

afterEach(cleanup);

const rows = (n: number): ResourceRowFragment[] =>
  Array.from({ length: n }, (_, i) => ({
    id: `id-${i}`,
    kind: 'vpc',
    version: 'v1',
    name: `vpc-${i}`,
    phase: i % 7 === 0 ? 'FAILED' : 'READY',
    labels: { team: `t${i % 3}`, env: 'prod' },
    generation: 2,
    syncedGeneration: i % 5 === 0 ? 1 : 2,
    healthOk: i % 11 !== 0,
    createdAt: `2026-01-01T00:00:${String(59 - (i % 60)).padStart(2, '0')}Z`,
    updatedAt: '2026-01-01T00:01:00Z',
    owner: i % 2 ? { id: 'o', kind: 'net', name: 'n' } : null,
  }));

const table = (page: ReturnType<typeof livePage>) => (
  <ResourceTable rows={page.rows} selectedId={null} hrefOf={(r) => `/resources?sel=${r.kind}/${r.name}`} ownerHrefOf={(r) => (r.owner ? `/resources?sel=${r.owner.kind}/${r.owner.name}` : null)} caption="t" fetchedAt={1} />
);

describe('ResourceTable', () => {
  // The 100 ms budget for a 50-row page is asserted in a real browser on the
  // production build (frontend/browsertest); jsdom is no timing oracle.
  it('renders a 50-row page', () => {
    const { container } = render(table(livePage(rows(50))));
    expect(container.querySelectorAll('tbody tr')).toHaveLength(50);
    expect(container.querySelectorAll('tbody a[href^="/resources?sel=vpc/"]')).toHaveLength(50);
  });

  it('shows phase, generation behind and unhealthy flags as served', () => {
    const { container } = render(table(livePage(rows(1))));
    const tr = container.querySelector('tbody tr')!;
    expect(tr.getAttribute('data-phase')).toBe('FAILED');
    expect(tr.textContent).toContain('Failed');
    expect(tr.textContent).toContain('1/2');
    expect(tr.textContent).toContain('behind');
    expect(tr.textContent).toContain('unhealthy');
  });

  it('updates a row in place, leaving the other rows untouched', () => {
    let page = livePage(rows(3));
    const { container, rerender } = render(table(page));
    const before = [...container.querySelectorAll('tbody tr')];
    const text0 = before[0]!.innerHTML;
    page = applyRowEvent(page, { type: 'UPSERTED', id: 'id-1', previousPhase: 'READY', resource: { ...page.rows[1]!.row, phase: 'DEGRADED' } }, { kind: '', phases: [], labels: null, owner: '' }, { first: true, last: true, maxFresh: 10 }).page;
    act(() => rerender(table(page)));
    const after = [...container.querySelectorAll('tbody tr')];
    expect(after[1]).toBe(before[1]); // same DOM node, updated in place
    expect(after[1]!.getAttribute('data-phase')).toBe('DEGRADED');
    expect(after[0]!.innerHTML).toBe(text0);
  });
});
