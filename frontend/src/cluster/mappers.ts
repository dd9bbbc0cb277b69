// Cluster members as the kubectl-get-nodes-style table shows them. Status
// is shown as served (derived by the server from heartbeat age).
import type { ClusterMemberRowFragment, MemberRole, MemberStatus } from '../gql/graphql';

export function roleText(r: MemberRole): string {
  return r.toLowerCase();
}

export function statusText(s: MemberStatus): string {
  return s === 'READY' ? 'Ready' : 'NotReady';
}

/**
 * shardsText renders the member's shards as an inclusive range ("0-255"):
 * the server reports shardHi as one past the last shard. "—" when it owns none.
 */
export function shardsText(m: Pick<ClusterMemberRowFragment, 'shardLo' | 'shardHi'>): string {
  if (m.shardLo == null || m.shardHi == null || m.shardHi <= m.shardLo) return '—';
  return m.shardHi - 1 === m.shardLo ? String(m.shardLo) : `${m.shardLo}-${m.shardHi - 1}`;
}

/** kindsText renders the kinds a member serves; an empty list means all. */
export function kindsText(kinds: readonly string[]): string {
  return kinds.length ? kinds.join(', ') : '<all>';
}

/** memberName is the short name the table shows: host and pid. */
export function memberName(m: Pick<ClusterMemberRowFragment, 'host' | 'pid'>): string {
  return `${m.host}:${m.pid}`;
}
