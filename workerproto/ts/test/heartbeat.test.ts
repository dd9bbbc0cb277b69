// heartbeats: a heartbeat naming every running task is cut into heartbeats
// that each fit the session's message limit, every task once and in order
// (one heartbeat of 60 refs is ~3 KiB, which a worker at the 1 KiB minimum
// would refuse to send itself, losing its session at every beat).
import assert from "node:assert/strict";
import { test } from "node:test";

import { create, toBinary } from "@bufbuild/protobuf";

import * as pb from "../src/gen/converge/worker/v1/worker_pb.js";
import { heartbeats } from "../src/worker.js";

const size = (tasks: pb.TaskRef[]): number =>
  toBinary(
    pb.WorkStreamRequestSchema,
    create(pb.WorkStreamRequestSchema, { msg: { case: "heartbeat", value: create(pb.HeartbeatSchema, { tasks }) } }),
  ).length;

test("heartbeats fit the session's message limit", () => {
  const refs: pb.TaskRef[] = [];
  for (let i = 0; i < 60; i++) {
    refs.push(
      create(pb.TaskRefSchema, {
        taskId: `${String(i).padStart(36, "0")}|reconcile|${i}`,
        resourceId: String(i).padStart(36, "0"),
        fence: create(pb.FenceSchema, { leaseToken: "all-vm-28555-859545", claimEpoch: BigInt(1e9 + i) }),
      }),
    );
  }
  assert.ok(size(refs) > 1024, "the case needs a heartbeat over the limit");
  const parts = heartbeats(refs, 1024);
  assert.ok(parts.length > 1);
  for (const p of parts) {
    assert.ok(p.length > 0);
    assert.ok(size(p) <= 1024, `a heartbeat of ${size(p)} bytes`);
  }
  assert.deepEqual(parts.flat(), refs);
  assert.deepEqual(heartbeats([], 1024), [[]], "no tasks is one empty beat");
  assert.equal(heartbeats(refs, 16 << 20).length, 1);
});
