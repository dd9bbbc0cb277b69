// Summary: the phase totals and a by-kind breakdown, each pushed live by
// the phaseCounts subscription (the server coalesces and sends only
// changes). Counts are shown exactly as served.
import { Link } from '../app/router';
import { useQuery, useSubscriptionValue } from '../client/hooks';
import { PhaseCountsLiveDocument, PhaseValues, SummaryKindsDocument } from '../gql/graphql';
import { ErrorBox } from '../widgets/ErrorBox';
import { listSearch, emptyList } from './filters';
import { countsInOrder, formatCount, phaseClass, phaseLabel, PHASE_META } from './mappers';

function resourcesLink(kind: string, phase?: (typeof PhaseValues)[number]) {
  return `/resources?${listSearch({ ...emptyList, kind, phases: phase ? [phase] : [] }).toString()}`;
}

function Totals() {
  const { data, error } = useSubscriptionValue(PhaseCountsLiveDocument, { kind: null });
  return (
    <section aria-labelledby="totals-h">
      <h2 id="totals-h">Phases</h2>
      <ErrorBox error={error} />
      <ul className="tiles" data-testid="phase-totals">
        {countsInOrder(data?.phaseCounts).map(({ phase, count }) => (
          <li key={phase} className={`tile ${phaseClass(phase)}`} data-phase={phase}>
            <Link to={resourcesLink('', phase)} title={PHASE_META[phase].help}>
              <span className="tile-count" data-testid={`total-${phase}`}>
                {data ? formatCount(count) : '…'}
              </span>
              <span className="tile-label">{phaseLabel(phase)}</span>
            </Link>
          </li>
        ))}
      </ul>
    </section>
  );
}

function KindRow({ kind }: { kind: string }) {
  const { data } = useSubscriptionValue(PhaseCountsLiveDocument, { kind });
  return (
    <tr data-kind={kind}>
      <th scope="row">
        <Link to={resourcesLink(kind)}>{kind}</Link>
      </th>
      {countsInOrder(data?.phaseCounts).map(({ phase, count }) => (
        <td key={phase} className="num">
          {data ? (
            count ? (
              <Link to={resourcesLink(kind, phase)} className={`count ${phaseClass(phase)}`} aria-label={`${formatCount(count)} ${kind} ${phaseLabel(phase)}`}>
                {formatCount(count)}
              </Link>
            ) : (
              <span className="muted">{formatCount(count)}</span>
            )
          ) : (
            '…'
          )}
        </td>
      ))}
    </tr>
  );
}

export function SummaryPage() {
  const kinds = useQuery(SummaryKindsDocument, {});
  const names = [...new Set((kinds.data?.kinds ?? []).filter((k) => !k.isReactor).map((k) => k.name))];
  return (
    <section className="page">
      <h1>Summary</h1>
      <Totals />
      <section aria-labelledby="bykind-h">
        <h2 id="bykind-h">By kind</h2>
        <ErrorBox error={kinds.error} />
        {kinds.data && names.length === 0 ? (
          <p className="muted">
            No kinds yet: apply a manifest on the <Link to="/kinds">Kinds</Link> page.
          </p>
        ) : (
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
                {names.map((k) => (
                  <KindRow key={k} kind={k} />
                ))}
              </tbody>
            </table>
          </div>
        )}
      </section>
    </section>
  );
}
