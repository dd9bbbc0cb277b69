// React bindings of the API client: the client in context, the connection
// state, queries that re-run on reconnect, subscriptions and mutations.
import { createContext, useCallback, useContext, useEffect, useMemo, useRef, useState, useSyncExternalStore, type ReactNode } from 'react';
import type { TypedDocument } from '../gql/typed';
import { backoff, type ApiClient, type ConnectionSnapshot } from './client';
import { ApiError, toApiError } from './errors';

const ClientContext = createContext<ApiClient | null>(null);

export function ClientProvider({ client, children }: { client: ApiClient; children: ReactNode }) {
  return <ClientContext.Provider value={client}>{children}</ClientContext.Provider>;
}

export function useClient(): ApiClient {
  const c = useContext(ClientContext);
  if (!c) throw new Error('useClient outside ClientProvider');
  return c;
}

/** The websocket's state; re-renders on every change. */
export function useConnection(): ConnectionSnapshot {
  const c = useClient();
  return useSyncExternalStore(c.subscribeState, c.getSnapshot, c.getSnapshot);
}

/** A stable key for a variables object (its JSON, keys in insertion order). */
export function varsKey(v: unknown): string {
  return JSON.stringify(v ?? null);
}

export interface QueryState<R> {
  data: R | undefined;
  /** performance.now() when data arrived (render-time measurements start here). */
  receivedAt: number;
  error: ApiError | null;
  loading: boolean;
  /** Re-runs the query; calls while one runs coalesce into one more run. */
  refetch: () => void;
  /**
   * Whether a read is on its way now: true from the moment it is sent,
   * before a render shows loading (an event handler between the two sees
   * loading false).
   */
  inFlight: () => boolean;
}

/**
 * useQuery runs a query when its variables change and again after every
 * websocket reconnection (changes may have been missed meanwhile). The data
 * of the previous variables stays until the new result arrives.
 */
export function useQuery<R, V>(
  doc: TypedDocument<R, V>,
  variables: V,
  opts: {
    skip?: boolean;
    /** Reads the result instead of one request of doc (several, say, to fill a page). */
    request?: (client: ApiClient, variables: V, signal: AbortSignal) => Promise<R>;
  } = {},
): QueryState<R> {
  const client = useClient();
  const { epoch } = useConnection();
  const key = varsKey(variables);
  const [state, setState] = useState<{ data: R | undefined; error: ApiError | null; loading: boolean; key: string; receivedAt: number }>({
    data: undefined,
    error: null,
    loading: !opts.skip,
    key,
    receivedAt: 0,
  });
  const run = useRef<{ inflight: boolean; again: boolean; ctrl: AbortController | null; key: string }>({
    inflight: false,
    again: false,
    ctrl: null,
    key,
  });
  const varsRef = useRef(variables);
  varsRef.current = variables;
  const requestRef = useRef(opts.request);
  requestRef.current = opts.request;

  const execute = useCallback(() => {
    const r = run.current;
    if (r.inflight) {
      r.again = true;
      return;
    }
    r.inflight = true;
    r.again = false;
    const ctrl = new AbortController();
    r.ctrl = ctrl;
    const k = r.key;
    setState((s) => (s.loading ? s : { ...s, loading: true }));
    const read = requestRef.current ? requestRef.current(client, varsRef.current, ctrl.signal) : client.request(doc, varsRef.current, ctrl.signal);
    read.then(
      (data) => {
        if (ctrl.signal.aborted) return;
        setState({ data, error: null, loading: false, key: k, receivedAt: performance.now() });
      },
      (e) => {
        if (ctrl.signal.aborted) return;
        setState((s) => ({ ...s, error: toApiError(e), loading: false }));
      },
    ).finally(() => {
      if (ctrl.signal.aborted) return;
      r.inflight = false;
      r.ctrl = null;
      if (r.again) execute();
    });
  }, [client, doc]);

  useEffect(() => {
    if (opts.skip) return;
    const r = run.current;
    // New variables (or a reconnection): drop what is in flight and start over.
    r.ctrl?.abort();
    r.inflight = false;
    r.again = false;
    r.key = key;
    execute();
    return () => {
      r.ctrl?.abort();
      r.inflight = false;
    };
  }, [key, epoch, opts.skip, execute]);

  const inFlight = useCallback(() => run.current.inflight, []);
  return { data: state.data, error: state.error, loading: state.loading, receivedAt: state.receivedAt, refetch: execute, inFlight };
}

/**
 * The errors a subscription is not retried after: the request itself is
 * wrong or not allowed, and asking again changes nothing.
 */
export const FINAL_CODES: ReadonlySet<string> = new Set(['BAD_USER_INPUT', 'NOT_FOUND', 'CONFLICT', 'UNAUTHENTICATED', 'FORBIDDEN']);

/**
 * useSubscription keeps a subscription open while the component is mounted
 * and its variables are the same; onData is always the latest callback.
 * When the server ends it with an error while the socket stays up (an
 * internal error, say), it subscribes again after the reconnect backoff
 * (0.5 s doubling to 10 s, reset by the next push); a reconnection
 * resubscribes anyway.
 */
export function useSubscription<R, V>(
  doc: TypedDocument<R, V>,
  variables: V,
  onData: (data: R) => void,
  opts: { skip?: boolean; onError?: (e: ApiError) => void } = {},
): void {
  const client = useClient();
  const { generation } = useConnection();
  const key = varsKey(variables);
  const cb = useRef({ onData, onError: opts.onError });
  cb.current = { onData, onError: opts.onError };
  const varsRef = useRef(variables);
  varsRef.current = variables;
  useEffect(() => {
    if (opts.skip) return;
    let stop = () => {};
    let retry: ReturnType<typeof setTimeout> | null = null;
    let attempt = 0;
    let closed = false;
    const start = () => {
      retry = null;
      stop = client.subscribe(doc, varsRef.current, {
        next: (d) => {
          attempt = 0;
          cb.current.onData(d);
        },
        error: (e, ended) => {
          cb.current.onError?.(e);
          if (ended && !closed && !retry && !FINAL_CODES.has(e.code)) retry = setTimeout(start, backoff(attempt++));
        },
      });
    };
    start();
    return () => {
      closed = true;
      if (retry) clearTimeout(retry);
      stop();
    };
  }, [client, doc, key, generation, opts.skip]);
}

/** useLatest keeps the last value a subscription pushed. */
export function useSubscriptionValue<R, V>(doc: TypedDocument<R, V>, variables: V, opts: { skip?: boolean } = {}): { data: R | undefined; error: ApiError | null } {
  const [data, setData] = useState<R | undefined>(undefined);
  const [error, setError] = useState<ApiError | null>(null);
  const key = varsKey(variables);
  const last = useRef(key);
  if (last.current !== key) {
    last.current = key;
    // Variables changed: the old value no longer applies.
    if (data !== undefined) setData(undefined);
  }
  useSubscription(doc, variables, (d) => {
    setError(null);
    setData(d);
  }, { skip: opts.skip, onError: setError });
  return { data, error };
}

export interface MutationState {
  running: boolean;
  error: ApiError | null;
}

/** useMutation returns a function that runs the mutation (rejecting with an ApiError) and its state. */
export function useMutation<R, V>(doc: TypedDocument<R, V>): [(variables: V) => Promise<R>, MutationState & { reset: () => void }] {
  const client = useClient();
  const [state, setState] = useState<MutationState>({ running: false, error: null });
  const mounted = useRef(true);
  useEffect(() => {
    mounted.current = true;
    return () => {
      mounted.current = false;
    };
  }, []);
  const run = useCallback(
    async (variables: V) => {
      setState({ running: true, error: null });
      try {
        const r = await client.request(doc, variables);
        if (mounted.current) setState({ running: false, error: null });
        return r;
      } catch (e) {
        const err = toApiError(e);
        if (mounted.current) setState({ running: false, error: err });
        throw err;
      }
    },
    [client, doc],
  );
  const reset = useCallback(() => setState({ running: false, error: null }), []);
  return [run, useMemo(() => ({ ...state, reset }), [state, reset])];
}

/**
 * useRefetchOnPush re-runs a query (refetch) whenever a subscription that
 * announces changes of what it shows pushes — its first push included: the
 * query may have read before a change the subscription already carries.
 * For pages whose filtered, paged view the push does not carry; where it
 * does, use useSubscriptionValue's data.
 */
export function useRefetchOnPush<R, V>(doc: TypedDocument<R, V>, variables: V, refetch: () => void, opts: { skip?: boolean } = {}): void {
  useSubscription(doc, variables, () => refetch(), { skip: opts.skip });
}
