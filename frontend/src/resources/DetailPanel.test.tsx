// @vitest-environment jsdom
// The detail panel reads each of its parts once, and re-reads on a change
// only what the change can alter. Its event history stays whole when a live
// change re-reads its first page after "Older events" was loaded: the events
// that slid off the first page are read again, and none shows twice.
import { act, cleanup, configure, fireEvent, render, screen, waitFor } from '@testing-library/react';
import { afterEach, describe, expect, it } from 'vitest';
import { ApiClient, type Sink } from '../client/client';
import { ClientProvider } from '../client/hooks';
import { DetailPanel } from './DetailPanel';

const at = '2026-01-01T00:00:00Z';
const resource = {
  id: 'r1', kind: 'vpc', version: 'v1', name: 'a', phase: 'READY', labels: {}, generation: 1, syncedGeneration: 1, healthOk: true, createdAt: at, updatedAt: at, owner: null,
  spec: {}, status: {}, ready: true, failureGeneration: 0, failureTerminal: false, finalizers: [], deletionRequestedAt: null, frozenUntil: null, quarantined: false,
  composedGeneration: 0, providerConfigRef: null, shardId: 1, root: null, conditions: [], dependencies: [], dependents: [], providerConfig: null,
  definition: { name: 'vpc', version: 'v1', specSchema: {}, reactions: [] }, operations: [],
};
const ev = (id: number) => ({ id: String(id), type: 'NORMAL', reason: 'R', message: `event-${id}`, actor: 'x', createdAt: at });
// Newest first (id DESC), 50 a page, the cursor is the last id of the page.
const page = (newest: number, after: number | null) => {
  const top = after == null ? newest : after - 1;
  const items = [];
  for (let i = top; i > Math.max(0, top - 50); i--) items.push(ev(i));
  const last = top - 50;
  return { resource: { id: 'r1', history: { items, nextCursor: last > 0 ? String(last + 1) : null } } };
};

configure({ asyncUtilTimeout: 15_000 });
afterEach(cleanup);

describe('DetailPanel event history', () => {
  it('keeps every event, once, when new ones push the first page past the older ones', async () => {
    let newest = 100;
    const fetch = (async (_u: string, init: RequestInit) => {
      const body = JSON.parse(init.body as string) as { operationName: string; variables: Record<string, unknown> };
      let data: unknown = { resource: null };
      if (body.operationName === 'ResourceDetail') data = { resource };
      if (body.operationName === 'ResourceHistory') data = page(newest, body.variables.after == null ? null : Number(body.variables.after));
      return new Response(JSON.stringify({ data }), { status: 200 });
    }) as unknown as typeof globalThis.fetch;
    const client = new ApiClient({ httpUrl: 'http://x/graphql', wsUrl: 'ws://x/graphql', token: () => null, noWebSocket: true, fetch });
    const subs = new Map<string, Sink<unknown>>();
    client.subscribe = ((doc: { operationName: string }, _v: unknown, sink: Sink<unknown>) => {
      subs.set(doc.operationName, sink);
      return () => subs.delete(doc.operationName);
    }) as typeof client.subscribe;
    render(
      <ClientProvider client={client}>
        <DetailPanel target={{ kind: 'vpc', name: 'a' }} onClose={() => {}} hrefOf={() => '/'} childrenHref={() => '/'} />
      </ClientProvider>,
    );
    await screen.findByText('event-100');
    fireEvent.click(screen.getByRole('button', { name: 'Older events' }));
    await screen.findByText('event-1');
    expect(screen.getByText('event-55')).toBeTruthy();
    // Ten more events happen; the subscription reports the change and the panel re-reads.
    newest = 110;
    act(() => subs.get('ResourceWatch')!.next({ resourceChanged: { type: 'UPDATED', id: 'r1', previousPhase: 'READY', resource: { id: 'r1', phase: 'READY', updatedAt: at } } }));
    await screen.findByText('event-110');
    const shown = () => [...screen.getByTestId('events').textContent!.matchAll(/event-(\d+)/g)].map((m) => Number(m[1]));
    await waitFor(() => expect(shown().length).toBe(110));
    expect(shown()).toEqual(Array.from({ length: 110 }, (_, i) => 110 - i));
  });

  it('reads each of its parts once when it opens, and a change re-reads only what it changes', async () => {
    const seen: string[] = [];
    let current = resource;
    const fetch = (async (_u: string, init: RequestInit) => {
      const body = JSON.parse(init.body as string) as { operationName: string; variables: Record<string, unknown> };
      seen.push(body.operationName);
      let data: unknown = { resource: null };
      if (body.operationName === 'ResourceDetail') data = { resource: current };
      if (body.operationName === 'ResourceHistory') data = page(3, null);
      return new Response(JSON.stringify({ data }), { status: 200 });
    }) as unknown as typeof globalThis.fetch;
    const client = new ApiClient({ httpUrl: 'http://x/graphql', wsUrl: 'ws://x/graphql', token: () => null, noWebSocket: true, fetch });
    const subs = new Map<string, Sink<unknown>>();
    client.subscribe = ((doc: { operationName: string }, _v: unknown, sink: Sink<unknown>) => {
      subs.set(doc.operationName, sink);
      return () => subs.delete(doc.operationName);
    }) as typeof client.subscribe;
    render(
      <ClientProvider client={client}>
        <DetailPanel target={{ kind: 'vpc', name: 'a' }} onClose={() => {}} hrefOf={() => '/'} childrenHref={() => '/'} />
      </ClientProvider>,
    );
    await screen.findByText('event-3');
    // The fake answers at once: a read queued behind another is promise work
    // only, so one timer turn lets every queued read start.
    const settle = () => act(() => new Promise<void>((r) => setTimeout(r, 0)));
    await settle();
    const count = () => Object.fromEntries([...new Set(seen)].sort().map((op) => [op, seen.filter((x) => x === op).length]));
    expect(count()).toEqual({ ResourceDeadLetter: 1, ResourceDetail: 1, ResourceHistory: 1, ResourceSpecHistory: 1, ResourceWaitingOn: 1 });
    // A status change (same generation): the detail, the history, the gates
    // and the dead letter are re-read once each; the spec history is not.
    seen.length = 0;
    current = { ...resource, updatedAt: '2026-01-01T00:00:01Z' };
    act(() => subs.get('ResourceWatch')!.next({ resourceChanged: { type: 'UPDATED', id: 'r1', previousPhase: 'READY', resource: { id: 'r1', phase: 'READY', updatedAt: current.updatedAt } } }));
    await waitFor(() => expect(seen).toContain('ResourceWaitingOn'));
    await settle();
    expect(count()).toEqual({ ResourceDeadLetter: 1, ResourceDetail: 1, ResourceHistory: 1, ResourceWaitingOn: 1 });
    // A spec change (a new generation) re-reads the spec history too.
    seen.length = 0;
    current = { ...resource, generation: 2, updatedAt: '2026-01-01T00:00:02Z' };
    act(() => subs.get('ResourceWatch')!.next({ resourceChanged: { type: 'UPDATED', id: 'r1', previousPhase: 'READY', resource: { id: 'r1', phase: 'READY', updatedAt: current.updatedAt } } }));
    await waitFor(() => expect(seen).toContain('ResourceSpecHistory'));
    await settle();
    expect(count()).toEqual({ ResourceDeadLetter: 1, ResourceDetail: 1, ResourceHistory: 1, ResourceSpecHistory: 1, ResourceWaitingOn: 1 });
  });
});
