// @vitest-environment jsdom
import { act, cleanup, configure, render, screen, waitFor } from '@testing-library/react';
import { afterEach, describe, expect, it } from 'vitest';
import { ApiClient, type Sink } from '../client/client';
import { ApiError } from '../client/errors';
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

  it('stays live with more kinds than a connection may hold subscriptions (API_WS_MAX_SUBSCRIPTIONS)', async () => {
    // The lazy charts: uPlot reads matchMedia when it loads, and a chart
    // follows its width with a ResizeObserver; jsdom has neither (nor a
    // width, so no chart is drawn).
    window.matchMedia ??= (() => ({ matches: false, addEventListener() {}, removeEventListener() {}, addListener() {}, removeListener() {} })) as unknown as typeof window.matchMedia;
    globalThis.ResizeObserver ??= class {
      observe() {}
      unobserve() {}
      disconnect() {}
    } as unknown as typeof ResizeObserver;
    const kinds = Array.from({ length: 120 }, (_, i) => `kind-${String(i).padStart(3, '0')}`);
    const fetch = (async () =>
      new Response(
        JSON.stringify({
          data: {
            summary: { phaseCounts: phases.map((phase) => ({ phase, count: phase === 'READY' ? 120 : 0 })), byKind: kinds.map((kind) => ({ kind, phase: 'READY', count: 1 })), queue: [], history: [] },
            kinds: kinds.map((name) => ({ name, isReactor: false })),
          },
        }),
        { status: 200 },
      )) as unknown as typeof globalThis.fetch;
    const client = new ApiClient({ httpUrl: 'http://x/graphql', wsUrl: 'ws://x/graphql', token: () => null, noWebSocket: true, fetch });
    // The server's gate: at most 100 live subscriptions on the connection;
    // past it a subscription is refused (an error message: it ends).
    const open = new Map<number, { vars: { kind: string | null }; sink: Sink<unknown> }>();
    let seq = 0;
    client.subscribe = ((_doc: unknown, vars: { kind: string | null }, sink: Sink<unknown>) => {
      const id = seq++;
      if (open.size >= 100) {
        queueMicrotask(() => sink.error?.(new ApiError([{ message: 'at most 100 subscriptions per connection (API_WS_MAX_SUBSCRIPTIONS)', extensions: { code: 'BAD_USER_INPUT', limit: 'subscriptions' } }]), true));
        return () => {};
      }
      open.set(id, { vars, sink });
      return () => open.delete(id);
    }) as typeof client.subscribe;
    render(
      <ClientProvider client={client}>
        <SummaryPage />
      </ClientProvider>,
    );
    expect(await screen.findByTestId('total-READY')).toHaveProperty('textContent', '120');
    await waitFor(() => expect(document.querySelectorAll('[data-testid=by-kind] tbody tr')).toHaveLength(120));
    await act(async () => {});
    // The totals are followed, whatever the number of kinds, and nothing was refused.
    const totals = [...open.values()].find((s) => s.vars.kind === null);
    expect(totals).toBeDefined();
    expect(screen.queryByRole('alert')).toBeNull();
    act(() => totals!.sink.next({ phaseCounts: phases.map((phase) => ({ phase, count: phase === 'READY' ? 121 : 0 })) }));
    expect(screen.getByTestId('total-READY').textContent).toBe('121');
    // A new token (the client is recreated): every view subscribes again,
    // the rows before the page (React runs a child's effects first).
    act(() => client.reconnect());
    await act(async () => {});
    const again = [...open.values()].find((s) => s.vars.kind === null);
    expect(again, 'the totals subscription was refused').toBeDefined();
    expect(screen.queryByRole('alert')).toBeNull();
    act(() => again!.sink.next({ phaseCounts: phases.map((phase) => ({ phase, count: phase === 'READY' ? 122 : 0 })) }));
    expect(screen.getByTestId('total-READY').textContent).toBe('122');
  });
});
