// The resources list's state, all of it in the URL: server-side filters
// (kind, phases, label selector, owner), the page (a stack of keyset
// cursors, so Prev works and a page is a shareable link) and the selected
// resource.
import { PhaseValues, type Phase, type ResourcesPageQueryVariables } from '../gql/graphql';

export interface ResourceRef {
  kind: string;
  name: string;
}

export interface ResourceFilters {
  kind: string;
  /** A union: rows in any of these phases. Empty = every phase. */
  phases: Phase[];
  /** A label selector: "key=value,key2=value2" (containment). */
  labels: string;
  /** The owner's id: only its direct children. */
  owner: string;
}

export interface ListState extends ResourceFilters {
  /** Page size. */
  size: number;
  /** The after-cursors of the pages past the first; page K = cursors.length + 1. */
  cursors: string[];
  /** The resource whose detail panel is open. */
  sel: ResourceRef | null;
}

export const PAGE_SIZES = [25, 50, 100, 200] as const;
export const DEFAULT_SIZE = 50;

export const emptyList: ListState = { kind: '', phases: [], labels: '', owner: '', size: DEFAULT_SIZE, cursors: [], sel: null };

const isPhase = (s: string): s is Phase => (PhaseValues as readonly string[]).includes(s);

/** normalizePhases dedups and orders phases as the schema does. */
export function normalizePhases(ps: readonly string[]): Phase[] {
  return PhaseValues.filter((p) => ps.includes(p));
}

/** refString renders a resource reference as kind/name. */
export function refString(r: ResourceRef): string {
  return `${r.kind}/${r.name}`;
}

/** parseRef reads kind/name (the name may itself contain slashes). */
export function parseRef(s: string | null): ResourceRef | null {
  if (!s) return null;
  const i = s.indexOf('/');
  if (i <= 0 || i === s.length - 1) return null;
  return { kind: s.slice(0, i), name: s.slice(i + 1) };
}

/** parseListState reads the list state from a query string; unknown values are dropped. */
export function parseListState(q: URLSearchParams): ListState {
  const size = Number(q.get('size'));
  return {
    kind: q.get('kind') ?? '',
    phases: normalizePhases(q.getAll('phase').filter(isPhase)),
    labels: q.get('labels') ?? '',
    owner: q.get('owner') ?? '',
    size: (PAGE_SIZES as readonly number[]).includes(size) ? size : DEFAULT_SIZE,
    cursors: (q.get('cursors') ?? '').split('.').filter((c) => /^[A-Za-z0-9_-]+$/.test(c)),
    sel: parseRef(q.get('sel')),
  };
}

/** listSearch renders the state as a canonical query string (defaults omitted). */
export function listSearch(s: ListState): URLSearchParams {
  const q = new URLSearchParams();
  if (s.kind) q.set('kind', s.kind);
  for (const p of normalizePhases(s.phases)) q.append('phase', p);
  if (s.labels.trim()) q.set('labels', s.labels.trim());
  if (s.owner) q.set('owner', s.owner);
  if (s.size !== DEFAULT_SIZE) q.set('size', String(s.size));
  if (s.cursors.length) q.set('cursors', s.cursors.join('.'));
  if (s.sel) q.set('sel', refString(s.sel));
  return q;
}

/** withFilters changes filters; any filter change goes back to page 1. */
export function withFilters(s: ListState, patch: Partial<ResourceFilters & { size: number }>): ListState {
  const next = { ...s, ...patch, cursors: [] };
  next.phases = normalizePhases(next.phases);
  return next;
}

/** togglePhase adds or removes one phase chip (a union filter). */
export function togglePhase(s: ListState, p: Phase): ListState {
  return withFilters(s, { phases: s.phases.includes(p) ? s.phases.filter((x) => x !== p) : [...s.phases, p] });
}

export function nextPage(s: ListState, cursor: string): ListState {
  return { ...s, cursors: [...s.cursors, cursor] };
}

export function prevPage(s: ListState): ListState {
  return { ...s, cursors: s.cursors.slice(0, -1) };
}

export function pageNumber(s: ListState): number {
  return s.cursors.length + 1;
}

export type LabelSelector = { ok: true; labels: Record<string, string> | null } | { ok: false; error: string };

/**
 * parseLabelSelector reads "key=value,key2=value2" into the object the
 * server matches by containment. Blank = no selector.
 */
export function parseLabelSelector(text: string): LabelSelector {
  const t = text.trim();
  if (!t) return { ok: true, labels: null };
  const labels: Record<string, string> = {};
  for (const part of t.split(',')) {
    const p = part.trim();
    if (!p) continue;
    const i = p.indexOf('=');
    if (i <= 0) return { ok: false, error: `"${p}" is not key=value` };
    const k = p.slice(0, i).trim();
    const v = p.slice(i + 1).trim();
    if (!k) return { ok: false, error: `"${p}" has an empty key` };
    if (k in labels && labels[k] !== v) return { ok: false, error: `label ${k} is given twice` };
    labels[k] = v;
  }
  return { ok: true, labels };
}

/** formatLabelSelector renders labels as a selector. */
export function formatLabelSelector(labels: Record<string, string>): string {
  return Object.entries(labels).map(([k, v]) => `${k}=${v}`).join(',');
}

/** queryVariables turns the state into the resources query's variables (null when the selector is invalid). */
export function queryVariables(s: ListState): ResourcesPageQueryVariables | null {
  const sel = parseLabelSelector(s.labels);
  if (!sel.ok) return null;
  return {
    kind: s.kind || null,
    phases: s.phases.length ? s.phases : null,
    labels: sel.labels,
    ownerId: s.owner || null,
    first: s.size,
    after: s.cursors.at(-1) ?? null,
  };
}
