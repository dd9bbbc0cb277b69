// Test helpers for rollup columns: columnsOf writes a ChildSummary list as
// the broker's columns (the Go writer's layout, workerproto/childcols).
import { create, type MessageInitShape } from "@bufbuild/protobuf";

import { requestFromTask } from "../src/convert.js";
import * as pb from "../src/gen/converge/worker/v1/worker_pb.js";

/** uuidBytes is a canonical uuid's 16 bytes, in RFC 4122 order. */
export function uuidBytes(id: string): Uint8Array {
  const h = id.replaceAll("-", "");
  if (h.length !== 32) {
    throw new Error(`not a uuid: ${id}`);
  }
  return Uint8Array.from({ length: 16 }, (_, i) => parseInt(h.slice(2 * i, 2 * i + 2), 16));
}

/**
 * columnsOf writes children (root's subtree) as columns: kinds and phases
 * named once in order of first use, owners as positions, statuses when
 * withStatus. An owner outside the list throws (as the Go writer's Finish).
 */
export function columnsOf(root: string, children: pb.ChildSummary[], withStatus: boolean): pb.ChildColumns {
  const c = create(pb.ChildColumnsSchema);
  const ids = new Uint8Array(16 * children.length);
  const pos = new Map(children.map((ch, i) => [ch.id, i + 1]));
  const index = (names: string[], s: string): number => {
    const i = names.indexOf(s);
    return i >= 0 ? i : names.push(s) - 1;
  };
  children.forEach((ch, i) => {
    ids.set(uuidBytes(ch.id), 16 * i);
    c.kinds.push(index(c.kindNames, ch.kind));
    c.names.push(ch.name);
    c.phases.push(index(c.phaseNames, ch.phase));
    if (!ch.healthOk) {
      c.unhealthy.push(i);
    }
    const o = ch.ownerId === root ? 0 : pos.get(ch.ownerId);
    if (o === undefined) {
      throw new Error(`child ${ch.id}: its owner ${ch.ownerId} is not in the subtree`);
    }
    c.owners.push(o);
    if (withStatus) {
      c.statuses.push(ch.statusJson);
    }
  });
  c.ids = ids;
  return c;
}

/** rollupTask is a ROLLUP task for root's subtree, its resource carrying only its identity. */
export function rollupTask(root: string, rollup: MessageInitShape<typeof pb.RollupRequestSchema>): pb.StageTask {
  return create(pb.StageTaskSchema, {
    taskId: "t",
    stage: pb.Stage.ROLLUP,
    reaction: "rollup",
    resource: create(pb.ResourceSchema, {
      id: root,
      kind: "k",
      version: "v1",
      name: "bare",
      generation: 3n,
      ownerId: "9e8d7c6b-5a49-4837-a625-140f0e0d0c0b",
    }),
    request: { case: "rollup", value: create(pb.RollupRequestSchema, rollup) },
  });
}

/** convertError is what requestFromTask throws for t (undefined when it converts). */
export function convertError(t: pb.StageTask): unknown {
  try {
    requestFromTask(t, undefined);
  } catch (err) {
    return err;
  }
  return undefined;
}
