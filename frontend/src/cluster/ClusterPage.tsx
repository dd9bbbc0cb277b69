// Cluster: the running members, kubectl-get-nodes style, pushed live by the
// clusterMembers subscription on every join, leave and status change.
// Admins drain or kill a member from its row (with a confirm); the member
// acts within about a second and the shard map shows the others re-tile.
// URL: /cluster?open=<member id>
import { Fragment, useState } from 'react';
import { navigate, useLocation, withQuery } from '../app/router';
import { useSession } from '../app/session';
import { useMutation, useSubscriptionValue } from '../client/hooks';
import { ClusterMembersLiveDocument, DrainClusterMemberDocument, KillClusterMemberDocument, type ClusterMemberRowFragment, type MemberRole } from '../gql/graphql';
import { JsonView } from '../json/JsonEditor';
import { age, formatTime } from '../resources/mappers';
import { ConfirmDialog } from '../widgets/Dialog';
import { ErrorBox } from '../widgets/ErrorBox';
import { canDrain, canKill, kindsText, memberName, roleText, shardMap, shardsText, statusTag, statusText, type ShardSegment } from './mappers';

type Action = 'drain' | 'kill';

const segmentColors = ['#4c78a8', '#f58518', '#54a24b', '#b279a2', '#e45756', '#72b7b2', '#eeca3b', '#9d755d'];

/** ShardBar draws one role's tiling of the 256 shards; each segment is a member's span. */
function ShardBar({ role, segs }: { role: MemberRole; segs: ShardSegment[] }) {
  return (
    <div data-testid={`shards-${role}`} style={{ margin: '0.25rem 0 0.75rem' }}>
      <div className="muted" style={{ fontSize: '0.85em' }}>
        {roleText(role)} shards (0-255)
      </div>
      <div role="img" aria-label={`${roleText(role)} shard map: ${segs.map((s) => `${s.name} ${s.lo}-${s.hi - 1}`).join(', ')}`} style={{ display: 'flex', height: '1.4rem', border: '1px solid #ccc', borderRadius: 3, overflow: 'hidden' }}>
        {segs.map((s, i) => (
          <div key={s.id} data-segment={s.id} title={`${s.name}: ${s.lo}-${s.hi - 1}`} style={{ width: `${((s.hi - s.lo) / 256) * 100}%`, background: segmentColors[i % segmentColors.length], color: '#fff', fontSize: '0.75em', lineHeight: '1.4rem', overflow: 'hidden', whiteSpace: 'nowrap', textAlign: 'center', transition: 'width 0.4s' }}>
            {s.name}
          </div>
        ))}
      </div>
    </div>
  );
}

const confirmText: Record<Action, (m: ClusterMemberRowFragment) => string> = {
  drain: (m) => `${memberName(m)} stops claiming at once and its shards re-tile to the other ${roleText(m.role)} members; it finishes or hands back its in-flight work (${m.inFlight} now) within its drain budget, then deregisters and exits. Under Kubernetes its Deployment starts a replacement.`,
  kill: (m) => `${memberName(m)} exits at once without draining, as a crash would. Its peers free its leases and re-tile its shards within about a second; its ${m.inFlight} in-flight tasks run again elsewhere.`,
};

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
  const { canMutate } = useSession();
  const [asking, setAsking] = useState<{ member: ClusterMemberRowFragment; action: Action } | null>(null);
  const [drain, drainState] = useMutation(DrainClusterMemberDocument);
  const [kill, killState] = useMutation(KillClusterMemberDocument);
  const act = (a: { member: ClusterMemberRowFragment; action: Action }) => {
    const run = a.action === 'drain' ? drain : kill;
    run({ id: a.member.id }).then(
      () => setAsking(null),
      () => setAsking(null),
    );
  };
  const tiles = shardMap(members);
  return (
    <section className="page">
      <h1>Cluster</h1>
      <ErrorBox error={error} />
      <ErrorBox error={drainState.error ?? killState.error} />
      {!data && !error ? <p className="muted">Loading…</p> : null}
      {[...tiles.entries()].map(([role, segs]) => (
        <ShardBar key={role} role={role} segs={segs} />
      ))}
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
                <th scope="col" className="num">
                  Workers
                </th>
                <th scope="col">Version</th>
                <th scope="col">Uptime</th>
                <th scope="col">Last heartbeat</th>
                <th scope="col">
                  <span className="sr-only">Runtime config</span>
                </th>
                {canMutate ? (
                  <th scope="col">
                    <span className="sr-only">Actions</span>
                  </th>
                ) : null}
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
                      <span className={`tag ${statusTag(m.status)}`} title={m.requestedBy ? `${m.requestedAction?.toLowerCase()} requested by ${m.requestedBy} at ${formatTime(m.requestedAt)}` : undefined}>
                        {statusText(m.status)}
                      </span>
                    </td>
                    <td>{kindsText(m.kinds)}</td>
                    <td>{shardsText(m)}</td>
                    <td className="num">{m.inFlight}</td>
                    <td className="num">{m.role === 'CONTROL' ? '' : m.workers}</td>
                    <td>{m.version}</td>
                    <td title={formatTime(m.startedAt)}>{age(m.startedAt, now)}</td>
                    <td title={formatTime(m.lastHeartbeat)}>{formatTime(m.lastHeartbeat)}</td>
                    <td>
                      <button type="button" className="link" aria-expanded={open.has(m.id)} aria-controls={`cfg-${m.id}`} onClick={() => toggle(m.id)}>
                        {open.has(m.id) ? 'Hide config' : 'Config'}
                      </button>
                    </td>
                    {canMutate ? (
                      <td style={{ whiteSpace: 'nowrap' }}>
                        <button type="button" onClick={() => setAsking({ member: m, action: 'drain' })} disabled={!canDrain(m.status)} aria-label={`Drain ${memberName(m)}`}>
                          Drain
                        </button>{' '}
                        <button type="button" className="danger" onClick={() => setAsking({ member: m, action: 'kill' })} disabled={!canKill(m.status)} aria-label={`Kill ${memberName(m)}`}>
                          Kill
                        </button>
                      </td>
                    ) : null}
                  </tr>
                  {open.has(m.id) ? (
                    <tr id={`cfg-${m.id}`} className="expanded">
                      <td colSpan={canMutate ? 12 : 11}>
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
      {asking ? (
        <ConfirmDialog
          title={`${asking.action === 'drain' ? 'Drain' : 'Kill'} ${memberName(asking.member)}?`}
          message={<p>{confirmText[asking.action](asking.member)}</p>}
          confirm={asking.action === 'drain' ? 'Drain' : 'Kill'}
          busy={drainState.running || killState.running}
          onCancel={() => setAsking(null)}
          onConfirm={() => act(asking)}
        />
      ) : null}
      <p className="muted">Status and membership are pushed by the server; heartbeat times are as of the last push.</p>
    </section>
  );
}
