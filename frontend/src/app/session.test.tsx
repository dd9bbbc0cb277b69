// @vitest-environment jsdom
// The token dialog: asked for when the API requires a token, and clear about
// a token the API refused.
import { cleanup, configure, fireEvent, render, screen, waitFor } from '@testing-library/react';
import { afterEach, describe, expect, it } from 'vitest';
import { ApiClient, storedToken } from '../client/client';
import { ClientProvider } from '../client/hooks';
import { SessionProvider } from './session';

const refusal = { errors: [{ message: 'a valid bearer token is required (Authorization: Bearer <token>, or the connection_init payload\'s Authorization)', extensions: { code: 'UNAUTHENTICATED' } }] };

// An API that takes one token ("good-token-0123456789") and refuses every other request.
function setup(stored: string | null) {
  if (stored) window.localStorage.setItem('converge.token', stored);
  const sent: Array<string | null> = [];
  const fetch = (async (_u: string, init: RequestInit) => {
    new Headers(init.headers); // a header value a browser cannot send throws, as fetch does
    const auth = (init.headers as Record<string, string>).Authorization ?? null;
    sent.push(auth);
    if (auth !== 'Bearer good-token-0123456789') return new Response(JSON.stringify(refusal), { status: 401 });
    return new Response(JSON.stringify({ data: { viewer: { role: 'ADMIN', authRequired: true, name: 'ops' }, version: 'v9' } }), { status: 200 });
  }) as unknown as typeof globalThis.fetch;
  const client = new ApiClient({ httpUrl: 'http://x/graphql', wsUrl: 'ws://x/graphql', token: storedToken, noWebSocket: true, fetch });
  render(
    <ClientProvider client={client}>
      <SessionProvider>
        <p>page</p>
      </SessionProvider>
    </ClientProvider>,
  );
  return { sent };
}

configure({ asyncUtilTimeout: 15_000 });
afterEach(() => {
  cleanup();
  window.localStorage.clear();
});

describe('the token dialog', () => {
  it('asks for a token when the API requires one and none is stored', async () => {
    setup(null);
    const alert = await screen.findByRole('alert');
    expect(alert.textContent).toContain('This API requires a bearer token');
  });

  it('says the API refused the token it was sent, with the server’s reason', async () => {
    setup('wrong-token-0123456789');
    const alert = await screen.findByRole('alert');
    expect(alert.textContent).toContain('The API refused the stored token');
    expect(alert.textContent).toContain('a valid bearer token is required');
  });

  it('closes once a token the API takes is entered', async () => {
    const s = setup('wrong-token-0123456789');
    await screen.findByRole('dialog');
    fireEvent.change(screen.getByLabelText('Bearer token'), { target: { value: ' good-token-0123456789 ' } });
    fireEvent.click(screen.getByRole('button', { name: 'Use token' }));
    await waitFor(() => expect(screen.queryByRole('dialog')).toBeNull());
    expect(window.localStorage.getItem('converge.token')).toBe('good-token-0123456789');
    expect(s.sent.at(-1)).toBe('Bearer good-token-0123456789');
  });

  it.each([
    { reason: 'a zero-width space pasted with it', token: 'good-token-\u200b0123456789', at: 'U+200B at 12' },
    { reason: 'a space inside it', token: 'good-token 0123456789', at: 'U+0020 at 11' },
    { reason: 'a letter outside ASCII', token: 'good-tokén-0123456789', at: 'U+00E9 at 9' },
  ])('refuses a token a request header cannot carry ($reason), naming the character, and stores nothing', async ({ token, at }) => {
    const s = setup(null);
    await screen.findByRole('dialog');
    const before = s.sent.length;
    fireEvent.change(screen.getByLabelText('Bearer token'), { target: { value: token } });
    fireEvent.click(screen.getByRole('button', { name: 'Use token' }));
    const err = await screen.findByText(/printable ASCII/);
    expect(err.textContent).toContain(at);
    expect(screen.getByLabelText('Bearer token').getAttribute('aria-invalid')).toBe('true');
    expect(window.localStorage.getItem('converge.token')).toBeNull();
    expect(s.sent.length).toBe(before);
  });
});
