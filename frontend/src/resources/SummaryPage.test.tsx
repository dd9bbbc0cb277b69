// @vitest-environment jsdom
import { cleanup, configure, render, screen } from '@testing-library/react';
import { afterEach, describe, expect, it } from 'vitest';
import { ApiClient } from '../client/client';
import { ClientProvider } from '../client/hooks';
import { SummaryPage } from './SummaryPage';

configure({ asyncUtilTimeout: 15_000 });
afterEach(cleanup);

const phases = ['READY', 'RECONCILING', 'DEGRADED', 'FAILED', 'DELETING', 'ORPHANED', 'QUARANTINED'];

describe('SummaryPage', () => {
  it('paints every count from the one summary read, with no placeholder, and names the kinds failing most', async () => {
    const ops: string[] = [];
    const fetch = (async (_u: string, init: RequestInit) => {
      const body = JSON.parse(init.body as string) as { operationName: string };
      ops.push(body.operationName);
      const data =
        body.operationName === 'SummaryFirstPaint'
          ? {
              summary: {
                phaseCounts: phases.map((phase) => ({ phase, count: phase === 'READY' ? 1234 : phase === 'FAILED' ? 3 : 0 })),
                byKind: [
                  { kind: 'vpc', phase: 'READY', count: 1234 },
                  { kind: 'route', phase: 'FAILED', count: 3 },
                ],
                queue: [{ kind: 'route', pending: 40, leased: 8 }],
                history: [0, 1, 2].map((i) => ({
                  at: new Date(Date.now() - (3 - i) * 5000).toISOString(),
                  queue: [{ kind: 'route', pending: 40 + i, leased: 8 }],
                  phaseCounts: phases.map((phase) => ({ phase, count: phase === 'READY' ? 1230 + i : 0 })),
                })),
              },
              kinds: [
                { name: 'vpc', isReactor: false },
                { name: 'route', isReactor: false },
                { name: 'notify', isReactor: true },
              ],
            }
          : {};
      return new Response(JSON.stringify({ data }), { status: 200 });
    }) as unknown as typeof globalThis.fetch;
    const client = new ApiClient({ httpUrl: 'http://x/graphql', wsUrl: 'ws://x/graphql', token: () => null, noWebSocket: true, fetch });
    const { container } = render(
      <ClientProvider client={client}>
        <SummaryPage />
      </ClientProvider>,
    );
    expect(await screen.findByTestId('total-READY')).toHaveProperty('textContent', '1,234');
    expect(container.textContent).not.toContain('…');
    expect(screen.getByTestId('total-FAILED').textContent).toBe('3');
    expect(container.querySelectorAll('[data-testid=by-kind] tbody tr')).toHaveLength(2);
    expect(screen.getByTestId('failing-kinds').textContent).toContain('route');
    expect(screen.getByTestId('queue').textContent).toContain('40 pending · 8 in flight');
    expect(ops).toEqual(['SummaryFirstPaint']);
  });
});
