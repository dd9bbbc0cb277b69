// Cluster: the running members, kubectl-get-nodes style, pushed live by the
// clusterMembers subscription on every join, leave and status change.
// URL: /cluster?open=<member id>
import { Fragment } from 'react';
import { navigate, useLocation, withQuery } from '../app/router';
import { useSubscriptionValue } from '../client/hooks';
import { ClusterMembersLiveDocument } from '../gql/graphql';
import { JsonView } from '../json/JsonEditor';
import { age, formatTime } from '../resources/mappers';
import { ErrorBox } from '../widgets/ErrorBox';
import { kindsText, memberName, roleText, shardsText, statusText } from './mappers';

export function ClusterPage() {
  const { search } = useLocation();
  const open = new Set(search.getAll('open'));
  const { data, error } = useSubscriptionValue(ClusterMembersLiveDocument, {});
  const now = Date.now();
  const toggle = (id: string) => {
    const q = new URLSearchParams();
    for (const o of open) if (o !== id) q.append('open', o);
    if (!open.has(id)) q.append('open', id);
    navigate(withQuery('/cluster', q), { replace: true });
  };
  const members = data?.clusterMembers ?? [];
  return (
    <section className="page">
      <h1>Cluster</h1>
      <ErrorBox error={error} />
      {!data && !error ? <p className="muted">Loading…</p> : null}
      {data && members.length === 0 ? <p className="empty">No members are registered.</p> : null}
      {members.length ? (
        <div className="table-wrap">
          <table className="grid" data-testid="members">
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Role</th>
                <th scope="col">Status</th>
                <th scope="col">Kinds</th>
                <th scope="col">Shards</th>
                <th scope="col" className="num">
                  In-flight
                </th>
                <th scope="col">Version</th>
                <th scope="col">Uptime</th>
                <th scope="col">Last heartbeat</th>
                <th scope="col">
                  <span className="sr-only">Runtime config</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {members.map((m) => (
                <Fragment key={m.id}>
                  <tr data-member={m.id} data-status={m.status} className={m.status === 'READY' ? undefined : 'not-ready'}>
                    <th scope="row" title={m.id}>
                      {memberName(m)}
                    </th>
                    <td>{roleText(m.role)}</td>
                    <td>
                      <span className={`tag ${m.status === 'READY' ? 'ok' : 'bad'}`}>{statusText(m.status)}</span>
                    </td>
                    <td>{kindsText(m.kinds)}</td>
                    <td>{shardsText(m)}</td>
                    <td className="num">{m.inFlight}</td>
                    <td>{m.version}</td>
                    <td title={formatTime(m.startedAt)}>{age(m.startedAt, now)}</td>
                    <td title={formatTime(m.lastHeartbeat)}>{formatTime(m.lastHeartbeat)}</td>
                    <td>
                      <button type="button" className="link" aria-expanded={open.has(m.id)} aria-controls={`cfg-${m.id}`} onClick={() => toggle(m.id)}>
                        {open.has(m.id) ? 'Hide config' : 'Config'}
                      </button>
                    </td>
                  </tr>
                  {open.has(m.id) ? (
                    <tr id={`cfg-${m.id}`} className="expanded">
                      <td colSpan={10}>
                        <p className="muted">
                          Member <code>{m.id}</code> · started {formatTime(m.startedAt)}
                        </p>
                        <JsonView value={m.config} label={`Runtime config of ${memberName(m)}`} />
                      </td>
                    </tr>
                  ) : null}
                </Fragment>
              ))}
            </tbody>
          </table>
        </div>
      ) : null}
      <p className="muted">Status and membership are pushed by the server; heartbeat times are as of the last push.</p>
    </section>
  );
}
