// A root's whole subtree, live from subtreeProgress: settled over total, a
// bar of the phases, and the failures named with their reasons as the
// server pushes them (no read per failure).
import { Link } from '../app/router';
import { useSubscriptionValue } from '../client/hooks';
import { PhaseValues, SubtreeProgressDocument, type Phase, type SubtreeProgressSubscription } from '../gql/graphql';
import { ErrorBox } from '../widgets/ErrorBox';
import type { ResourceRef } from './filters';
import { phaseClass, phaseLabel } from './mappers';
import { PhaseBadge } from './PhaseBadge';

export type SubtreeSnapshot = SubtreeProgressSubscription['subtreeProgress'];

/** phaseTotals sums a snapshot's counts by phase, in PhaseValues order, non-zero only. */
export function phaseTotals(p: Pick<SubtreeSnapshot, 'counts'>): { phase: Phase; count: number }[] {
  const n = new Map<Phase, number>();
  for (const c of p.counts) n.set(c.phase, (n.get(c.phase) ?? 0) + c.count);
  return PhaseValues.filter((ph) => (n.get(ph) ?? 0) > 0).map((phase) => ({ phase, count: n.get(phase)! }));
}

/** failureText is what a failure says: "Reason: message" (or whichever there is). */
export function failureText(f: Pick<SubtreeSnapshot['failures'][number], 'reason' | 'message'>): string {
  const parts = [f.reason, f.message].filter((s): s is string => !!s);
  return parts.length ? parts.join(': ') : 'no reason reported';
}

export function SubtreeProgress({ rootId, hrefOf }: { rootId: string; hrefOf: (r: ResourceRef) => string }) {
  const { data, error } = useSubscriptionValue(SubtreeProgressDocument, { rootId });
  const p = data?.subtreeProgress;
  return (
    <div className="subtree" data-testid="subtree-progress">
      <ErrorBox error={error} />
      {p ? <SubtreeView p={p} hrefOf={hrefOf} /> : <p className="muted">Connecting…</p>}
    </div>
  );
}

export function SubtreeView({ p, hrefOf }: { p: SubtreeSnapshot; hrefOf: (r: ResourceRef) => string }) {
  const totals = phaseTotals(p);
  return (
    <>
      <p data-testid="subtree-ready">
        <strong>
          {p.ready}/{p.total}
        </strong>{' '}
        below it READY{p.failureCount ? `, ${p.failureCount} failing` : ''}
      </p>
      {p.total > 0 ? (
        <div className="phase-bar subtree-bar" role="img" aria-label={totals.map((t) => `${t.count} ${phaseLabel(t.phase)}`).join(', ')}>
          {totals.map((t) => (
            <span key={t.phase} className={`bar ${phaseClass(t.phase)}`} style={{ flexGrow: t.count }} title={`${t.count} ${phaseLabel(t.phase)}`} />
          ))}
        </div>
      ) : null}
      {p.failures.length ? (
        <ul className="subtree-failures" aria-label="Failures below it">
          {p.failures.map((f) => (
            <li key={f.id} data-name={f.name} data-phase={f.phase}>
              <Link to={hrefOf(f)}>{`${f.kind}/${f.name}`}</Link> <PhaseBadge phase={f.phase} />
              {f.phase === 'FAILED' ? <span className="tag">{f.failureTerminal ? 'terminal' : 'retrying'}</span> : null}{' '}
              <span className="error-text">{failureText(f)}</span>
            </li>
          ))}
          {p.failureCount > p.failures.length ? <li className="muted">…and {p.failureCount - p.failures.length} more</li> : null}
        </ul>
      ) : null}
    </>
  );
}
