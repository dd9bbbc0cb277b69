// @vitest-environment jsdom
// A page that cannot render (its lazy chunk is gone after an upgrade, or a
// bug throws) shows why in place of the page, never a blank dashboard: the
// navigation stays, and another page still works.
import { act, cleanup, configure, fireEvent, render, screen } from '@testing-library/react';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ApiClient } from '../client/client';
import { ClientProvider } from '../client/hooks';
import { isChunkLoadError } from '../widgets/PageErrorBoundary';
import { App } from './App';

// The graph view's chunk, as a page loaded before an upgrade asks for it:
// the new server no longer has it (404), so the import rejects, and React
// throws that error where the page renders (as this stand-in does).
vi.mock('../graph/GraphPage', () => ({
  default: () => {
    throw new TypeError('Failed to fetch dynamically imported module: http://x/assets/GraphPage-0ld0ld.js');
  },
}));

configure({ asyncUtilTimeout: 15_000 });
afterEach(cleanup);

function setup() {
  const fetch = (async () => new Response(JSON.stringify({ data: { viewer: { role: 'ADMIN', authRequired: false, name: null }, version: 'v1', kinds: [], summary: null } }), { status: 200 })) as unknown as typeof globalThis.fetch;
  const client = new ApiClient({ httpUrl: 'http://x/graphql', wsUrl: 'ws://x/graphql', token: () => null, noWebSocket: true, fetch });
  client.subscribe = (() => () => {}) as typeof client.subscribe;
  render(
    <ClientProvider client={client}>
      <App />
    </ClientProvider>,
  );
}

describe('App', () => {
  beforeEach(() => {
    window.history.replaceState(null, '', '/graph?root=net%2Fmesh');
    vi.spyOn(console, 'error').mockImplementation(() => {}); // React reports the caught error
  });
  afterEach(() => vi.restoreAllMocks());

  it('says the dashboard was updated when a page’s code is gone, and the other pages still work', async () => {
    setup();
    const alert = await screen.findByRole('alert');
    expect(screen.getByRole('heading', { name: 'The dashboard was updated' })).toBeTruthy();
    expect(alert.textContent).toContain('reload the dashboard');
    expect(screen.getByRole('button', { name: 'Reload the dashboard' })).toBeTruthy();
    expect(screen.getByRole('navigation', { name: 'Main' })).toBeTruthy();
    // Another page renders again.
    act(() => fireEvent.click(screen.getByRole('link', { name: 'Kinds' })));
    await screen.findByRole('heading', { name: 'Kinds' });
    expect(screen.queryByRole('button', { name: 'Reload the dashboard' })).toBeNull();
  });
});

describe('isChunkLoadError', () => {
  it.each([
    { reason: 'Chromium', msg: 'Failed to fetch dynamically imported module: http://x/assets/GraphPage-1.js', want: true },
    { reason: 'Firefox', msg: 'error loading dynamically imported module: http://x/assets/GraphPage-1.js', want: true },
    { reason: 'Safari', msg: 'Importing a module script failed.', want: true },
    { reason: 'Vite CSS preload', msg: 'Unable to preload CSS for /assets/GraphPage-1.css', want: true },
    { reason: 'a bug', msg: "Cannot read properties of undefined (reading 'phase')", want: false },
  ])('$reason', ({ msg, want }) => {
    expect(isChunkLoadError(new Error(msg))).toBe(want);
  });
});
