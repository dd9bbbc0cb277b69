// The detail panel's event history, newest first: the first page, re-read on
// every change of the resource, and the older pages the user loaded. A
// re-read first page slides towards the newer events, so the events that fell
// off its end are read again (the gap between it and the older pages):
// nothing the panel showed goes missing, and nothing shows twice.
import { useCallback, useEffect, useMemo, useState } from 'react';
import type { ApiClient } from '../client/client';
import { useClient, useQuery, type QueryState } from '../client/hooks';
import { ResourceHistoryDocument, type ResourceHistoryQuery } from '../gql/graphql';
import type { ResourceRef } from './filters';

export type HistoryItem = NonNullable<ResourceHistoryQuery['resource']>['history']['items'][number];

/** The most pages read to fill a gap; past it the older pages are dropped (the user loads them again). */
export const MAX_GAP_PAGES = 10;

interface Older {
  items: HistoryItem[];
  /** The cursor after the last older page (null: the history's end). */
  cursor: string | null;
  /** The first page's cursor the older pages continue from. */
  from: string;
}

export interface EventHistory {
  /** Every event shown, newest first, each once. */
  items: HistoryItem[];
  first: QueryState<ResourceHistoryQuery>;
  /** The cursor the next "Older events" read continues from (null: nothing older). */
  olderCursor: string | null;
  /** onOlder appends the page read after cursor. */
  onOlder: (after: string, items: HistoryItem[], cursor: string | null) => void;
}

export function useEventHistory(target: ResourceRef): EventHistory {
  const client = useClient();
  const first = useQuery(ResourceHistoryDocument, { ...target, after: null });
  const [older, setOlder] = useState<Older | null>(null);
  const page = first.data?.resource?.history;

  useEffect(() => {
    if (!older || !page || page.nextCursor === older.from) return;
    const from = older.from;
    const to = page.nextCursor;
    const ctrl = new AbortController();
    const known = new Set(older.items.map((i) => i.id));
    (to == null ? Promise.resolve(null) : readGap(client, target, to, known, ctrl.signal)).then(
      (gap) => {
        if (ctrl.signal.aborted) return;
        // No gap to fill (the first page reaches the end) or too long a one:
        // the first page alone, "Older events" reads on from it.
        setOlder((o) => (!o || o.from !== from ? o : gap && to != null ? { ...o, items: [...gap, ...o.items], from: to } : null));
      },
      () => {
        if (!ctrl.signal.aborted) setOlder((o) => (o?.from === from ? null : o));
      },
    );
    return () => ctrl.abort();
  }, [page, older?.from]);

  const onOlder = useCallback((after: string, items: HistoryItem[], cursor: string | null) => {
    setOlder((o) => (o && o.cursor !== after ? o : { items: [...(o?.items ?? []), ...items], cursor, from: o?.from ?? after }));
  }, []);

  const items = useMemo(() => {
    const top = page?.items ?? [];
    const seen = new Set(top.map((i) => i.id));
    return [...top, ...(older?.items ?? []).filter((i) => !seen.has(i.id))];
  }, [page, older]);
  return { items, first, olderCursor: older ? older.cursor : (page?.nextCursor ?? null), onOlder };
}

/**
 * readGap reads the history from cursor on until it meets an event already
 * known (the older pages' first), and returns the events before it; null
 * when that takes more than MAX_GAP_PAGES pages.
 */
export async function readGap(client: Pick<ApiClient, 'request'>, target: ResourceRef, cursor: string, known: ReadonlySet<string>, signal?: AbortSignal): Promise<HistoryItem[] | null> {
  const gap: HistoryItem[] = [];
  let after: string | null = cursor;
  for (let n = 0; after != null; n++) {
    if (n === MAX_GAP_PAGES) return null;
    const d: ResourceHistoryQuery = await client.request(ResourceHistoryDocument, { ...target, after }, signal);
    const h = d.resource?.history;
    if (!h) break;
    for (const item of h.items) {
      if (known.has(item.id)) return gap;
      gap.push(item);
    }
    after = h.nextCursor;
  }
  return gap;
}
