import { describe, expect, it } from 'vitest';
import { ResourcesPageDocument } from '../gql/graphql';
import { ApiClient, backoff } from './client';
import { ApiError, fieldErrors } from './errors';

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
