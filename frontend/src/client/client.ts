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
   * Bumps on every reconnection, and on a client's first connection when a
   * request was made before it: whatever a view shows from queries may have
   * missed changes while the socket was down (or not yet up, its
   * subscriptions not yet started), so views re-query when it changes.
   */
  epoch: number;
  /** Bumps when the websocket client is recreated (token change, retry after failure). */
  generation: number;
  /** Why the connection failed (state failed). */
  error: ApiError | null;
}

export interface Sink<T> {
  next(value: T): void;
  /**
   * ended: the server ended the subscription with this error while the
   * socket stays up (an error message); otherwise a result carried errors
   * (the subscription goes on) or the connection gave up (the connection
   * state says so).
   */
  error?(err: ApiError, ended: boolean): void;
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

/**
 * One websocket client's own state: whether it connected yet (a later
 * connection is a reconnection) and whether it was disposed (it then opens
 * no socket and its events are ignored).
 */
interface Conn {
  ws: WsClient | null;
  connectedOnce: boolean;
  disposed: boolean;
  /** The retry backoff timer it waits on, if any. */
  wait: ReturnType<typeof setTimeout> | null;
}

/** A promise that never settles: where a disposed client's reconnection waits, for good. */
const never = <T>() => new Promise<T>(() => {});

export class ApiClient {
  private conn: Conn | null = null;
  private snap: ConnectionSnapshot = { state: 'connecting', epoch: 0, generation: 0, error: null };
  private readonly listeners = new Set<() => void>();
  private readonly opts: ClientOptions;
  /** A request was made while the socket was not live (so before its subscriptions ran). */
  private readWhileDown = false;

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
    const conn: Conn = { ws: null, connectedOnce: false, disposed: false, wait: null };
    this.conn = conn; // before createClient, which connects (and reports it) at once
    // Only the current client drives the shared state: a disposed one's late
    // events (its socket's close handshake ending after the new one is live)
    // are ignored.
    const current = () => this.conn === conn && !conn.disposed;
    conn.ws = createClient({
      // A disposed client never reconnects: its backoff and its url wait for
      // good. (A rejection there would escape graphql-ws's connect as an
      // unhandled rejection; a promise that never settles ends its retry
      // loop quietly, and is collected with the client.)
      url: () => (conn.disposed ? never<string>() : this.opts.wsUrl),
      lazy: false,
      retryAttempts: Infinity,
      shouldRetry: (e) => !isAuthClose(e),
      retryWait: (n) =>
        conn.disposed
          ? never<void>()
          : new Promise<void>((resolve) => {
              conn.wait = setTimeout(() => {
                conn.wait = null;
                resolve();
              }, backoff(n));
            }),
      connectionParams: () => this.authHeader(),
      webSocketImpl: this.opts.webSocketImpl,
      onNonLazyError: (e) => {
        if (current()) this.set({ state: 'failed', error: toApiError(e) });
      },
      on: {
        connecting: (isRetry) => {
          if (current()) this.set({ state: isRetry || conn.connectedOnce ? 'reconnecting' : 'connecting' });
        },
        connected: () => {
          if (!current()) return;
          // A reconnection, or a first connection after reads that ran before
          // any subscription could: the views read again.
          const again = conn.connectedOnce || this.readWhileDown;
          const epoch = again ? this.snap.epoch + 1 : this.snap.epoch;
          conn.connectedOnce = true;
          this.readWhileDown = false;
          this.set({ state: 'live', epoch, error: null });
        },
        closed: (e) => {
          if (current() && this.snap.state !== 'failed') this.set({ state: isAuthClose(e) ? 'failed' : 'reconnecting', error: isAuthClose(e) ? toApiError(e) : null });
        },
      },
    });
  }

  /** close disposes the current websocket client for good. */
  private close() {
    const conn = this.conn;
    this.conn = null;
    if (!conn) return;
    conn.disposed = true;
    if (conn.wait) clearTimeout(conn.wait); // its retry then waits for good
    conn.wait = null;
    void conn.ws?.dispose();
  }

  /** reconnect drops the websocket and opens a new one (after a token change or a failure). */
  reconnect() {
    this.close();
    this.set({ state: 'connecting', error: null, generation: this.snap.generation + 1, epoch: this.snap.epoch + 1 });
    this.open();
  }

  /** request runs a query or mutation over HTTP. */
  async request<R, V>(doc: TypedDocument<R, V>, variables: V, signal?: AbortSignal): Promise<R> {
    const f = this.opts.fetch ?? fetch;
    if (this.snap.state !== 'live') this.readWhileDown = true;
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
    const ws = this.conn?.ws;
    if (!ws) return () => {};
    return ws.subscribe<R>(
      { query: doc.query, operationName: doc.operationName, variables: variables as Record<string, unknown> },
      {
        next: (v) => {
          if (v.errors?.length) sink.error?.(new ApiError(v.errors as unknown as GraphQLErrorShape[]), false);
          else if (v.data != null) sink.next(v.data);
        },
        // graphql-ws hands an error message's GraphQL errors as an array.
        error: (e) => sink.error?.(toApiError(e), Array.isArray(e)),
        complete: () => sink.complete?.(),
      },
    );
  }

  dispose() {
    this.close();
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
