// The API client: queries and mutations over HTTP POST, subscriptions over
// one graphql-ws websocket that stays open (it is the live indicator) and
// reconnects with capped exponential backoff, the only timer it runs.
import { createClient, type Client as WsClient } from 'graphql-ws';
import type { TypedDocument } from '../gql/typed';
import { ApiError, toApiError, type GraphQLErrorShape } from './errors';

/** Where the websocket is. */
export type ConnectionState = 'connecting' | 'live' | 'reconnecting' | 'failed';

export interface ConnectionSnapshot {
  state: ConnectionState;
  /**
   * Bumps on every (re)connection after the first: whatever a view shows
   * from queries may have missed changes while the socket was down, so
   * views re-query when it changes.
   */
  epoch: number;
  /** Bumps when the websocket client is recreated (token change, retry after failure). */
  generation: number;
  /** Why the connection failed (state failed). */
  error: ApiError | null;
}

export interface Sink<T> {
  next(value: T): void;
  error?(err: ApiError): void;
  complete?(): void;
}

export interface ClientOptions {
  httpUrl: string;
  wsUrl: string;
  /** The bearer token, read on every request and (re)connection. */
  token: () => string | null;
  fetch?: typeof fetch;
  /** For tests: a WebSocket implementation. */
  webSocketImpl?: unknown;
  /** For tests: no websocket at all. */
  noWebSocket?: boolean;
}

/** backoff is the wait before reconnect attempt n (0-based): 0.5 s doubling to 10 s, with jitter. */
export function backoff(n: number, random: () => number = Math.random): number {
  const base = Math.min(10_000, 500 * 2 ** Math.min(n, 10));
  return Math.round(base * (0.75 + random() * 0.5));
}

export class ApiClient {
  private ws: WsClient | null = null;
  private snap: ConnectionSnapshot = { state: 'connecting', epoch: 0, generation: 0, error: null };
  private readonly listeners = new Set<() => void>();
  private connectedOnce = false;
  private readonly opts: ClientOptions;

  constructor(opts: ClientOptions) {
    this.opts = opts;
    this.open();
  }

  /** The connection's current state (stable object between changes). */
  getSnapshot = (): ConnectionSnapshot => this.snap;

  /** Calls fn whenever the snapshot changes; returns the unsubscribe. */
  subscribeState = (fn: () => void): (() => void) => {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  };

  private set(patch: Partial<ConnectionSnapshot>) {
    this.snap = { ...this.snap, ...patch };
    for (const fn of this.listeners) fn();
  }

  private authHeader(): Record<string, string> {
    const t = this.opts.token();
    return t ? { Authorization: `Bearer ${t}` } : {};
  }

  private open() {
    if (this.opts.noWebSocket) return;
    this.connectedOnce = false;
    this.ws = createClient({
      url: this.opts.wsUrl,
      lazy: false,
      retryAttempts: Infinity,
      shouldRetry: (e) => !isAuthClose(e),
      retryWait: (n) => new Promise((resolve) => setTimeout(resolve, backoff(n))),
      connectionParams: () => this.authHeader(),
      webSocketImpl: this.opts.webSocketImpl,
      onNonLazyError: (e) => this.set({ state: 'failed', error: toApiError(e) }),
      on: {
        connecting: (isRetry) => this.set({ state: isRetry || this.connectedOnce ? 'reconnecting' : 'connecting' }),
        connected: () => {
          const epoch = this.connectedOnce ? this.snap.epoch + 1 : this.snap.epoch;
          this.connectedOnce = true;
          this.set({ state: 'live', epoch, error: null });
        },
        closed: (e) => {
          if (this.snap.state !== 'failed') this.set({ state: isAuthClose(e) ? 'failed' : 'reconnecting', error: isAuthClose(e) ? toApiError(e) : null });
        },
      },
    });
  }

  /** reconnect drops the websocket and opens a new one (after a token change or a failure). */
  reconnect() {
    const old = this.ws;
    this.ws = null;
    void old?.dispose();
    this.set({ state: 'connecting', error: null, generation: this.snap.generation + 1, epoch: this.snap.epoch + 1 });
    this.open();
  }

  /** request runs a query or mutation over HTTP. */
  async request<R, V>(doc: TypedDocument<R, V>, variables: V, signal?: AbortSignal): Promise<R> {
    const f = this.opts.fetch ?? fetch;
    let res: Response;
    try {
      res = await f(this.opts.httpUrl, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Accept: 'application/json', ...this.authHeader() },
        body: JSON.stringify({ query: doc.query, operationName: doc.operationName, variables }),
        signal,
      });
    } catch (e) {
      if (signal?.aborted) throw e;
      throw new ApiError([{ message: `the API is unreachable: ${(e as Error).message}`, extensions: { code: 'NETWORK' } }]);
    }
    let body: { data?: R | null; errors?: GraphQLErrorShape[] };
    try {
      body = await res.json();
    } catch {
      throw new ApiError([{ message: `unexpected response (HTTP ${res.status})` }], res.status);
    }
    if (body.errors?.length) throw new ApiError(body.errors, res.status);
    if (!res.ok || body.data == null) throw new ApiError([], res.status);
    return body.data;
  }

  /** subscribe starts a subscription over the websocket; the result stops it. */
  subscribe<R, V>(doc: TypedDocument<R, V>, variables: V, sink: Sink<R>): () => void {
    if (!this.ws) return () => {};
    return this.ws.subscribe<R>(
      { query: doc.query, operationName: doc.operationName, variables: variables as Record<string, unknown> },
      {
        next: (v) => {
          if (v.errors?.length) sink.error?.(new ApiError(v.errors as unknown as GraphQLErrorShape[]));
          else if (v.data != null) sink.next(v.data);
        },
        error: (e) => sink.error?.(toApiError(e)),
        complete: () => sink.complete?.(),
      },
    );
  }

  dispose() {
    void this.ws?.dispose();
    this.ws = null;
  }
}

// The server closes an unauthenticated websocket with 4401 (or 4403).
function isAuthClose(e: unknown): boolean {
  return !!e && typeof e === 'object' && 'code' in e && ((e as { code: number }).code === 4401 || (e as { code: number }).code === 4403);
}

/** The URLs of the API this page was served by. */
export function apiUrls(loc: Pick<Location, 'protocol' | 'host'> = window.location) {
  return {
    httpUrl: `${loc.protocol}//${loc.host}/graphql`,
    wsUrl: `${loc.protocol === 'https:' ? 'wss' : 'ws'}://${loc.host}/graphql`,
  };
}

const TOKEN_KEY = 'converge.token';

/** The stored bearer token (shared with the GraphiQL page). */
export function storedToken(): string | null {
  try {
    return window.localStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

export function storeToken(token: string | null) {
  try {
    if (token) window.localStorage.setItem(TOKEN_KEY, token);
    else window.localStorage.removeItem(TOKEN_KEY);
  } catch {
    // private mode: the token lives only as long as the page
  }
}
