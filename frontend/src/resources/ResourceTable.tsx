// One page of resources. Rows are memoized on their data, so a live update
// re-renders only the row that changed.
import { memo, useLayoutEffect, useMemo } from 'react';
import { Link } from '../app/router';
import type { ResourceRowFragment } from '../gql/graphql';
import type { RowEntry } from './live';
import { age, formatTime, generationState, labelEntries } from './mappers';
import { PhaseBadge } from './PhaseBadge';

export const Row = memo(function Row({ entry, selected, href, ownerHref, now }: { entry: RowEntry; selected: boolean; href: string; ownerHref: string | null; now: number }) {
  const r: ResourceRowFragment = entry.row;
  const g = generationState(r);
  const labels = labelEntries(r.labels);
  const cls = [selected ? 'selected' : '', entry.fresh ? 'fresh' : '', entry.gone ? 'gone' : '', entry.stale ? 'stale' : ''].filter(Boolean).join(' ');
  return (
    <tr className={cls || undefined} aria-selected={selected} data-id={r.id} data-name={r.name} data-phase={r.phase}>
      <th scope="row">
        <Link to={href} aria-current={selected ? 'true' : undefined}>
          {r.name}
        </Link>
        {entry.gone ? <span className="tag">deleted</span> : null}
        {entry.stale ? <span className="tag" title="Changed since the page was fetched: it no longer matches the filters">moved</span> : null}
      </th>
      <td>{r.kind}</td>
      <td>
        <PhaseBadge phase={r.phase} />
      </td>
      <td className="num">
        {g.synced}/{g.generation}
        {g.behind ? <span className="tag warn">behind</span> : null}
      </td>
      <td>{r.healthOk ? 'ok' : <span className="tag warn">unhealthy</span>}</td>
      <td>{r.owner && ownerHref ? <Link to={ownerHref}>{`${r.owner.kind}/${r.owner.name}`}</Link> : <span className="muted">root</span>}</td>
      <td className="labels">
        {labels.slice(0, 3).map(([k, v]) => (
          <span key={k} className="label">
            {k}={v}
          </span>
        ))}
        {labels.length > 3 ? <span className="muted">+{labels.length - 3}</span> : null}
      </td>
      <td title={formatTime(r.updatedAt)}>{age(r.updatedAt, now)} ago</td>
    </tr>
  );
});

export function ResourceTable({ rows, selectedId, hrefOf, ownerHrefOf, caption, fetchedAt, measure }: { rows: RowEntry[]; selectedId: string | null; hrefOf: (r: ResourceRowFragment) => string; ownerHrefOf: (r: ResourceRowFragment) => string | null; caption: string; fetchedAt?: number; measure?: string }) {
  // Ages are relative to when the page was fetched, so rows stay memoized.
  const now = useMemo(() => Date.now(), [fetchedAt]);
  useLayoutEffect(() => {
    // How long the fetched page took to render (the dashboard's 50-row budget is 100 ms).
    if (measure && fetchedAt) {
      try {
        performance.measure(measure, { start: fetchedAt, end: performance.now() });
      } catch {
        // older browsers: no measure
      }
    }
  }, [fetchedAt, measure]);
  return (
    <div className="table-wrap">
      <table className="grid resources" data-testid="resource-table">
        <caption className="sr-only">{caption}</caption>
        <thead>
          <tr>
            <th scope="col">Name</th>
            <th scope="col">Kind</th>
            <th scope="col">Phase</th>
            <th scope="col" className="num" title="synced generation / generation">
              Gen
            </th>
            <th scope="col">Health</th>
            <th scope="col">Owner</th>
            <th scope="col">Labels</th>
            <th scope="col">Updated</th>
          </tr>
        </thead>
        <tbody>
          {rows.map((e) => (
            <Row key={e.row.id} entry={e} selected={e.row.id === selectedId} href={hrefOf(e.row)} ownerHref={ownerHrefOf(e.row)} now={now} />
          ))}
        </tbody>
      </table>
    </div>
  );
}
