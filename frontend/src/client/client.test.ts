import { describe, expect, it, onTestFinished, vi } from 'vitest';
import { ResourcesPageDocument } from '../gql/graphql';
import { ApiClient, backoff } from './client';
import { ApiError, fieldErrors } from './errors';
import { FakeWS } from './fakeWS';

function client(respond: (body: unknown, init: RequestInit) => Response) {
  const seen: Array<{ body: unknown; init: RequestInit }> = [];
  const c = new ApiClient({
    httpUrl: 'http://x/graphql',
    wsUrl: 'ws://x/graphql',
    token: () => 'tok',
    noWebSocket: true,
    fetch: (async (_url: string, init: RequestInit) => {
      const body = JSON.parse(init.body as string);
      seen.push({ body, init });
      return respond(body, init);
    }) as unknown as typeof fetch,
  });
  return { c, seen };
}

const json = (v: unknown, status = 200) => new Response(JSON.stringify(v), { status, headers: { 'Content-Type': 'application/json' } });

describe('ApiClient.request', () => {
  it('posts the document with its operation name, variables and bearer token', async () => {
    const { c, seen } = client(() => json({ data: { resources: { items: [], nextCursor: null } } }));
    const r = await c.request(ResourcesPageDocument, { kind: 'vpc' });
    expect(r.resources.items).toEqual([]);
    expect(seen[0]!.body).toMatchObject({ operationName: 'ResourcesPage', variables: { kind: 'vpc' } });
    expect((seen[0]!.init.headers as Record<string, string>).Authorization).toBe('Bearer tok');
  });

  it('throws GraphQL errors with their codes and field pointers', async () => {
    const { c } = client(() =>
      json({ data: null, errors: [{ message: 'spec/spokes: must be >= 0', extensions: { code: 'BAD_USER_INPUT', field: 'spec', pointer: '/spokes' } }] }),
    );
    const err = (await c.request(ResourcesPageDocument, {}).catch((e: unknown) => e)) as ApiError;
    expect(err).toBeInstanceOf(ApiError);
    expect(err.code).toBe('BAD_USER_INPUT');
    expect(fieldErrors(err)).toEqual({ fields: [{ field: 'spec', pointer: '/spokes', message: 'spec/spokes: must be >= 0' }], general: [] });
  });

  it('reports an HTTP failure without a body', async () => {
    const { c } = client(() => new Response('gateway down', { status: 502 }));
    const err = (await c.request(ResourcesPageDocument, {}).catch((e) => e)) as ApiError;
    expect(err.status).toBe(502);
    expect(err.message).toContain('502');
  });
});

describe('fieldErrors', () => {
  it('keeps errors without a field general, with their code', () => {
    const e = new ApiError([
      { message: 'not found', extensions: { code: 'NOT_FOUND' } },
      { message: 'bad name', extensions: { code: 'BAD_USER_INPUT', field: 'name' } },
    ]);
    expect(fieldErrors(e)).toEqual({ fields: [{ field: 'name', pointer: '', message: 'bad name' }], general: ['not found (NOT_FOUND)'] });
  });

  it('keeps the error of a field the form does not show general', () => {
    const e = new ApiError([
      { message: 'bad name', extensions: { code: 'BAD_USER_INPUT', field: 'name' } },
      { message: 'isDefault: another config is the default', extensions: { code: 'BAD_USER_INPUT', field: 'isDefault' } },
      { message: 'input/maxAttempts: must be >= 1', extensions: { code: 'BAD_USER_INPUT', field: 'input', pointer: '/maxAttempts' } },
    ]);
    expect(fieldErrors(e, ['name'])).toEqual({
      fields: [{ field: 'name', pointer: '', message: 'bad name' }],
      general: ['isDefault: another config is the default (BAD_USER_INPUT)', 'input/maxAttempts: must be >= 1 (BAD_USER_INPUT)'],
    });
    expect(fieldErrors(e, (f) => f.pointer === '/maxAttempts').fields.map((f) => f.field)).toEqual(['input']);
  });
});

describe('backoff', () => {
  it('starts near half a second, doubles and caps at ten seconds (±25% jitter)', () => {
    const mid = () => 0.5;
    expect(backoff(0, mid)).toBe(500);
    expect(backoff(1, mid)).toBe(1000);
    expect(backoff(5, mid)).toBe(10_000);
    expect(backoff(50, mid)).toBe(10_000);
    expect(backoff(0, () => 0)).toBe(375);
    expect(backoff(0, () => 1)).toBe(625);
  });
});

const tick = () => new Promise((r) => setTimeout(r, 0));

describe('ApiClient.reconnect', () => {
  it('ignores the late close of the socket it replaced', async () => {
    FakeWS.all = [];
    const c = new ApiClient({ httpUrl: 'http://x/graphql', wsUrl: 'ws://x/graphql', token: () => 't', webSocketImpl: FakeWS });
    await tick();
    const first = FakeWS.all[0]!;
    first.open();
    await tick();
    first.ack();
    await tick();
    expect(c.getSnapshot().state).toBe('live');

    // The user saves a token: the old socket is disposed, a new one opens.
    c.reconnect();
    await tick();
    const second = FakeWS.all[1]!;
    second.open();
    await tick();
    second.ack();
    await tick();
    expect(c.getSnapshot().state).toBe('live');

    // The old socket's close handshake completes afterwards.
    first.closed(1000);
    await tick();
    expect(c.getSnapshot().state).toBe('live');
    c.dispose();
  });

  it('leaves the replaced client, in its retry backoff, unable to open a socket or drive the indicator', async () => {
    // The backoff runs on a fake clock: waited out at once, never raced.
    vi.useFakeTimers();
    onTestFinished(() => {
      vi.useRealTimers();
    });
    const flush = () => vi.advanceTimersByTimeAsync(0);
    FakeWS.all = [];
    const c = new ApiClient({ httpUrl: 'http://x/graphql', wsUrl: 'ws://x/graphql', token: () => 't', webSocketImpl: FakeWS });
    await flush();
    const first = FakeWS.all[0]!;
    first.open();
    await flush();
    first.ack();
    await flush();
    // The server goes away: the client waits its backoff (0.5 s ± 25 %) to retry.
    first.closed(1006);
    await flush();
    expect(c.getSnapshot().state).toBe('reconnecting');
    // Meanwhile the user saves a token.
    c.reconnect();
    await flush();
    const fresh = FakeWS.all[1]!;
    fresh.open();
    await flush();
    fresh.ack();
    await flush();
    expect(c.getSnapshot().state).toBe('live');
    // The old client's backoff (at most 0.625 s) ends.
    await vi.advanceTimersByTimeAsync(800);
    const zombie = FakeWS.all[2];
    const states: string[] = [c.getSnapshot().state];
    if (zombie) {
      zombie.open();
      await flush();
      zombie.ack();
      await flush();
      states.push(c.getSnapshot().state);
      zombie.closed(1000);
      await flush();
      states.push(c.getSnapshot().state);
    }
    expect({ sockets: FakeWS.all.length, states, epoch: c.getSnapshot().epoch }).toEqual({ sockets: 2, states: ['live'], epoch: 1 });
    c.dispose();
  });
});

describe('ApiClient.subscribe', () => {
  it('tells an error that ended the subscription from errors in a result', async () => {
    FakeWS.all = [];
    const c = new ApiClient({ httpUrl: 'http://x/graphql', wsUrl: 'ws://x/graphql', token: () => 't', webSocketImpl: FakeWS });
    await tick();
    const ws = FakeWS.all[0]!;
    ws.open();
    await tick();
    ws.ack();
    await tick();
    const got: Array<[string, boolean]> = [];
    c.subscribe(ResourcesPageDocument, {}, { next: () => {}, error: (e, ended) => got.push([e.code, ended]) });
    await tick();
    const id = (JSON.parse(ws.sent.find((m) => m.includes('"subscribe"'))!) as { id: string }).id;
    const send = (m: unknown) => ws.onmessage?.({ data: JSON.stringify(m) });
    send({ id, type: 'next', payload: { data: null, errors: [{ message: 'partial', extensions: { code: 'INTERNAL' } }] } });
    send({ id, type: 'error', payload: [{ message: 'gone', extensions: { code: 'INTERNAL' } }] });
    await tick();
    expect(got).toEqual([
      ['INTERNAL', false],
      ['INTERNAL', true],
    ]);
    c.dispose();
  });
});
