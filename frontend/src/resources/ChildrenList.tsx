// A composite's direct children: paginated, phase-filterable (server-side),
// and live like the main list.
import { useState } from 'react';
import { Link } from '../app/router';
import { PhaseValues, type Phase } from '../gql/graphql';
import { Pager } from '../widgets/Pager';
import { ErrorBox } from '../widgets/ErrorBox';
import type { ResourceRef } from './filters';
import { normalizePhases } from './filters';
import { phaseClass, phaseLabel } from './mappers';
import { PhaseBadge } from './PhaseBadge';
import { useLivePage } from './useLivePage';

const SIZE = 20;

export function ChildrenList({ ownerId, hrefOf, listHref }: { ownerId: string; hrefOf: (r: ResourceRef) => string; listHref: string }) {
  const [phases, setPhases] = useState<Phase[]>([]);
  const [cursors, setCursors] = useState<string[]>([]);
  const live = useLivePage({ ownerId, phases: phases.length ? phases : null, first: SIZE, after: cursors.at(-1) ?? null });
  const toggle = (p: Phase) => {
    setCursors([]);
    setPhases((ps) => normalizePhases(ps.includes(p) ? ps.filter((x) => x !== p) : [...ps, p]));
  };
  return (
    <div className="children" data-testid="children">
      <fieldset className="chips small">
        <legend>Child phase</legend>
        {PhaseValues.map((p) => (
          <button key={p} type="button" className={`chip ${phaseClass(p)}${phases.includes(p) ? ' on' : ''}`} aria-pressed={phases.includes(p)} onClick={() => toggle(p)}>
            {phaseLabel(p)}
          </button>
        ))}
      </fieldset>
      <ErrorBox error={live.error} />
      {live.loaded && live.page.rows.length === 0 ? <p className="muted">No children{phases.length ? ' in these phases' : ''}.</p> : null}
      <ul className="child-list">
        {live.page.rows.map(({ row, gone }) => (
          <li key={row.id} data-name={row.name} data-phase={row.phase} className={gone ? 'gone' : undefined}>
            <Link to={hrefOf(row)}>{`${row.kind}/${row.name}`}</Link> <PhaseBadge phase={row.phase} />
            {gone ? <span className="tag">deleted</span> : null}
          </li>
        ))}
      </ul>
      <Pager label="Children pages" count={live.page.rows.length} noun="child" plural="children" page={cursors.length + 1} hasPrev={cursors.length > 0} hasNext={!!live.nextCursor} onPrev={() => setCursors((c) => c.slice(0, -1))} onNext={() => live.nextCursor && setCursors((c) => [...c, live.nextCursor!])} />
      <p>
        <Link to={listHref}>Open the children in the resource list</Link>
      </p>
    </div>
  );
}
