// Keeping a fetched page live: resourceChanged events update rows in place,
// new rows that belong on the page slot in at their keyset position, and a
// RESYNC asks the caller to re-query. The page's nextCursor is never
// touched, so Next stays exact (no duplicates, no gaps) however many rows
// were slotted in.
import type { Phase, ResourceEventType, ResourceRowFragment } from '../gql/graphql';

export interface RowEntry {
  row: ResourceRowFragment;
  /** Arrived live after the page was fetched. */
  fresh?: boolean;
  /** Deleted since the page was fetched. */
  gone?: boolean;
  /** Changed so that it no longer matches the filters (kept until the next fetch). */
  stale?: boolean;
}

export interface LivePage {
  rows: RowEntry[];
  /** Rows slotted in live. */
  freshCount: number;
  /** More rows arrived than the page takes: the user should reload it. */
  overflow: boolean;
}

export interface RowEvent {
  type: ResourceEventType;
  id: string;
  previousPhase: Phase | null;
  resource: ResourceRowFragment | null;
}

export interface RowFilter {
  kind: string;
  phases: readonly Phase[];
  labels: Record<string, string> | null;
  owner: string;
}

export interface PagePosition {
  /** The page is the first (no cursor): anything newer than its last row belongs here. */
  first: boolean;
  /**
   * A later page's cursor as a keyset position (cursorKey; the previous
   * page's last row): a row between it and the page's first row belongs
   * here. Without it (a cursor that does not decode) only rows from the
   * page's first row down slot in.
   */
  afterKey?: string | null;
  /** The page is the last (no nextCursor): anything older than its first row belongs here too. */
  last: boolean;
  /** The most rows slotted in before the page overflows. */
  maxFresh: number;
}

export function livePage(items: readonly ResourceRowFragment[]): LivePage {
  return { rows: items.map((row) => ({ row })), freshCount: 0, overflow: false };
}

/** matchesFilter: would the server list this row under these filters? */
export function matchesFilter(r: ResourceRowFragment, f: RowFilter): boolean {
  if (f.kind && r.kind !== f.kind) return false;
  if (f.phases.length && !f.phases.includes(r.phase)) return false;
  if (f.owner && r.owner?.id !== f.owner) return false;
  if (f.labels) {
    const l = (r.labels ?? {}) as Record<string, unknown>;
    for (const [k, v] of Object.entries(f.labels)) if (l[k] !== v) return false;
  }
  return true;
}

/**
 * timeKey makes an RFC 3339 UTC instant sortable as a string: the fraction
 * is padded to nanoseconds ("…05.1Z" and "…05.12Z" compare correctly).
 */
export function timeKey(iso: string): string {
  const m = /^(.*T\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$/.exec(iso);
  if (!m) return iso;
  return `${m[1]}.${(m[2] ?? '').padEnd(9, '0')}${m[3]}`;
}

/** listKey is a row's keyset position: newest first, ties by id. */
function listKey(r: ResourceRowFragment): string {
  return `${timeKey(r.createdAt)}|${r.id}`;
}

/**
 * cursorKey decodes a resources cursor into the keyset position of the row
 * it continues after (a listKey), or null when it is not one. The cursor is
 * base64url (no padding) of the tag byte 'k', created_at as big-endian unix
 * microseconds and the 16 bytes of the id (core/store/cursor.go).
 */
export function cursorKey(cursor: string): string | null {
  let bin: string;
  try {
    bin = atob(cursor.replace(/-/g, '+').replace(/_/g, '/'));
  } catch {
    return null;
  }
  if (bin.length !== 25 || bin.charCodeAt(0) !== 0x6b) return null;
  const b = Uint8Array.from(bin, (c) => c.charCodeAt(0));
  const us = new DataView(b.buffer).getBigInt64(1);
  if (us < 0n) return null;
  const at = new Date(Number(us / 1000n));
  if (Number.isNaN(at.getTime())) return null;
  const micros = String(us % 1_000_000n).padStart(6, '0');
  const hex = [...b.subarray(9)].map((x) => x.toString(16).padStart(2, '0')).join('');
  const id = `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
  return `${timeKey(`${at.toISOString().slice(0, 19)}.${micros}Z`)}|${id}`;
}

/** applyRowEvent folds one event into the page; resync = re-query the page. */
export function applyRowEvent(page: LivePage, ev: RowEvent, filter: RowFilter, pos: PagePosition): { page: LivePage; resync: boolean } {
  if (ev.type === 'RESYNC') return { page, resync: true };
  const i = page.rows.findIndex((e) => e.row.id === ev.id);
  if (ev.type === 'DELETED') {
    if (i < 0) return { page, resync: false };
    const rows = page.rows.slice();
    rows[i] = { ...rows[i]!, gone: true };
    return { page: { ...page, rows }, resync: false };
  }
  const r = ev.resource;
  if (!r) return { page, resync: false };
  if (i >= 0) {
    // Events can overtake the page they update (a re-query in flight): never go back in time.
    if (timeKey(r.updatedAt) < timeKey(page.rows[i]!.row.updatedAt)) return { page, resync: false };
    const rows = page.rows.slice();
    rows[i] = { ...rows[i]!, row: r, gone: false, stale: !matchesFilter(r, filter) };
    return { page: { ...page, rows }, resync: false };
  }
  if (!matchesFilter(r, filter)) return { page, resync: false };
  // A row the page does not show: slot it in when its keyset position falls on this page.
  const key = listKey(r);
  const rows = page.rows;
  const firstKey = rows.length ? listKey(rows[0]!.row) : null;
  const lastKey = rows.length ? listKey(rows[rows.length - 1]!.row) : null;
  const below = lastKey === null || key > lastKey || pos.last;
  const above = firstKey === null || key <= firstKey || pos.first || (pos.afterKey != null && key < pos.afterKey);
  if (!below || !above) return { page, resync: false };
  if (page.freshCount >= pos.maxFresh) return { page: page.overflow ? page : { ...page, overflow: true }, resync: false };
  let at = rows.findIndex((e) => listKey(e.row) < key);
  if (at < 0) at = rows.length;
  const next = rows.slice();
  next.splice(at, 0, { row: r, fresh: true });
  return { page: { rows: next, freshCount: page.freshCount + 1, overflow: page.overflow }, resync: false };
}
