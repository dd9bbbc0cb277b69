// @vitest-environment jsdom
import { act, cleanup, configure, fireEvent, render, screen, waitFor } from '@testing-library/react';
import { afterEach, describe, expect, it } from 'vitest';
import { ApiClient } from '../client/client';
import { ClientProvider } from '../client/hooks';
import { HistoryDiff } from './HistoryDiff';
import { WaitingBanner } from './WaitingBanner';

type Body = { operationName: string; variables: Record<string, unknown> };

// A fake API answering by operation name, recording every request.
function client(answer: (b: Body) => unknown) {
  const seen: Body[] = [];
  const fetch = (async (_u: string, init: RequestInit) => {
    const body = JSON.parse(init.body as string) as Body;
    seen.push(body);
    return new Response(JSON.stringify({ data: answer(body) }), { status: 200 });
  }) as unknown as typeof globalThis.fetch;
  return { seen, c: new ApiClient({ httpUrl: 'http://x/graphql', wsUrl: 'ws://x/graphql', token: () => null, noWebSocket: true, fetch }) };
}

configure({ asyncUtilTimeout: 15_000 });
afterEach(cleanup);

const target = { kind: 'vpc', name: 'net' };

describe('WaitingBanner', () => {
  it('shows the server’s gates verbatim, the holding one first, with its blockers linked', async () => {
    const { c } = client(() => ({
      resource: {
        id: 'r1',
        waitingOn: [
          { gate: 'UPSTREAM', message: 'waits for 3 upstream(s) to sync their spec', since: null, until: null, blockerCount: 3, blockers: [{ id: 'u1', kind: 'account', name: 'acme', phase: 'RECONCILING' }], inFlight: null, cap: null, brokerId: null },
        ],
      },
    }));
    render(
      <ClientProvider client={c}>
        <WaitingBanner target={target} stamp="s1" hrefOf={(r) => `/resources/${r.kind}/${r.name}`} />
      </ClientProvider>,
    );
    const banner = await screen.findByTestId('waiting-banner');
    expect(banner.getAttribute('data-gate')).toBe('UPSTREAM');
    expect(banner.textContent).toContain('waits for 3 upstream(s) to sync their spec');
    expect(screen.getByRole('link', { name: 'account/acme' })).toBeTruthy();
    expect(banner.textContent).toContain('and 2 more');
  });

  it('renders nothing when nothing holds the resource', async () => {
    const { c, seen } = client(() => ({ resource: { id: 'r1', waitingOn: [] } }));
    render(
      <ClientProvider client={c}>
        <WaitingBanner target={target} stamp="s1" hrefOf={() => '/'} />
      </ClientProvider>,
    );
    await waitFor(() => expect(seen.length).toBeGreaterThan(0));
    expect(screen.queryByTestId('waiting-banner')).toBeNull();
  });
});

describe('HistoryDiff', () => {
  it('diffs a generation against the one before it and rolls back to it', async () => {
    const { c, seen } = client((b) => {
      switch (b.operationName) {
        case 'ResourceSpecHistory':
          return {
            resource: {
              id: 'r1',
              generation: 2,
              specHistory: [
                { generation: 2, reason: 'SpecUpdated', actor: 'alice', rolledBackFrom: null, createdAt: '2026-01-01T00:00:00Z' },
                { generation: 1, reason: 'Created', actor: 'alice', rolledBackFrom: null, createdAt: '2026-01-01T00:00:00Z' },
              ],
            },
          };
        case 'ResourceSpecDiff':
          return { resource: { id: 'r1', specDiff: { from: 1, to: 2, spec: [{ path: '/cidr', before: '10.0.0.0/24', after: '10.0.1.0/24' }], labels: [] } } };
        case 'RollbackResourceTo':
          return { rollbackResource: { id: 'r1', generation: 3 } };
      }
      return {};
    });
    let changed = 0;
    render(
      <ClientProvider client={c}>
        <HistoryDiff target={target} generation={2} onChanged={() => changed++} />
      </ClientProvider>,
    );
    await screen.findByText('SpecUpdated');
    const rows = screen.getAllByRole('button', { name: 'Diff' });
    act(() => fireEvent.click(rows[0]!));
    const diff = await screen.findByTestId('spec-diff');
    await waitFor(() => expect(diff.textContent).toContain('- spec/cidr: "10.0.0.0/24"'));
    expect(diff.textContent).toContain('+ spec/cidr: "10.0.1.0/24"');
    expect(seen.find((b) => b.operationName === 'ResourceSpecDiff')?.variables).toMatchObject({ from: 1, to: 2 });

    expect(screen.getAllByRole('button', { name: 'Roll back' })).toHaveLength(1); // only older generations
    act(() => fireEvent.click(screen.getByRole('button', { name: 'Roll back' })));
    act(() => fireEvent.click(screen.getAllByRole('button', { name: 'Roll back' }).at(-1)!));
    await waitFor(() => expect(changed).toBe(1));
    expect(seen.find((b) => b.operationName === 'RollbackResourceTo')?.variables).toMatchObject({ kind: 'vpc', name: 'net', toGeneration: 1 });
  });
});
