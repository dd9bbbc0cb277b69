// Summary: the phase totals, the kinds failing most, the work queue by kind,
// charts of the totals over time and a by-kind breakdown. The first paint
// comes from one read (the summary query), so no count waits for a
// subscription; the phaseCounts subscriptions then keep every count live
// (the server coalesces and sends only changes), and a push re-reads the
// queue and the by-kind counts at most about once a second. The charts start
// from the server's history (samples of the phase totals and of the queue
// every 5 s over the last 10 minutes), then the pushes add to the phases.
// Counts are shown exactly as served.
import { lazy, Suspense, useEffect, useMemo, useRef, useState } from 'react';
import { Link } from '../app/router';
import { useQuery, useSubscriptionValue } from '../client/hooks';
import { PhaseCountsLiveDocument, PhaseValues, SummaryFirstPaintDocument, type Phase, type SummaryFirstPaintQuery } from '../gql/graphql';
import { ErrorBox } from '../widgets/ErrorBox';
import { listSearch, emptyList } from './filters';
import { addSample, failingMost, mergeSamples, toSample, type QueueSample, type Sample } from './history';
import { countsInOrder, formatCount, phaseClass, phaseLabel, PHASE_META, type PhaseCounts } from './mappers';

const SummaryCharts = lazy(() => import('./SummaryCharts'));

/** A push re-reads the summary after this long (coalescing a burst of pushes into one read). */
const REREAD_MS = 900;

type First = SummaryFirstPaintQuery['summary'];

function resourcesLink(kind: string, phase?: Phase) {
  return `/resources?${listSearch({ ...emptyList, kind, phases: phase ? [phase] : [] }).toString()}`;
}

function Totals({ counts }: { counts: PhaseCounts }) {
  return (
    <section aria-labelledby="totals-h">
      <h2 id="totals-h">Phases</h2>
      <ul className="tiles" data-testid="phase-totals">
        {countsInOrder(counts).map(({ phase, count }) => (
          <li key={phase} className={`tile ${phaseClass(phase)}`} data-phase={phase}>
            <Link to={resourcesLink('', phase)} title={PHASE_META[phase].help}>
              <span className="tile-count" data-testid={`total-${phase}`}>
                {formatCount(count)}
              </span>
              <span className="tile-label">{phaseLabel(phase)}</span>
            </Link>
          </li>
        ))}
      </ul>
    </section>
  );
}

/**
 * The most by-kind rows with a phaseCounts subscription of their own; the
 * rows past it show the summary's counts, re-read within about a second of
 * each push of the totals. A websocket holds a bounded number of
 * subscriptions (API_WS_MAX_SUBSCRIPTIONS, 100 by default): one per kind
 * of a large install would take them all and, when every view subscribes
 * again (a new token, a Retry), leave the totals (subscribed after the
 * rows, their parent's effects running last) refused, the page no longer
 * live.
 */
export const MAX_KIND_SUBS = 40;

function KindRow({ kind, seed, live }: { kind: string; seed: PhaseCounts; live: boolean }) {
  const { data } = useSubscriptionValue(PhaseCountsLiveDocument, { kind }, { skip: !live });
  return (
    <tr data-kind={kind}>
      <th scope="row">
        <Link to={resourcesLink(kind)}>{kind}</Link>
      </th>
      {countsInOrder(data?.phaseCounts ?? seed).map(({ phase, count }) => (
        <td key={phase} className="num">
          {count ? (
            <Link to={resourcesLink(kind, phase)} className={`count ${phaseClass(phase)}`} aria-label={`${formatCount(count)} ${kind} ${phaseLabel(phase)}`}>
              {formatCount(count)}
            </Link>
          ) : (
            <span className="muted">{formatCount(count ?? 0)}</span>
          )}
        </td>
      ))}
    </tr>
  );
}

/** Bars: one row per item, its parts as proportional segments of the largest total. */
function Bars({ rows, parts, testid, label }: { rows: Array<{ key: string; to: string; values: number[] }>; parts: Array<{ name: string; cls: string }>; testid: string; label: string }) {
  const max = Math.max(1, ...rows.map((r) => r.values.reduce((s, v) => s + v, 0)));
  return (
    <ul className="hbars" data-testid={testid} aria-label={label}>
      {rows.map((r) => (
        <li key={r.key} data-kind={r.key}>
          <Link to={r.to} className="hbar-label">
            {r.key}
          </Link>
          <span className="hbar-track" aria-hidden="true">
            {r.values.map((v, i) => (v > 0 ? <span key={i} className={`hbar ${parts[i]!.cls}`} style={{ width: `${(v / max) * 100}%` }} /> : null))}
          </span>
          <span className="hbar-value">{r.values.map((v, i) => `${formatCount(v)} ${parts[i]!.name}`).join(' · ')}</span>
        </li>
      ))}
    </ul>
  );
}

function seedFor(first: First, kind: string): PhaseCounts {
  const m = new Map(first.byKind.filter((c) => c.kind === kind).map((c) => [c.phase, c.count]));
  return PhaseValues.map((phase) => ({ phase, count: m.get(phase) ?? 0 }));
}

export function SummaryPage() {
  const first = useQuery(SummaryFirstPaintDocument, {});
  const live = useSubscriptionValue(PhaseCountsLiveDocument, { kind: null });
  const totals = live.data?.phaseCounts ?? first.data?.summary.phaseCounts;

  // The history the charts draw: a sample per push.
  const [samples, setSamples] = useState<Sample[]>([]);
  useEffect(() => {
    if (totals) setSamples((h) => addSample(h, toSample(Date.now() / 1000, totals)));
  }, [totals]);

  // A push re-reads the queue and the by-kind counts, coalesced.
  const reread = useRef<ReturnType<typeof setTimeout> | null>(null);
  const refetch = first.refetch;
  useEffect(() => {
    if (!live.data || reread.current) return;
    reread.current = setTimeout(() => {
      reread.current = null;
      refetch();
    }, REREAD_MS);
  }, [live.data, refetch]);
  useEffect(() => () => void (reread.current && clearTimeout(reread.current)), []);

  const data = first.data;
  // The server's history (its samples from before this page opened) first.
  const history = data?.summary.history;
  const serverSamples = useMemo(() => (history ?? []).map((h) => toSample(Date.parse(h.at) / 1000, h.phaseCounts)), [history]);
  const merged = useMemo(() => mergeSamples(serverSamples, samples), [serverSamples, samples]);
  const queueSamples: QueueSample[] = useMemo(() => (history ?? []).map((h) => ({ t: Date.parse(h.at) / 1000, kinds: h.queue })), [history]);
  const names = [...new Set((data?.kinds ?? []).filter((k) => !k.isReactor).map((k) => k.name))];
  const failing = data ? failingMost(data.summary.byKind) : [];
  const queue = data ? data.summary.queue.filter((q) => q.pending + q.leased > 0) : [];
  return (
    <section className="page">
      <h1>Summary</h1>
      <ErrorBox error={first.error ?? live.error} />
      {!totals ? (
        <p className="muted" data-testid="summary-loading">
          Reading the summary
        </p>
      ) : (
        <>
          <Totals counts={totals} />
          <div className="summary-grid">
            <section aria-labelledby="failing-h">
              <h2 id="failing-h">Kinds failing most</h2>
              {failing.length === 0 ? (
                <p className="muted" data-testid="failing-kinds">
                  No kind has failed or degraded resources.
                </p>
              ) : (
                <Bars
                  testid="failing-kinds"
                  label="Kinds by failed and degraded resources"
                  parts={[
                    { name: 'failed', cls: 'phase-failed' },
                    { name: 'degraded', cls: 'phase-degraded' },
                  ]}
                  rows={failing.map((k) => ({ key: k.kind, to: resourcesLink(k.kind, k.failed ? 'FAILED' : 'DEGRADED'), values: [k.failed, k.degraded] }))}
                />
              )}
            </section>
            <section aria-labelledby="queue-h">
              <h2 id="queue-h">Work queue by kind</h2>
              {queue.length === 0 ? (
                <p className="muted" data-testid="queue">
                  The queue is empty (an estimate from planner statistics).
                </p>
              ) : (
                <Bars
                  testid="queue"
                  label="Work queue by kind: pending and in flight (an estimate)"
                  parts={[
                    { name: 'pending', cls: 'q-pending' },
                    { name: 'in flight', cls: 'q-leased' },
                  ]}
                  rows={queue.map((q) => ({ key: q.kind, to: resourcesLink(q.kind === '(other)' ? '' : q.kind), values: [q.pending, q.leased] }))}
                />
              )}
            </section>
          </div>
          <Suspense fallback={<div className="charts" aria-hidden="true" />}>
            <SummaryCharts samples={merged} queue={queueSamples} />
          </Suspense>
        </>
      )}
      <section aria-labelledby="bykind-h">
        <h2 id="bykind-h">By kind</h2>
        {data && names.length === 0 ? (
          <p className="muted">
            No kinds yet: apply a manifest on the <Link to="/kinds">Kinds</Link> page.
          </p>
        ) : data ? (
          <div className="table-wrap">
            <table className="grid" data-testid="by-kind">
              <thead>
                <tr>
                  <th scope="col">Kind</th>
                  {PhaseValues.map((p) => (
                    <th scope="col" key={p} className="num">
                      {phaseLabel(p)}
                    </th>
                  ))}
                </tr>
              </thead>
              <tbody>
                {names.map((k, i) => (
                  <KindRow key={k} kind={k} seed={seedFor(data.summary, k)} live={i < MAX_KIND_SUBS} />
                ))}
              </tbody>
            </table>
          </div>
        ) : null}
      </section>
    </section>
  );
}
