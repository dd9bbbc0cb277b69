// @vitest-environment jsdom
import { act, cleanup, configure, fireEvent, render, screen, waitFor } from '@testing-library/react';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ApiClient } from '../client/client';
import { ClientProvider } from '../client/hooks';
import { ResourcesPage } from './ResourcesPage';

// A fake API that records the variables of every resources query.
function setup() {
  const queries: Array<Record<string, unknown>> = [];
  const fetch = (async (_u: string, init: RequestInit) => {
    const body = JSON.parse(init.body as string) as { operationName: string; variables: Record<string, unknown> };
    let data: unknown;
    if (body.operationName === 'ResourcesPage') {
      queries.push(body.variables);
      const after = body.variables.after as string | null;
      const row = (id: string, name: string) => ({ id, kind: 'vpc', version: 'v1', name, phase: 'READY', labels: {}, generation: 1, syncedGeneration: 1, healthOk: true, createdAt: '2026-01-01T00:00:00Z', updatedAt: '2026-01-01T00:00:00Z', owner: null });
      // A full first page ("first", then first-1…), then one row on the second.
      const first = body.variables.first as number;
      data = {
        resources: {
          items: after ? [row('id-2', 'second')] : Array.from({ length: first }, (_, i) => (i ? row(`id-1-${i}`, `first-${i}`) : row('id-1', 'first'))),
          nextCursor: after ? null : 'CURSOR1',
        },
      };
    } else if (body.operationName === 'SummaryKinds') {
      data = { kinds: [{ name: 'vpc', version: 'v1', isReactor: false }] };
    } else {
      data = {};
    }
    return new Response(JSON.stringify({ data }), { status: 200 });
  }) as unknown as typeof globalThis.fetch;
  const client = new ApiClient({ httpUrl: 'http://x/graphql', wsUrl: 'ws://x/graphql', token: () => null, noWebSocket: true, fetch });
  render(
    <ClientProvider client={client}>
      <ResourcesPage />
    </ClientProvider>,
  );
  return { queries };
}

// A loaded CI machine can take seconds to run a jsdom render.
configure({ asyncUtilTimeout: 15_000 });

beforeEach(() => window.history.replaceState(null, '', '/resources'));
afterEach(cleanup);

describe('ResourcesPage', () => {
  it('filters server-side by phase chips and keeps them in the URL', async () => {
    const { queries } = setup();
    await screen.findByText('first');
    expect(queries[0]).toMatchObject({ phases: null, after: null, first: 50 });
    act(() => fireEvent.click(screen.getByRole('button', { name: 'Failed' })));
    act(() => fireEvent.click(screen.getByRole('button', { name: 'Ready' })));
    await waitFor(() => expect(queries.at(-1)).toMatchObject({ phases: ['READY', 'FAILED'] }));
    expect(window.location.search).toBe('?phase=READY&phase=FAILED');
    expect(screen.getByRole('button', { name: 'Failed' }).getAttribute('aria-pressed')).toBe('true');
  });

  it('pages with Next and Prev through a cursor stack in the URL, without totals', async () => {
    const { queries } = setup();
    await screen.findByText('first');
    expect(screen.getByText(/50 resources · page 1/)).toBeTruthy();
    act(() => fireEvent.click(screen.getByRole('button', { name: 'Next →' })));
    await screen.findByText('second');
    expect(queries.at(-1)).toMatchObject({ after: 'CURSOR1' });
    expect(window.location.search).toBe('?cursors=CURSOR1');
    expect(screen.getByText(/1 resource · page 2/)).toBeTruthy();
    expect((screen.getByRole('button', { name: 'Next →' }) as HTMLButtonElement).disabled).toBe(true);
    act(() => fireEvent.click(screen.getByRole('button', { name: '← Prev' })));
    await screen.findByText('first');
    expect(window.location.search).toBe('');
  });

  it('rejects a malformed label selector at the field', async () => {
    setup();
    await screen.findByText('first');
    fireEvent.change(screen.getByLabelText('Labels'), { target: { value: 'team' } });
    expect(screen.getByRole('alert').textContent).toContain('is not key=value');
    expect((screen.getByRole('button', { name: 'Apply' }) as HTMLButtonElement).disabled).toBe(true);
  });
});
