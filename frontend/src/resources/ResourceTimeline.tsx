// A resource's timeline in the detail panel: its history events and phase
// transitions on one time axis (the phase as coloured bands, each event a
// tick, warnings in red), from its creation to now. The phases are only
// those the history and the conditions name (a RolledUp event says "A → B",
// a ReconcileFailed one means Failed, a condition's lastTransitionTime dates
// the current Ready or Synced state); between two known points the earlier
// phase is drawn, and a stretch nothing dates is left grey, never guessed.
// LongJson folds a long JSON document (status, spec) behind a summary line.
import { useState } from 'react';
import type { Phase, ResourceDetailQuery, ResourceHistoryQuery } from '../gql/graphql';
import { PhaseValues } from '../gql/graphql';
import { JsonView } from '../json/JsonEditor';
import { formatTime, phaseClass, phaseLabel } from './mappers';

type Detail = NonNullable<ResourceDetailQuery['resource']>;
type HistoryItem = NonNullable<ResourceHistoryQuery['resource']>['history']['items'][number];

export interface Mark {
  at: number;
  phase: Phase;
  why: string;
}

const byLabel = new Map<string, Phase>(PhaseValues.map((p) => [phaseLabel(p).toLowerCase(), p]));
const toPhase = (s: string): Phase | undefined => byLabel.get(s.trim().toLowerCase()) ?? (PhaseValues as readonly string[]).find((p) => p === s.trim().toUpperCase()) as Phase | undefined;

/**
 * phaseMarks reads the dated phase changes out of the history (oldest
 * first) and the resource: RolledUp "A → B" events, ReconcileFailed (Failed),
 * Created (Reconciling), DeletionRequested (Deleting), and the current
 * phase from the Ready condition's last transition.
 */
export function phaseMarks(events: ReadonlyArray<Pick<HistoryItem, 'reason' | 'message' | 'createdAt'>>, d: Pick<Detail, 'phase' | 'createdAt' | 'conditions'>): Mark[] {
  const out: Mark[] = [{ at: Date.parse(d.createdAt), phase: 'RECONCILING', why: 'created' }];
  for (const e of events) {
    const at = Date.parse(e.createdAt);
    if (e.reason === 'RolledUp') {
      const to = toPhase(e.message.split('→').pop() ?? '');
      if (to) out.push({ at, phase: to, why: `${e.reason}: ${e.message}` });
    } else if (e.reason === 'ReconcileFailed') out.push({ at, phase: 'FAILED', why: e.reason });
    else if (e.reason === 'SpecUpdated') out.push({ at, phase: 'RECONCILING', why: e.reason });
    else if (e.reason === 'DeletionRequested') out.push({ at, phase: 'DELETING', why: e.reason });
    else if (e.reason === 'Quarantined') out.push({ at, phase: 'QUARANTINED', why: e.reason });
  }
  const ready = d.conditions.find((c) => c.type === 'Ready');
  if (ready) out.push({ at: Date.parse(ready.lastTransitionTime), phase: d.phase, why: `Ready ${ready.status.toLowerCase()}${ready.reason ? ` (${ready.reason})` : ''}` });
  return out.filter((m) => Number.isFinite(m.at)).sort((a, b) => a.at - b.at);
}

export function ResourceTimeline({ d, events, now = Date.now() }: { d: Detail; events: readonly HistoryItem[]; now?: number }) {
  const oldestFirst = [...events].reverse();
  const marks = phaseMarks(oldestFirst, d);
  const start = Math.min(Date.parse(d.createdAt), ...oldestFirst.map((e) => Date.parse(e.createdAt)));
  const end = Math.max(now, ...oldestFirst.map((e) => Date.parse(e.createdAt)), start + 1000);
  const x = (t: number) => `${(((t - start) / (end - start)) * 100).toFixed(3)}%`;
  const w = (a: number, b: number) => `${(((b - a) / (end - start)) * 100).toFixed(3)}%`;
  return (
    <figure className="timeline" data-testid="timeline" aria-label={`Timeline from ${formatTime(d.createdAt)} to now: ${marks.map((m) => `${phaseLabel(m.phase)} at ${formatTime(new Date(m.at).toISOString())}`).join(', ')}`}>
      <div className="tl-bands" aria-hidden="true">
        {marks.map((m, i) => {
          const until = i + 1 < marks.length ? marks[i + 1]!.at : end;
          return <span key={i} className={`tl-band ${phaseClass(m.phase)}`} style={{ left: x(m.at), width: w(m.at, until) }} title={`${phaseLabel(m.phase)} from ${formatTime(new Date(m.at).toISOString())} (${m.why})`} data-phase={m.phase} />;
        })}
      </div>
      <div className="tl-ticks">
        {oldestFirst.map((e) => (
          <span key={e.id} className={`tl-tick${e.type === 'WARNING' ? ' warn' : ''}`} style={{ left: x(Date.parse(e.createdAt)) }} title={`${formatTime(e.createdAt)} ${e.reason}: ${e.message}`} data-reason={e.reason} />
        ))}
      </div>
      <figcaption className="tl-axis muted">
        <time dateTime={d.createdAt}>{formatTime(d.createdAt)}</time>
        <span>
          {events.length} event{events.length === 1 ? '' : 's'} · now {phaseLabel(d.phase)}
        </span>
        <span>now</span>
      </figcaption>
    </figure>
  );
}

/** Documents longer than this many lines start folded. */
export const FOLD_LINES = 16;

/** LongJson shows a JSON value, folded behind a summary line when it is long. */
export function LongJson({ value, label }: { value: unknown; label: string }) {
  const text = value === null || value === undefined ? '' : JSON.stringify(value, null, 2);
  const lines = text ? text.split('\n').length : 0;
  const [open, setOpen] = useState(false);
  if (lines <= FOLD_LINES) return <JsonView value={value} label={label} />;
  return (
    <details className="long-json" open={open} onToggle={(e) => setOpen((e.target as HTMLDetailsElement).open)}>
      <summary>
        {label}: {lines.toLocaleString('en-US')} lines{open ? '' : ', folded — show'}
      </summary>
      {open ? <JsonView value={value} label={label} /> : null}
    </details>
  );
}
