// @vitest-environment jsdom
// A read still in flight when the graph view unmounts (newly appeared
// children of a composite) opens no subscription when it returns: nothing
// would ever close it.
import { act, cleanup, configure, render, screen, waitFor } from '@testing-library/react';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ApiClient, type Sink } from '../client/client';
import { ApiError } from '../client/errors';
import { ClientProvider } from '../client/hooks';

vi.mock('./GraphCanvas', () => ({ GraphCanvas: () => null }));
const { default: GraphPage } = await import('./GraphPage');

const at = '2026-01-01T00:00:00Z';
const node = (id: string, owner: string | null) => ({ id, kind: 'hub', name: id, phase: 'READY', updatedAt: at, owner: owner ? { id: owner } : null, dependencies: [] });

configure({ asyncUtilTimeout: 15_000 });
afterEach(cleanup);

describe('GraphPage', () => {
  it('opens no subscription for a read that returns after unmount', async () => {
    window.history.replaceState(null, '', '/graph?root=hub/top');
    const client = new ApiClient({ httpUrl: 'http://x/graphql', wsUrl: 'ws://x/graphql', token: () => null, noWebSocket: true });
    const active = new Set<{ vars: unknown; sink: Sink<unknown> }>();
    client.subscribe = ((_doc: unknown, vars: unknown, sink: Sink<unknown>) => {
      const s = { vars, sink };
      active.add(s);
      return () => active.delete(s);
    }) as typeof client.subscribe;
    let releaseC1: (() => void) | null = null;
    const childrenOf: Record<string, unknown[]> = { top: [], c1: [node('g1', 'c1')], g1: [] };
    client.request = (async (doc: { operationName: string }, vars: Record<string, unknown>) => {
      if (doc.operationName === 'GraphRoot') return { resource: node('top', null), kinds: [{ name: 'hub', reactions: [{ emits: ['CHILDREN'] }] }] };
      if (doc.operationName === 'GraphChildren') {
        const owner = vars.ownerId as string;
        if (owner === 'c1') await new Promise<void>((r) => (releaseC1 = r));
        return { resources: { items: childrenOf[owner] ?? [], nextCursor: null } };
      }
      throw new Error(`unexpected ${doc.operationName}`);
    }) as typeof client.request;

    const view = render(
      <ClientProvider client={client}>
        <GraphPage />
      </ClientProvider>,
    );
    // Loaded: the root's own subscription and the one for its subtree.
    await waitFor(() => expect(active.size).toBe(3));
    await waitFor(() => expect(view.getByTestId('graph-size').textContent).toContain('1 nodes loaded'));
    const tree = [...active].find((s) => (s.vars as { rootId?: string }).rootId === 'top' && String(s.sink.next).includes('buffer'))!;
    // A composite child appears live: the page starts reading its children.
    act(() => tree.sink.next({ resourceChanged: { type: 'CREATED', id: 'c1', kind: 'hub', name: 'c1', resource: node('c1', 'top') } }));
    await waitFor(() => expect(view.getByTestId('graph-size').textContent).toContain('2 nodes loaded'));
    await waitFor(() => expect(releaseC1).not.toBeNull());
    // The user leaves the page while that read is in flight.
    view.unmount();
    expect(active.size).toBe(0);
    // The read returns (c1 has a composite child of its own). Everything
    // from the read's return to the watch of g1 is promise continuations
    // (the mocked request, loadMore, watch): they all run before any timer
    // task, so one turn of the timer queue has seen them through, however
    // slow the machine.
    await act(async () => {
      releaseC1!();
      await new Promise((r) => setTimeout(r, 0));
    });
    expect([...active].map((s) => s.vars)).toEqual([]);
  });

  it('says so when the server refuses or ends a subscription it follows the subtree by, and follows it again after an internal error', async () => {
    window.history.replaceState(null, '', '/graph?root=hub/top');
    const client = new ApiClient({ httpUrl: 'http://x/graphql', wsUrl: 'ws://x/graphql', token: () => null, noWebSocket: true });
    // The view's GraphChanged subscriptions (the failures panel has its own).
    const active = new Set<{ vars: { rootId?: string }; sink: Sink<unknown> }>();
    let refuse: ApiError | null = new ApiError([{ message: 'at most 2 subscriptions per connection (API_WS_MAX_SUBSCRIPTIONS)', extensions: { code: 'BAD_USER_INPUT', limit: 'subscriptions' } }]);
    client.subscribe = ((doc: { operationName: string }, vars: { rootId?: string }, sink: Sink<unknown>) => {
      if (doc.operationName !== 'GraphChanged') return () => {};
      const s = { vars, sink };
      if (vars.rootId && refuse) {
        const e = refuse;
        queueMicrotask(() => sink.error?.(e, true)); // an error message: the subscription ends
        return () => {};
      }
      active.add(s);
      return () => active.delete(s);
    }) as typeof client.subscribe;
    let reads = 0;
    client.request = (async (doc: { operationName: string }) => {
      if (doc.operationName === 'GraphRoot') {
        reads++;
        return { resource: node('top', null), kinds: [{ name: 'hub', reactions: [{ emits: ['CHILDREN'] }] }] };
      }
      return { resources: { items: [], nextCursor: null } };
    }) as typeof client.request;
    render(
      <ClientProvider client={client}>
        <GraphPage />
      </ClientProvider>,
    );
    // Refused: the page says it no longer follows the subtree, and why.
    const alert = await screen.findByRole('alert');
    expect(alert.textContent).toContain('not live');
    expect(alert.textContent).toContain('API_WS_MAX_SUBSCRIPTIONS');
    cleanup();

    // An internal error ends it: the graph is read and followed again, after the backoff.
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    try {
      refuse = null;
      reads = 0;
      render(
        <ClientProvider client={client}>
          <GraphPage />
        </ClientProvider>,
      );
      await vi.waitFor(() => expect([...active].some((s) => s.vars.rootId === 'top')).toBe(true));
      const tree = [...active].find((s) => s.vars.rootId === 'top')!;
      expect(reads).toBe(1);
      act(() => tree.sink.error!(new ApiError([{ message: 'internal error, see server logs (request id r1)', extensions: { code: 'INTERNAL' } }]), true));
      await act(async () => void vi.advanceTimersByTime(10_000));
      await vi.waitFor(() => expect(reads).toBe(2));
      await vi.waitFor(() => expect([...active].filter((s) => s.vars.rootId === 'top')).toHaveLength(1));
    } finally {
      vi.useRealTimers();
    }
  });
});
