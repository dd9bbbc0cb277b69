// The detail panel of one resource: everything the server knows about it,
// re-read whenever resourceChanged reports a change of it.
import { useState } from 'react';
import { Link } from '../app/router';
import { toApiError, type ApiError } from '../client/errors';
import { useClient, useQuery, useSubscription } from '../client/hooks';
import { LongJson, ResourceTimeline } from './ResourceTimeline';
import { ResourceDetailDocument, ResourceHistoryDocument, ResourceWatchDocument } from '../gql/graphql';
import { ErrorBox } from '../widgets/ErrorBox';
import { ChildrenList } from './ChildrenList';
import { DeadLetter } from './DeadLetter';
import { DetailActions } from './DetailActions';
import { useEventHistory, type HistoryItem } from './eventHistory';
import { HistoryDiff } from './HistoryDiff';
import type { ResourceRef } from './filters';
import { failureOf, formatTime, generationState, isComposite, labelEntries, type Detail } from './mappers';
import { PhaseBadge } from './PhaseBadge';
import { SubtreeProgress } from './SubtreeProgress';
import { WaitingBanner } from './WaitingBanner';

export function DetailPanel({ target, onClose, hrefOf, childrenHref }: { target: ResourceRef; onClose: () => void; hrefOf: (r: ResourceRef) => string; childrenHref: (ownerId: string) => string }) {
  const q = useQuery(ResourceDetailDocument, target);
  const history = useEventHistory(target);
  useSubscription(ResourceWatchDocument, target, () => {
    q.refetch();
    history.first.refetch();
  });
  const d = q.data?.resource;
  return (
    <aside className="detail" aria-labelledby="detail-h" data-testid="detail-panel">
      <header className="detail-head">
        <h2 id="detail-h">
          <span className="muted">{target.kind}/</span>
          {target.name}
        </h2>
        {d ? <PhaseBadge phase={d.phase} /> : null}
        <button type="button" className="close" onClick={onClose} aria-label="Close the detail panel">
          ×
        </button>
      </header>
      <ErrorBox error={q.error} />
      {q.data && !d ? <p className="empty">This resource does not exist (any more).</p> : null}
      {!q.data && q.loading ? <p className="muted">Loading…</p> : null}
      {d ? (
        <>
          <DetailActions detail={d} onChanged={q.refetch} />
          <DeadLetter target={target} stamp={`${d.generation}|${d.updatedAt}`} />
          <WaitingBanner target={target} stamp={`${d.updatedAt}/${d.phase}/${d.generation}`} hrefOf={hrefOf} />
          <Facts d={d} hrefOf={hrefOf} />
          <Section title="Conditions">
            <Conditions d={d} />
          </Section>
          <Section title="Labels">
            {labelEntries(d.labels).length ? (
              <ul className="labels">
                {labelEntries(d.labels).map(([k, v]) => (
                  <li key={k} className="label">
                    {k}={v}
                  </li>
                ))}
              </ul>
            ) : (
              <p className="muted">none</p>
            )}
          </Section>
          <Section title="Spec">
            <LongJson value={d.spec} label="Spec" />
          </Section>
          <Section title="Spec history"><HistoryDiff target={target} generation={d.generation} onChanged={q.refetch} /></Section>
          <Section title="Status">
            <LongJson value={d.status} label="Status" />
          </Section>
          <Section title="Dependencies">
            {d.dependencies.length === 0 ? (
              <p className="muted">none</p>
            ) : (
              <ul className="deps">
                {d.dependencies.map((dep) => (
                  <li key={dep.upstream.id}>
                    <Link to={hrefOf(dep.upstream)}>{`${dep.upstream.kind}/${dep.upstream.name}`}</Link> <PhaseBadge phase={dep.upstream.phase} />
                    {dep.valueFlows.length ? (
                      <ul className="flows" aria-label="Value flows">
                        {dep.valueFlows.map((f) => (
                          <li key={`${f.srcField}>${f.depField}`}>
                            status <code>{f.srcField}</code> → spec <code>{f.depField}</code>
                          </li>
                        ))}
                      </ul>
                    ) : null}
                  </li>
                ))}
              </ul>
            )}
          </Section>
          <Section title="Dependents">
            {d.dependents.length === 0 ? (
              <p className="muted">none</p>
            ) : (
              <ul className="deps">
                {d.dependents.map((r) => (
                  <li key={r.id}>
                    <Link to={hrefOf(r)}>{`${r.kind}/${r.name}`}</Link> <PhaseBadge phase={r.phase} />
                  </li>
                ))}
              </ul>
            )}
          </Section>
          {isComposite(d) || d.composedGeneration > 0 ? (
            <Section title="Subtree">
              <SubtreeProgress rootId={d.id} hrefOf={hrefOf} />
            </Section>
          ) : null}
          {isComposite(d) || d.composedGeneration > 0 ? (
            <Section title="Children">
              <ChildrenList ownerId={d.id} hrefOf={hrefOf} listHref={childrenHref(d.id)} />
            </Section>
          ) : null}
          <Section title="Events">
            <ErrorBox error={history.first.error} />
            <ResourceTimeline d={d} events={history.items} />
            <History items={history.items} />
            {history.olderCursor ? <LoadOlder target={target} after={history.olderCursor} onLoaded={history.onOlder} /> : null}
          </Section>
          <Section title="Operations">
            {d.operations.length === 0 ? (
              <p className="muted">none</p>
            ) : (
              <table className="grid compact">
                <thead>
                  <tr>
                    <th scope="col">Verb</th>
                    <th scope="col">State</th>
                    <th scope="col">Created</th>
                    <th scope="col">Result</th>
                  </tr>
                </thead>
                <tbody>
                  {d.operations.map((o) => (
                    <tr key={o.id}>
                      <td>{o.verb}</td>
                      <td>
                        <span className={`tag op-${o.state.toLowerCase()}`}>{o.state}</span>
                      </td>
                      <td>{formatTime(o.createdAt)}</td>
                      <td>{o.error ? <span className="error-text">{o.error}</span> : o.output != null ? <code>{JSON.stringify(o.output)}</code> : '—'}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            )}
          </Section>
        </>
      ) : null}
    </aside>
  );
}

function Section({ title, children }: { title: string; children: React.ReactNode }) {
  const id = `sec-${title.toLowerCase().replace(/\W+/g, '-')}`;
  return (
    <section className="detail-section" aria-labelledby={id} data-section={title}>
      <h3 id={id}>{title}</h3>
      {children}
    </section>
  );
}

function Facts({ d, hrefOf }: { d: Detail; hrefOf: (r: ResourceRef) => string }) {
  const g = generationState(d);
  const failure = failureOf(d);
  return (
    <dl className="facts">
      <dt>Kind</dt>
      <dd>
        {d.kind} <span className="muted">{d.version}</span>
      </dd>
      <dt>Owner</dt>
      <dd>{d.owner ? <Link to={hrefOf(d.owner)}>{`${d.owner.kind}/${d.owner.name}`}</Link> : <span className="muted">none (a root)</span>}</dd>
      {d.root && d.root.id !== d.owner?.id ? (
        <>
          <dt>Root</dt>
          <dd>
            <Link to={hrefOf(d.root)}>{`${d.root.kind}/${d.root.name}`}</Link>
          </dd>
        </>
      ) : null}
      <dt>Generation</dt>
      <dd data-testid="generation">
        {g.generation} · synced {g.synced}
        {g.behind ? <span className="tag warn">behind</span> : null}
      </dd>
      <dt>Health</dt>
      <dd>{d.healthOk ? 'healthy' : <span className="tag warn">unhealthy</span>}</dd>
      <dt>Ready</dt>
      <dd>{d.ready ? 'yes' : 'no'}</dd>
      {failure ? (
        <>
          <dt>Failure</dt>
          <dd data-testid="failure">
            <span className="tag bad">{failure.terminal ? 'terminal: not retried until the spec changes' : 'retrying'}</span>
            {failure.reason ? <strong> {failure.reason}</strong> : null}
            {failure.message ? <span> {failure.message}</span> : null}
          </dd>
        </>
      ) : null}
      {d.deletionRequestedAt ? (
        <>
          <dt>Deletion requested</dt>
          <dd>{formatTime(d.deletionRequestedAt)}</dd>
        </>
      ) : null}
      {d.frozenUntil ? (
        <>
          <dt>Orphaned until</dt>
          <dd>{formatTime(d.frozenUntil)}</dd>
        </>
      ) : null}
      {d.finalizers.length ? (
        <>
          <dt>Finalizers</dt>
          <dd>{d.finalizers.join(', ')}</dd>
        </>
      ) : null}
      <dt>Provider config</dt>
      <dd>
        {d.providerConfig ? (
          <Link to={`/configs?kind=${encodeURIComponent(d.providerConfig.kind)}&name=${encodeURIComponent(d.providerConfig.name)}&sel=${encodeURIComponent(d.providerConfig.name)}`}>
            {d.providerConfig.name}
            {d.providerConfig.isDefault ? ' (default)' : ''}
          </Link>
        ) : (
          <span className="muted">none</span>
        )}
      </dd>
      <dt>Shard</dt>
      <dd>{d.shardId}</dd>
      <dt>Created</dt>
      <dd>{formatTime(d.createdAt)}</dd>
      <dt>Updated</dt>
      <dd>{formatTime(d.updatedAt)}</dd>
      <dt>Id</dt>
      <dd>
        <code>{d.id}</code>
      </dd>
    </dl>
  );
}

function Conditions({ d }: { d: Detail }) {
  if (d.conditions.length === 0) return <p className="muted">none</p>;
  return (
    <table className="grid compact" data-testid="conditions">
      <thead>
        <tr>
          <th scope="col">Type</th>
          <th scope="col">Status</th>
          <th scope="col">Reason</th>
          <th scope="col">Message</th>
          <th scope="col">Since</th>
        </tr>
      </thead>
      <tbody>
        {d.conditions.map((c) => (
          <tr key={c.type} data-condition={c.type}>
            <th scope="row">
              {c.type}
              {c.synthesized ? (
                <span className="muted" title="Derived from the resource's scalars, not stored">
                  {' '}
                  (derived)
                </span>
              ) : null}
            </th>
            <td>
              <span className={`tag cond-${c.status.toLowerCase()}`}>{c.status}</span>
            </td>
            <td>{c.reason ?? '—'}</td>
            <td>{c.message ?? '—'}</td>
            <td>{formatTime(c.lastTransitionTime)}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function History({ items }: { items: HistoryItem[] }) {
  if (items.length === 0) return <p className="muted">none</p>;
  return (
    <ol className="events" data-testid="events">
      {items.map((e) => (
        <li key={e.id} className={e.type === 'WARNING' ? 'warn' : undefined}>
          <time dateTime={e.createdAt}>{formatTime(e.createdAt)}</time> <strong>{e.reason}</strong> {e.message} <span className="muted">by {e.actor}</span>
        </li>
      ))}
    </ol>
  );
}

function LoadOlder({ target, after, onLoaded }: { target: ResourceRef; after: string; onLoaded: (after: string, items: HistoryItem[], cursor: string | null) => void }) {
  const client = useClient();
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  const load = () => {
    setBusy(true);
    client.request(ResourceHistoryDocument, { ...target, after }).then(
      (d) => {
        setBusy(false);
        if (d.resource) onLoaded(after, d.resource.history.items, d.resource.history.nextCursor);
      },
      (e) => {
        setBusy(false);
        setError(toApiError(e));
      },
    );
  };
  return (
    <>
      <ErrorBox error={error} />
      <button type="button" onClick={load} disabled={busy}>
        {busy ? 'Loading…' : 'Older events'}
      </button>
    </>
  );
}
