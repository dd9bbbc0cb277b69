// A rollup's subtree in columns (RollupRequest.compact, ChildColumns), read
// back into the per-child summaries a rollup handler is given: the same
// checks, in the same order and with the same messages, as the Go reader
// (workerproto/childcols: Check and Walk).
import { parseJSON } from "./json.js";
import type * as pb from "./gen/converge/worker/v1/worker_pb.js";
import type { ChildSummary } from "./provider.js";

/**
 * checkColumns throws on the first inconsistency in c, naming the column: a
 * column whose length is not one entry (16 bytes for ids) per name, a kind,
 * phase or owner index out of range, an owner naming its own child, an
 * unhealthy list out of order or past the end.
 */
export function checkColumns(c: pb.ChildColumns): void {
  const n = c.names.length;
  if (c.ids.length !== 16 * n) {
    throw new Error(`rollup columns: ids holds ${c.ids.length} bytes for ${n} children (16 each)`);
  }
  if (c.kinds.length !== n) {
    throw new Error(`rollup columns: kinds has ${c.kinds.length} entries for ${n} children`);
  }
  if (c.phases.length !== n) {
    throw new Error(`rollup columns: phases has ${c.phases.length} entries for ${n} children`);
  }
  if (c.owners.length !== n) {
    throw new Error(`rollup columns: owners has ${c.owners.length} entries for ${n} children`);
  }
  if (c.statuses.length !== 0 && c.statuses.length !== n) {
    throw new Error(`rollup columns: statuses has ${c.statuses.length} entries for ${n} children (all or none)`);
  }
  for (let i = 0; i < n; i++) {
    const k = c.kinds[i] as number;
    if (k >= c.kindNames.length) {
      throw new Error(`rollup columns: child ${i} names kind ${k} of ${c.kindNames.length}`);
    }
  }
  for (let i = 0; i < n; i++) {
    const p = c.phases[i] as number;
    if (p >= c.phaseNames.length) {
      throw new Error(`rollup columns: child ${i} names phase ${p} of ${c.phaseNames.length}`);
    }
  }
  for (let i = 0; i < n; i++) {
    const o = c.owners[i] as number;
    if (o > n || o === i + 1) {
      throw new Error(`rollup columns: child ${i} names owner ${o} (0 for the root, 1..${n} for a child other than itself)`);
    }
  }
  let prev = -1;
  for (const u of c.unhealthy) {
    if (u >= n || u <= prev) {
      throw new Error(`rollup columns: unhealthy must list child positions below ${n} in ascending order, got ${u} after ${prev}`);
    }
    prev = u;
  }
}

/**
 * childrenFromColumns checks c (see checkColumns) and, only when it is
 * well formed, spells it out as one summary per descendant, exactly as the
 * ChildSummary list for the same subtree reads. rootId is the rollup's own
 * resource id, the owner that index 0 names. Each id is formatted once; an
 * owner shares its descendant's id string.
 */
export function childrenFromColumns(c: pb.ChildColumns, rootId: string): ChildSummary[] {
  checkColumns(c);
  const n = c.names.length;
  const ids = new Array<string>(n);
  for (let i = 0; i < n; i++) {
    ids[i] = formatUUID(c.ids, 16 * i);
  }
  const withStatus = c.statuses.length > 0;
  const out = new Array<ChildSummary>(n);
  let un = 0;
  for (let i = 0; i < n; i++) {
    const kind = c.kindNames[c.kinds[i] as number] as string;
    const name = c.names[i] as string;
    let healthOk = true;
    if (un < c.unhealthy.length && c.unhealthy[un] === i) {
      healthOk = false;
      un++;
    }
    const o = c.owners[i] as number;
    out[i] = {
      id: ids[i] as string,
      kind,
      name,
      phase: c.phaseNames[c.phases[i] as number] as string,
      healthOk,
      status: withStatus ? parseJSON(c.statuses[i] as Uint8Array, `child ${kind}/${name} status`) : undefined,
      ownerId: o > 0 ? (ids[o - 1] as string) : rootId,
    };
  }
  return out;
}

const hex = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, "0"));

/** formatUUID spells the 16 bytes of b at off as a canonical lowercase uuid. */
function formatUUID(b: Uint8Array, off: number): string {
  const h = (i: number): string => hex[b[off + i] as number] as string;
  return (
    h(0) + h(1) + h(2) + h(3) + "-" +
    h(4) + h(5) + "-" +
    h(6) + h(7) + "-" +
    h(8) + h(9) + "-" +
    h(10) + h(11) + h(12) + h(13) + h(14) + h(15)
  );
}
