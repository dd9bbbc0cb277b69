// @vitest-environment jsdom
import { act, cleanup, render } from '@testing-library/react';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ResourceWatchDocument } from '../gql/graphql';
import { ApiClient, type Sink } from './client';
import { ApiError } from './errors';
import { ClientProvider, useSubscription } from './hooks';

function Watch({ onError }: { onError: (e: ApiError) => void }) {
  useSubscription(ResourceWatchDocument, { kind: 'vpc', name: 'a' }, () => {}, { onError });
  return null;
}

/** mount renders a subscriber; subs holds every subscribe call, open while its stop was not called. */
function mount() {
  const client = new ApiClient({ httpUrl: 'http://x/graphql', wsUrl: 'ws://x/graphql', token: () => null, noWebSocket: true });
  const subs: Array<{ sink: Sink<unknown>; open: boolean }> = [];
  client.subscribe = ((_doc: unknown, _vars: unknown, sink: Sink<unknown>) => {
    const s = { sink, open: true };
    subs.push(s);
    return () => void (s.open = false);
  }) as typeof client.subscribe;
  const errors: ApiError[] = [];
  const view = render(
    <ClientProvider client={client}>
      <Watch onError={(e) => errors.push(e)} />
    </ClientProvider>,
  );
  return { subs, errors, view };
}

const err = (code: string) => new ApiError([{ message: 'boom', extensions: { code } }]);
const later = (ms: number) => act(async () => void vi.advanceTimersByTime(ms));

beforeEach(() => vi.useFakeTimers());
afterEach(() => {
  cleanup();
  vi.useRealTimers();
});

describe('useSubscription', () => {
  it('subscribes again, after the backoff, when the server ends it with an internal error', async () => {
    const { subs, errors } = mount();
    expect(subs).toHaveLength(1);
    act(() => subs[0]!.sink.error!(err('INTERNAL'), true));
    expect(errors.map((e) => e.code)).toEqual(['INTERNAL']);
    await later(300); // the first wait is 0.5 s ± 25 %
    expect(subs).toHaveLength(1);
    await later(400);
    expect(subs).toHaveLength(2);
    // It fails again: the wait doubles (1 s ± 25 %).
    act(() => subs[1]!.sink.error!(err('INTERNAL'), true));
    await later(700);
    expect(subs).toHaveLength(2);
    await later(600);
    expect(subs).toHaveLength(3);
    // A push resets the backoff.
    act(() => subs[2]!.sink.next({ resourceChanged: {} }));
    act(() => subs[2]!.sink.error!(err('INTERNAL'), true));
    await later(700);
    expect(subs).toHaveLength(4);
  });

  it('does not retry an error that asking again cannot fix, nor errors in a result', async () => {
    const { subs } = mount();
    act(() => subs[0]!.sink.error!(err('BAD_USER_INPUT'), true));
    act(() => subs[0]!.sink.error!(err('INTERNAL'), false));
    await later(30_000);
    expect(subs).toHaveLength(1);
  });

  it('does not subscribe again once unmounted', async () => {
    const { subs, view } = mount();
    act(() => subs[0]!.sink.error!(err('INTERNAL'), true));
    view.unmount();
    await later(30_000);
    expect(subs).toHaveLength(1);
    expect(subs[0]!.open).toBe(false);
  });
});
