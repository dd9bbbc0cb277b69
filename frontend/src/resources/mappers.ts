// Mapping what the server sent to what the dashboard shows. Nothing here
// computes a phase, a status or a count: those are displayed as served.
import { PhaseValues, type Phase, type PhaseCountsLiveSubscription, type ResourceDetailQuery } from '../gql/graphql';

export const PHASE_META: Record<Phase, { label: string; help: string }> = {
  READY: { label: 'Ready', help: 'Synced and healthy' },
  RECONCILING: { label: 'Reconciling', help: 'A spec change is in flight, or it was never reconciled' },
  DEGRADED: { label: 'Degraded', help: 'Synced, but observed unhealthy (or its children are not ready)' },
  FAILED: { label: 'Failed', help: 'The last reconcile of the live spec hard-failed' },
  DELETING: { label: 'Deleting', help: 'Its teardown tree is being torn down' },
  ORPHANED: { label: 'Orphaned', help: 'Dropped by its composer, inside the grace window' },
  QUARANTINED: { label: 'Quarantined', help: 'Set aside by an operator: frozen, never reaped' },
};

export function phaseLabel(p: Phase): string {
  return PHASE_META[p]?.label ?? p;
}

/** The CSS class that colours a phase. */
export function phaseClass(p: Phase): string {
  return `phase-${p.toLowerCase()}`;
}

export type PhaseCounts = PhaseCountsLiveSubscription['phaseCounts'];

/**
 * countsInOrder lists the served counts in the schema's phase order; a
 * phase the server did not report is null (shown as "—", never guessed).
 */
export function countsInOrder(counts: PhaseCounts | undefined): Array<{ phase: Phase; count: number | null }> {
  const m = new Map((counts ?? []).map((c) => [c.phase, c.count] as const));
  return PhaseValues.map((phase) => ({ phase, count: m.has(phase) ? m.get(phase)! : null }));
}

export function formatCount(n: number | null | undefined): string {
  return n == null ? '—' : n.toLocaleString('en-US');
}

/** Generation against synced generation; behind when the spec is not reconciled yet. */
export function generationState(r: { generation: number; syncedGeneration: number }) {
  return { generation: r.generation, synced: r.syncedGeneration, behind: r.syncedGeneration < r.generation };
}

export type Detail = NonNullable<ResourceDetailQuery['resource']>;

export interface Failure {
  terminal: boolean;
  reason: string | null;
  message: string | null;
}

/**
 * failureOf describes a FAILED resource: terminal (not retried until the
 * spec changes) or retrying, with the reason of its first false condition.
 */
export function failureOf(d: Pick<Detail, 'phase' | 'failureTerminal' | 'conditions'>): Failure | null {
  if (d.phase !== 'FAILED') return null;
  const bad = d.conditions.find((c) => c.status === 'FALSE' && c.type === 'Synced') ?? d.conditions.find((c) => c.status === 'FALSE');
  return { terminal: d.failureTerminal, reason: bad?.reason ?? null, message: bad?.message ?? null };
}

/** The operator verbs the resource's kind declares. */
export function verbsOf(d: Pick<Detail, 'definition'>): string[] {
  return (d.definition?.reactions ?? []).filter((r) => r.trigger === 'OPERATION' && r.verb).map((r) => r.verb!);
}

/** Does the kind compose children (so the resource has a subtree to graph)? */
export function isComposite(d: Pick<Detail, 'definition'>): boolean {
  return (d.definition?.reactions ?? []).some((r) => r.emits.includes('CHILDREN'));
}

/** labelEntries lists a labels object's string entries, by key. */
export function labelEntries(labels: unknown): Array<[string, string]> {
  if (!labels || typeof labels !== 'object' || Array.isArray(labels)) return [];
  return Object.entries(labels as Record<string, unknown>)
    .map(([k, v]) => [k, typeof v === 'string' ? v : JSON.stringify(v)] as [string, string])
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

/** prettyJSON formats a JSON value for display and editing. */
export function prettyJSON(v: unknown): string {
  return v === undefined ? '' : JSON.stringify(v, null, 2);
}

// One formatter for every timestamp: building an Intl formatter per cell is what makes long tables slow.
let timeFormat: Intl.DateTimeFormat | null = null;

/** formatTime renders an instant in the viewer's zone, to the second. */
export function formatTime(iso: string | null | undefined): string {
  if (!iso) return '—';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  timeFormat ??= new Intl.DateTimeFormat('en-GB', { year: 'numeric', month: 'short', day: '2-digit', hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false });
  return timeFormat.format(d);
}

/** age renders how long ago an instant was, relative to now (computed when rendered). */
export function age(iso: string | null | undefined, now: number = Date.now()): string {
  if (!iso) return '—';
  const t = new Date(iso).getTime();
  if (Number.isNaN(t)) return '—';
  let s = Math.max(0, Math.round((now - t) / 1000));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${s % 60 ? ` ${s % 60}s` : ''}`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h${m % 60 ? ` ${m % 60}m` : ''}`;
  s = Math.floor(h / 24);
  return `${s}d`;
}
