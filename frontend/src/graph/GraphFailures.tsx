// The graph's list of failures: live from subtreeProgress(rootId), each
// FAILED or DEGRADED resource below the root named with its reason; until
// the first push, the FAILED nodes of the loaded picture. A component of its
// own so a push re-renders this list only, never the graph.
import { Link } from '../app/router';
import { useSubscriptionValue } from '../client/hooks';
import { SubtreeProgressDocument } from '../gql/graphql';
import type { ResourceRef } from '../resources/filters';
import { PhaseBadge } from '../resources/PhaseBadge';
import { failureText } from '../resources/SubtreeProgress';
import type { GNode } from './load';

export function GraphFailures({ rootId, failed, hrefOf }: { rootId: string; failed: readonly GNode[]; hrefOf: (r: ResourceRef) => string }) {
  const { data } = useSubscriptionValue(SubtreeProgressDocument, { rootId });
  const p = data?.subtreeProgress;
  const items = p ? p.failures : failed.slice(0, 50).map((n) => ({ id: n.id, kind: n.kind, name: n.name, phase: n.phase, reason: null, message: null }));
  const more = p ? p.failureCount - p.failures.length : failed.length - items.length;
  return (
    <>
      <h2>Failures</h2>
      {items.length === 0 ? (
        <p className="muted" data-testid="failures">
          none
        </p>
      ) : (
        <ul data-testid="failures" className="graph-failures">
          {items.map((f) => (
            <li key={f.id} data-name={f.name}>
              <Link to={hrefOf(f)}>{`${f.kind}/${f.name}`}</Link>
              {f.phase !== 'FAILED' ? <PhaseBadge phase={f.phase} /> : null}
              {p ? <div className="muted small">{failureText(f)}</div> : null}
            </li>
          ))}
          {more > 0 ? <li className="muted">and {more.toLocaleString('en-US')} more</li> : null}
        </ul>
      )}
    </>
  );
}
