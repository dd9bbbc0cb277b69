// @vitest-environment jsdom
import { cleanup, render, screen } from '@testing-library/react';
import { afterEach, describe, expect, it } from 'vitest';
import { ApiClient } from '../client/client';
import { ClientProvider } from '../client/hooks';
import { GraphFailures } from './GraphFailures';

afterEach(cleanup);

describe('GraphFailures', () => {
  it('names the loaded FAILED nodes until subtreeProgress pushes their reasons', () => {
    const client = new ApiClient({ httpUrl: 'http://x/graphql', wsUrl: 'ws://x/graphql', token: () => null, noWebSocket: true, fetch: (() => new Promise(() => {})) as never });
    render(
      <ClientProvider client={client}>
        <GraphFailures rootId="r" failed={[{ id: 'a', kind: 'route', name: 'r1', phase: 'FAILED', owner: 'r', deps: [], updatedAt: '' }]} hrefOf={(r) => `/graph?sel=${r.kind}/${r.name}`} />
      </ClientProvider>,
    );
    expect(screen.getByTestId('failures').textContent).toBe('route/r1');
  });
});
