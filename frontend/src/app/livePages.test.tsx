// @vitest-environment jsdom
import { act, cleanup, configure, fireEvent, render, screen, waitFor } from '@testing-library/react';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ApiClient, type Sink } from '../client/client';
import { ClientProvider } from '../client/hooks';
import { KindsPage } from '../kinds/KindsPage';
import { ConfigsPage } from '../configs/ConfigsPage';
import { BindingsPage } from '../bindings/BindingsPage';

const at = '2026-01-01T00:00:00Z';
const binding = (name: string, enabled = true) => ({ name, watchKind: 'bom', transition: 'SYNCED', reactor: 'statussink', labelMatch: {}, enabled, createdAt: at, updatedAt: at });
const policy = (maxInflight: number) => ({ maxInflight, taskDeadlineSecs: 0, resyncIntervalSecs: 0, resyncRecomposes: false, orphanGraceSecs: 0, updatedAt: at });
const kind = (name: string, maxInflight = 0) => ({ name, version: 'v1', description: null, isReactor: false, finalizerName: null, manifestGeneration: 1, updatedAt: at, reactions: [], config: policy(maxInflight), usage: { resources: 0, servedBy: 0 } });
const config = (name: string) => ({ id: `id-${name}`, kind: 'vpc', name, isDefault: false, spec: {}, data: null, owner: null, createdAt: at, updatedAt: at });

// A fake API: queries answer from `data`; subscriptions are captured so a
// test pushes what another client's change makes the server push.
function setup(page: React.ReactNode, data: Record<string, unknown>) {
  const queries: string[] = [];
  const fetch = (async (_u: string, init: RequestInit) => {
    const body = JSON.parse(init.body as string) as { operationName: string };
    queries.push(body.operationName);
    return new Response(JSON.stringify({ data: data[body.operationName] ?? {} }), { status: 200 });
  }) as unknown as typeof globalThis.fetch;
  const client = new ApiClient({ httpUrl: 'http://x/graphql', wsUrl: 'ws://x/graphql', token: () => null, noWebSocket: true, fetch });
  const subs = new Map<string, Sink<unknown>>();
  client.subscribe = ((doc: { operationName: string }, _v: unknown, sink: Sink<unknown>) => {
    subs.set(doc.operationName, sink);
    return () => subs.delete(doc.operationName);
  }) as typeof client.subscribe;
  render(<ClientProvider client={client}>{page}</ClientProvider>);
  const push = (op: string, value: unknown) => {
    const s = subs.get(op);
    if (!s) throw new Error(`no ${op} subscription`);
    act(() => s.next(value));
  };
  return { push, queries, subs };
}

configure({ asyncUtilTimeout: 15_000 });
afterEach(cleanup);

describe('live catalog pages', () => {
  beforeEach(() => window.history.replaceState(null, '', '/'));

  it('BindingsPage shows bindings another client creates, changes and deletes', async () => {
    window.history.replaceState(null, '', '/bindings');
    const { push } = setup(<BindingsPage />, { ReactorBindings: { reactorBindings: [binding('first')] }, BindingKinds: { kinds: [] } });
    await screen.findByText('first');
    push('ReactorBindingsLive', { reactorBindings: [binding('first'), binding('second', false)] });
    await screen.findByText('second');
    expect(screen.getAllByText('off')).toHaveLength(1);
    push('ReactorBindingsLive', { reactorBindings: [binding('second', true)] });
    await waitFor(() => expect(screen.queryByText('first')).toBeNull());
    expect(screen.queryByText('off')).toBeNull();
  });

  it('KindsPage follows policy edits and new manifests from the subscription', async () => {
    window.history.replaceState(null, '', '/kinds');
    const { push } = setup(<KindsPage />, { Kinds: { kinds: [kind('vpc')] } });
    await screen.findByText('vpc');
    push('KindsLive', { kinds: [kind('route'), kind('vpc', 8)] });
    await screen.findByText('route');
    const row = screen.getByText('vpc').closest('tr')!;
    expect(row.textContent).toContain('8');
  });

  it('ConfigsPage re-reads its view on every push of the configs (the first included: the first read may predate it)', async () => {
    window.history.replaceState(null, '', '/configs');
    const data: Record<string, unknown> = { ProviderConfigs: { providerConfigs: { items: [config('a')], nextCursor: null } }, ConfigKinds: { kinds: [] } };
    const { push, queries } = setup(<ConfigsPage />, data);
    await screen.findByText('a');
    const before = queries.filter((q) => q === 'ProviderConfigs').length;
    data.ProviderConfigs = { providerConfigs: { items: [config('b'), config('a')], nextCursor: null } };
    push('ProviderConfigsLive', { providerConfigs: [{ id: 'id-b', updatedAt: at }, { id: 'id-a', updatedAt: at }] });
    await screen.findByText('b');
    expect(queries.filter((q) => q === 'ProviderConfigs').length).toBe(before + 1);
  });
});

describe('the kind policy form', () => {
  beforeEach(() => window.history.replaceState(null, '', '/'));

  const detail = (k: ReturnType<typeof kind>) => ({ kind: { ...k, specSchema: {}, statusSchema: null, configSchema: null, manifest: {}, createdAt: at } });

  it('keeps an unsaved edit when the kind is re-read with the same policy (another client re-applied its manifest, or the socket reconnected)', async () => {
    window.history.replaceState(null, '', '/kinds?sel=vpc');
    const data: Record<string, unknown> = { Kinds: { kinds: [kind('vpc')] }, KindDetail: detail(kind('vpc')) };
    const { push, queries } = setup(<KindsPage />, data);
    const input = (await screen.findByLabelText('Max in flight')) as HTMLInputElement;
    await waitFor(() => expect(input.value).toBe('0'));
    fireEvent.change(input, { target: { value: '7' } });
    expect(input.value).toBe('7');
    // Another client re-applies the manifest: the detail is re-read, its policy unchanged.
    const reads = queries.filter((q) => q === 'KindDetail').length;
    data.KindDetail = detail({ ...kind('vpc'), manifestGeneration: 2 });
    push('KindsLive', { kinds: [{ ...kind('vpc'), manifestGeneration: 2 }] });
    await waitFor(() => expect(queries.filter((q) => q === 'KindDetail').length).toBe(reads + 1));
    await screen.findByText(/manifest generation 2/);
    await act(async () => {}); // the re-read's effects have run
    expect(screen.getByLabelText('Max in flight')).toBe(input);
    expect(input.value).toBe('7');
  });

  it('takes another client\'s policy change in the fields not being edited', async () => {
    window.history.replaceState(null, '', '/kinds?sel=vpc');
    const data: Record<string, unknown> = { Kinds: { kinds: [kind('vpc')] }, KindDetail: detail(kind('vpc')) };
    const { push } = setup(<KindsPage />, data);
    const deadline = (await screen.findByLabelText('Task deadline (s)')) as HTMLInputElement;
    const cap = screen.getByLabelText('Max in flight') as HTMLInputElement;
    await waitFor(() => expect(deadline.value).toBe('0'));
    fireEvent.change(deadline, { target: { value: '30' } });
    const changed = { ...kind('vpc', 9), config: { ...policy(9), updatedAt: '2026-01-01T00:01:00Z' } };
    data.KindDetail = detail(changed);
    push('KindsLive', { kinds: [changed] });
    await waitFor(() => expect(cap.value).toBe('9'));
    await act(async () => {});
    expect(deadline.value).toBe('30');
  });
});
