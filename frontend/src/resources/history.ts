// The Summary's pictures over time, kept in the page from the live phase
// totals it is pushed (no polling: a sample per push). Pure functions, so
// the charts only draw.
import { PhaseValues, type Phase } from '../gql/graphql';

export interface Sample {
  /** Seconds since the epoch. */
  t: number;
  counts: Record<Phase, number>;
}

/** The most samples kept (older ones drop off the chart). */
export const MAX_SAMPLES = 2000;

export function toSample(t: number, counts: ReadonlyArray<{ phase: Phase; count: number }>): Sample {
  const c = Object.fromEntries(PhaseValues.map((p) => [p, 0])) as Record<Phase, number>;
  for (const x of counts) c[x.phase] = x.count;
  return { t, counts: c };
}

/**
 * mergeSamples puts the server's history (sampled every few seconds before
 * this page opened) before the page's own samples: the local ones newer
 * than the server's last, so a re-read of the history never duplicates.
 */
export function mergeSamples(server: readonly Sample[], local: readonly Sample[]): Sample[] {
  const last = server[server.length - 1]?.t ?? -Infinity;
  return [...server, ...local.filter((s) => s.t > last)];
}

/** One sample of the work queue: pending and in flight by kind. */
export interface QueueSample {
  t: number;
  kinds: ReadonlyArray<{ kind: string; pending: number; leased: number }>;
}

/** QueueSeries is the queue history as chart columns: per kind (busiest first, at most n), pending and in flight. */
export interface QueueSeries {
  t: number[];
  kinds: Array<{ kind: string; pending: number[]; leased: number[] }>;
}

export function queueSeries(h: readonly QueueSample[], n = 6): QueueSeries {
  const peak = new Map<string, number>();
  for (const s of h) for (const k of s.kinds) peak.set(k.kind, Math.max(peak.get(k.kind) ?? 0, k.pending + k.leased));
  const kinds = [...peak.entries()]
    .filter(([, v]) => v > 0)
    .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))
    .slice(0, n)
    .map(([k]) => k);
  return {
    t: h.map((s) => s.t),
    kinds: kinds.map((kind) => {
      const at = h.map((s) => s.kinds.find((k) => k.kind === kind));
      return { kind, pending: at.map((k) => k?.pending ?? 0), leased: at.map((k) => k?.leased ?? 0) };
    }),
  };
}

/** addSample appends s unless it repeats the last counts; the history stays under MAX_SAMPLES. */
export function addSample(h: readonly Sample[], s: Sample): Sample[] {
  const last = h[h.length - 1];
  if (last && PhaseValues.every((p) => last.counts[p] === s.counts[p])) return h as Sample[];
  const out = h.length >= MAX_SAMPLES ? h.slice(h.length - MAX_SAMPLES + 1) : h.slice();
  out.push(s);
  return out;
}

/** Settles per minute: rises in READY and in FAILED, and starts (rises in RECONCILING), per minute bucket. */
export interface Activity {
  minutes: number[];
  ready: number[];
  failed: number[];
  started: number[];
}

/**
 * activity buckets the rises between successive samples by minute: a
 * resource that became READY adds one to ready, and so on. It is a lower
 * bound (two changes between pushes that cancel out are not seen), drawn as
 * such.
 */
export function activity(h: readonly Sample[]): Activity {
  const out: Activity = { minutes: [], ready: [], failed: [], started: [] };
  for (let i = 1; i < h.length; i++) {
    const a = h[i - 1]!;
    const b = h[i]!;
    const m = Math.floor(b.t / 60) * 60;
    if (out.minutes[out.minutes.length - 1] !== m) {
      out.minutes.push(m);
      out.ready.push(0);
      out.failed.push(0);
      out.started.push(0);
    }
    const j = out.minutes.length - 1;
    out.ready[j]! += Math.max(0, b.counts.READY - a.counts.READY);
    out.failed[j]! += Math.max(0, b.counts.FAILED - a.counts.FAILED);
    out.started[j]! += Math.max(0, b.counts.RECONCILING - a.counts.RECONCILING);
  }
  return out;
}

export interface KindCounts {
  kind: string;
  failed: number;
  degraded: number;
  total: number;
}

/** failingMost: the kinds with FAILED or DEGRADED resources, most first (at most n). */
export function failingMost(byKind: ReadonlyArray<{ kind: string; phase: Phase; count: number }>, n = 8): KindCounts[] {
  const m = new Map<string, KindCounts>();
  for (const c of byKind) {
    let k = m.get(c.kind);
    if (!k) m.set(c.kind, (k = { kind: c.kind, failed: 0, degraded: 0, total: 0 }));
    k.total += c.count;
    if (c.phase === 'FAILED') k.failed += c.count;
    if (c.phase === 'DEGRADED') k.degraded += c.count;
  }
  return [...m.values()]
    .filter((k) => k.failed + k.degraded > 0)
    .sort((a, b) => b.failed - a.failed || b.degraded - a.degraded || (a.kind < b.kind ? -1 : 1))
    .slice(0, n);
}
