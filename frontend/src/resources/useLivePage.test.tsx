// @vitest-environment jsdom
// The live resources page keeps the resourceChanged events it receives only
// while a read is in flight, and replays them on its result: a read that
// fails drops them, and while the query keeps failing (a label selector the
// server refuses) none is kept.
import { act, cleanup, configure, render, screen } from '@testing-library/react';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ApiClient, type Sink } from '../client/client';
import { ClientProvider } from '../client/hooks';
import { FakeWS } from '../client/fakeWS';

const calls = vi.hoisted(() => ({ n: 0 }));
vi.mock('./live', async (orig) => {
  const real = (await orig()) as typeof import('./live');
  return { ...real, applyRowEvent: (...a: Parameters<typeof real.applyRowEvent>) => (calls.n++, real.applyRowEvent(...a)) };
});
const { ResourcesPage } = await import('./ResourcesPage');
const { FILL_REQUESTS } = await import('./useLivePage');
const { navigate } = await import('../app/router');

const at = '2026-01-01T00:00:00Z';
const row = (i: number) => ({ id: `id-${i}`, kind: 'vpc', version: 'v1', name: `r${i}`, phase: 'READY', labels: {}, generation: 1, syncedGeneration: 1, healthOk: true, createdAt: at, updatedAt: at, owner: null });
const upsert = (i: number) => ({ resourceChanged: { type: 'UPSERTED', id: `id-${i}`, previousPhase: 'READY', resource: row(i) } });
const resync = { resourceChanged: { type: 'RESYNC', id: '', previousPhase: null, resource: null } };
const json = (v: unknown) => new Response(JSON.stringify(v), { status: 200 });

configure({ asyncUtilTimeout: 15_000 });
afterEach(cleanup);

/** mount renders the page; page answers its ResourcesPage reads. */
function mount(page: (vars: { first?: number; after?: string | null }) => Promise<Response>) {
  const fetch = (async (_u: string, init: RequestInit) => {
    const body = JSON.parse(init.body as string) as { operationName: string; variables: { first?: number; after?: string | null } };
    return body.operationName === 'ResourcesPage' ? page(body.variables) : json({ data: { kinds: [] } });
  }) as unknown as typeof globalThis.fetch;
  const client = new ApiClient({ httpUrl: 'http://x/graphql', wsUrl: 'ws://x/graphql', token: () => null, noWebSocket: true, fetch });
  const subs = new Map<string, Sink<unknown>>();
  client.subscribe = ((doc: { operationName: string }, _v: unknown, sink: Sink<unknown>) => {
    subs.set(doc.operationName, sink);
    return () => subs.delete(doc.operationName);
  }) as typeof client.subscribe;
  render(
    <ClientProvider client={client}>
      <ResourcesPage />
    </ClientProvider>,
  );
  // The subscription (kind, owner, phases: here none, so every resource).
  return () => subs.get('ResourceRowsChanged')!;
}

describe('useLivePage', () => {
  it('replays the events received while its read is in flight', async () => {
    window.history.replaceState(null, '', '/resources');
    let release: (() => void) | null = null;
    const sink = mount(() => new Promise((r) => (release = () => r(json({ data: { resources: { items: [], nextCursor: null } } })))));
    await vi.waitFor(() => expect(release).not.toBeNull());
    act(() => sink().next(upsert(1)));
    await act(async () => release!());
    expect((await screen.findByTestId('resource-table')).textContent).toContain('r1');
  });

  it('keeps no events while its query fails', async () => {
    // A label key the server's validation refuses (the dashboard's parser accepts it).
    window.history.replaceState(null, '', '/resources?labels=' + encodeURIComponent('bad key=x'));
    let fail = true;
    const sink = mount(async () =>
      fail
        ? json({ data: null, errors: [{ message: 'labels: label key "bad key" is invalid', extensions: { code: 'BAD_USER_INPUT', field: 'labels' } }] })
        : json({ data: { resources: { items: [], nextCursor: null } } }),
    );
    await screen.findByText(/label key "bad key" is invalid/);
    act(() => {
      for (let i = 0; i < 3000; i++) sink().next(upsert(i));
    });
    // A read then succeeds: none of the 3,000 events received while the query failed was kept to replay.
    fail = false;
    calls.n = 0;
    act(() => sink().next(resync));
    await screen.findByTestId('empty-list');
    expect(calls.n).toBeLessThan(100);
  });

  it('replays an event that arrives once a re-read is sent, before the page renders it as loading', async () => {
    window.history.replaceState(null, '', '/resources');
    const later = '2026-01-01T00:00:05Z';
    let reads = 0;
    let sink: (() => Sink<unknown>) | null = null;
    let release: (() => void) | null = null;
    sink = mount(() => {
      reads++;
      if (reads === 1) return Promise.resolve(json({ data: { resources: { items: [row(1)], nextCursor: null } } }));
      // The re-read is on its way (the server read r1 before it failed)
      // when the change's event arrives, before React renders again.
      sink!().next({ resourceChanged: { type: 'UPSERTED', id: 'id-1', previousPhase: 'READY', resource: { ...row(1), phase: 'FAILED', updatedAt: later } } });
      return new Promise((r) => (release = () => r(json({ data: { resources: { items: [row(1)], nextCursor: null } } }))));
    });
    await screen.findByText('r1');
    act(() => navigate('/resources?size=25'));
    await vi.waitFor(() => expect(release).not.toBeNull());
    await act(async () => release!());
    await vi.waitFor(() => expect(reads).toBe(2));
    expect(document.querySelector('tr[data-name=r1]')?.getAttribute('data-phase')).toBe('FAILED');
  });

  it('reads again once the websocket first connects: a change before its subscriptions started is not missed', async () => {
    window.history.replaceState(null, '', '/resources');
    FakeWS.all = [];
    let phase = 'RECONCILING';
    const fetch = (async (_u: string, init: RequestInit) => {
      const body = JSON.parse(init.body as string) as { operationName: string };
      if (body.operationName !== 'ResourcesPage') return json({ data: { kinds: [] } });
      return json({ data: { resources: { items: [{ ...row(1), phase }], nextCursor: null } } });
    }) as unknown as typeof globalThis.fetch;
    const client = new ApiClient({ httpUrl: 'http://x/graphql', wsUrl: 'ws://x/graphql', token: () => null, webSocketImpl: FakeWS, fetch });
    render(
      <ClientProvider client={client}>
        <ResourcesPage />
      </ClientProvider>,
    );
    // The page reads while the websocket is still connecting.
    await vi.waitFor(() => expect(document.querySelector('tr[data-name=r1]')?.getAttribute('data-phase')).toBe('RECONCILING'));
    // r1 turns READY before the server holds the page's subscription: its event reaches no one.
    phase = 'READY';
    const ws = FakeWS.all[0]!;
    await act(async () => ws.open());
    await act(async () => ws.ack());
    await vi.waitFor(() => expect(document.querySelector('tr[data-name=r1]')?.getAttribute('data-phase')).toBe('READY'));
    client.dispose();
  });

  it('fills a page across the short pages a filtered read returns', async () => {
    // The server reads a bounded number of resources per request: a rare
    // label within a kind comes back empty, then short, with cursors.
    window.history.replaceState(null, '', '/resources?kind=vpc&labels=' + encodeURIComponent('zone=a'));
    const asked: { first?: number; after?: string | null }[] = [];
    mount(async (vars) => {
      asked.push(vars);
      const pages: Record<string, { items: unknown[]; nextCursor: string | null }> = {
        '': { items: [], nextCursor: 'c1' },
        c1: { items: [row(1), row(2)], nextCursor: 'c2' },
        c2: { items: [row(3)], nextCursor: null },
      };
      return json({ data: { resources: pages[vars.after ?? ''] } });
    });
    const table = await screen.findByTestId('resource-table');
    await vi.waitFor(() => expect(table.textContent).toContain('r3'));
    expect(table.textContent).toContain('r1');
    expect(asked.map((v) => v.after ?? '')).toEqual(['', 'c1', 'c2']);
    expect(asked[2]!.first).toBe(asked[0]!.first! - 2); // asks for what the page lacks
    expect(screen.getByRole('button', { name: 'Next →' })).toHaveProperty('disabled', true);
  });

  it('says more may follow when its reads found nothing yet', async () => {
    window.history.replaceState(null, '', '/resources?kind=vpc&labels=' + encodeURIComponent('zone=b'));
    let n = 0;
    mount(async () => json({ data: { resources: { items: [], nextCursor: `c${++n}` } } }));
    await screen.findByTestId('empty-page');
    expect(n).toBe(FILL_REQUESTS);
    expect(screen.queryByTestId('empty-list')).toBeNull();
    expect(screen.getByRole('button', { name: 'Next →' })).toHaveProperty('disabled', false);
  });
});
