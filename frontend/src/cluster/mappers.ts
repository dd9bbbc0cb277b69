// Cluster members as the kubectl-get-nodes-style table shows them. Status
// is shown as served (derived by the server from heartbeat age).
import type { ClusterMemberRowFragment, MemberRole, MemberStatus } from '../gql/graphql';

export function roleText(r: MemberRole): string {
  return r.toLowerCase();
}

export function statusText(s: MemberStatus): string {
  switch (s) {
    case 'READY':
      return 'Ready';
    case 'DRAINING':
      return 'Draining';
    case 'KILLED':
      return 'Killed';
    default:
      return 'NotReady';
  }
}

/** statusTag is the tag class of a status: ok, warn while draining, bad otherwise. */
export function statusTag(s: MemberStatus): string {
  if (s === 'READY') return 'ok';
  return s === 'DRAINING' ? 'warn' : 'bad';
}

/** canControl: a member may be drained while READY or NOT_READY, killed unless already killed. */
export function canDrain(s: MemberStatus): boolean {
  return s === 'READY' || s === 'NOT_READY';
}

export function canKill(s: MemberStatus): boolean {
  return s !== 'KILLED';
}

export interface ShardSegment {
  id: string;
  name: string;
  lo: number;
  hi: number;
}

/**
 * shardMap is each role's tiling of the 256 logical shards: the members
 * that own a span, in shard order (the re-tile after a join, drain or kill
 * shows as the segments moving).
 */
export function shardMap(members: readonly ClusterMemberRowFragment[]): Map<MemberRole, ShardSegment[]> {
  const out = new Map<MemberRole, ShardSegment[]>();
  for (const m of members) {
    if (m.shardLo == null || m.shardHi == null || m.shardHi <= m.shardLo) continue;
    const segs = out.get(m.role) ?? [];
    segs.push({ id: m.id, name: memberName(m), lo: m.shardLo, hi: m.shardHi });
    out.set(m.role, segs);
  }
  for (const segs of out.values()) segs.sort((a, b) => a.lo - b.lo);
  return out;
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
