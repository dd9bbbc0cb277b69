// A resources page kept live: the query fetches the page, resourceChanged
// (filtered server-side by kind, owner and phases) updates it in place, and
// a RESYNC or a reconnection re-queries it. The subscription opens with the
// query, not after it: events that arrive while a fetch is in flight are
// kept and replayed on the fresh page, so nothing falls between the two (a
// fetch that fails drops them).
import { useMemo, useRef, useState } from 'react';
import type { ApiClient } from '../client/client';
import { useQuery, useSubscription } from '../client/hooks';
import { ResourceRowsChangedDocument, ResourcesPageDocument, type ResourcesPageQuery, type ResourcesPageQueryVariables } from '../gql/graphql';
import { applyRowEvent, cursorKey, livePage, type LivePage, type PagePosition, type RowEvent, type RowFilter } from './live';

interface State {
  /** The query result the page was built from. */
  base: ResourcesPageQuery | undefined;
  page: LivePage;
  /** Events received while a fetch was in flight, replayed on its result. */
  pending: RowEvent[];
}

/**
 * FILL_REQUESTS bounds the reads of one page. The server reads a bounded
 * number of resources per request, so a filtered page (labels with a kind,
 * an owner or phases) may come back short, even empty, with a cursor: the
 * page asks again from that cursor for what it lacks until it is full or
 * the list ends, at most this many times.
 */
export const FILL_REQUESTS = 10;

/** fillPage reads one page of vars.first rows (50 by default), across short server pages. */
export async function fillPage(client: ApiClient, vars: ResourcesPageQueryVariables, signal: AbortSignal): Promise<ResourcesPageQuery> {
  const want = vars.first ?? 50;
  const data = await client.request(ResourcesPageDocument, vars, signal);
  let { items, nextCursor } = data.resources;
  for (let n = 1; nextCursor && items.length < want && n < FILL_REQUESTS; n++) {
    const more = await client.request(ResourcesPageDocument, { ...vars, first: want - items.length, after: nextCursor }, signal);
    items = [...items, ...more.resources.items];
    nextCursor = more.resources.nextCursor;
  }
  return { ...data, resources: { ...data.resources, items, nextCursor } };
}

export function useLivePage(vars: ResourcesPageQueryVariables | null) {
  const q = useQuery(ResourcesPageDocument, vars ?? {}, { skip: vars === null, request: fillPage });
  const filter: RowFilter = useMemo(
    () => ({
      kind: vars?.kind ?? '',
      phases: vars?.phases ?? [],
      labels: (vars?.labels as Record<string, string> | null) ?? null,
      owner: vars?.ownerId ?? '',
    }),
    [vars?.kind, vars?.phases, vars?.labels, vars?.ownerId],
  );
  const pos: PagePosition = {
    first: !vars?.after,
    afterKey: vars?.after ? cursorKey(vars.after) : null,
    last: q.data ? q.data.resources.nextCursor == null : false,
    maxFresh: vars?.first ?? 50,
  };
  const [st, setSt] = useState<State>({ base: undefined, page: livePage([]), pending: [] });
  // A fresh result replaces the live page in the same render (derived state,
  // not an effect), so its rows show in the commit that follows the response.
  if (q.data && q.data !== st.base) {
    let page = livePage(q.data.resources.items);
    for (const ev of st.pending) page = applyRowEvent(page, ev, filter, pos).page;
    setSt({ base: q.data, page, pending: [] });
  } else if (q.error && !q.loading && st.pending.length) {
    // A failed read replays nothing: its events are dropped, not kept until a
    // read succeeds (while the server refuses the query, a label selector
    // say, that would be every event); the next read starts from the
    // server's state anyway.
    setSt({ ...st, pending: [] });
  }
  // Events are kept only while a read is in flight: from the moment it is
  // sent (inFlight: before the render that shows loading, an event may come)
  // until the render that replaces the page with its result (loading: its
  // result may be in before that render).
  const live = useRef({ loading: q.loading, inFlight: q.inFlight, filter, pos, refetch: q.refetch });
  live.current = { loading: q.loading, inFlight: q.inFlight, filter, pos, refetch: q.refetch };
  useSubscription(
    ResourceRowsChangedDocument,
    { kind: vars?.kind ?? null, ownerId: vars?.ownerId ?? null, phases: vars?.phases ?? null },
    (d) => {
      const ev = d.resourceChanged;
      const { filter: f, pos: p, refetch } = live.current;
      const loading = live.current.loading || live.current.inFlight();
      if (ev.type === 'RESYNC') {
        refetch(); // in flight from now on (inFlight), the events that follow kept
        return;
      }
      setSt((s) => ({
        ...s,
        page: s.base ? applyRowEvent(s.page, ev, f, p).page : s.page,
        pending: loading ? [...s.pending, ev] : s.pending,
      }));
    },
    { skip: vars === null },
  );
  return { page: st.page, nextCursor: q.data?.resources.nextCursor ?? null, loading: q.loading, error: q.error, refetch: q.refetch, loaded: !!q.data, fetchedAt: q.data ? q.receivedAt : 0 };
}
