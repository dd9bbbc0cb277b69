// The detail panel's "why" banner: the gates holding the resource, as the
// server computes them (Resource.waitingOn, the scheduler's own predicates
// in the database). Nothing is derived here: the banner shows what the
// server says, re-read when the resource changes and every few seconds
// while something holds it (a claim or a backoff changes no resource row).
import { useEffect, useRef } from 'react';
import { Link } from '../app/router';
import { useQuery } from '../client/hooks';
import { ResourceWaitingOnDocument } from '../gql/graphql';
import { ErrorBox } from '../widgets/ErrorBox';
import type { ResourceRef } from './filters';
import { formatTime } from './mappers';
import { PhaseBadge } from './PhaseBadge';

const POLL_MS = 5000;

export function WaitingBanner({ target, stamp, hrefOf }: { target: ResourceRef; stamp: string; hrefOf: (r: ResourceRef) => string }) {
  const q = useQuery(ResourceWaitingOnDocument, target);
  const { refetch } = q;
  const gates = q.data?.resource?.waitingOn ?? [];
  // Re-read when the resource changed (the first read is the query's own).
  const seen = useRef(stamp);
  useEffect(() => {
    if (stamp !== seen.current) refetch();
    seen.current = stamp;
  }, [stamp, refetch]);
  const holding = gates.length > 0;
  useEffect(() => {
    if (!holding) return undefined;
    const t = setInterval(refetch, POLL_MS);
    return () => clearInterval(t);
  }, [holding, refetch]);
  if (q.error) return <ErrorBox error={q.error} />;
  const first = gates[0];
  if (!first) return null;
  return (
    <div className="waiting-banner" role="status" data-testid="waiting-banner" data-gate={first.gate}>
      <strong>Waiting on</strong>
      <ul>
        {gates.map((g, i) => (
          <li key={`${g.gate}-${i}`} data-gate={g.gate}>
            <span className="tag warn">{g.gate.replace(/_/g, ' ').toLowerCase()}</span> {g.message}
            {g.since ? <span className="muted"> · since {formatTime(g.since)}</span> : null}
            {g.until ? <span className="muted"> · until {formatTime(g.until)}</span> : null}
            {g.blockers.length ? (
              <ul className="blockers">
                {g.blockers.map((b) => (
                  <li key={b.id}>
                    <Link to={hrefOf(b)}>{`${b.kind}/${b.name}`}</Link> <PhaseBadge phase={b.phase} />
                  </li>
                ))}
                {g.blockerCount > g.blockers.length ? <li className="muted">and {g.blockerCount - g.blockers.length} more</li> : null}
              </ul>
            ) : null}
          </li>
        ))}
      </ul>
    </div>
  );
}
