// requestFromTask: a rollup's subtree read from columns (RollupRequest.compact)
// is exactly what the ChildSummary list for the same subtree gives, a
// malformed column is refused naming it (the Go reader's checks and
// messages, workerproto/childcols), and a resource without the parts its
// reaction does not read converts.
import assert from "node:assert/strict";
import { test } from "node:test";

import { create } from "@bufbuild/protobuf";

import { requestFromTask } from "../src/convert.js";
import * as pb from "../src/gen/converge/worker/v1/worker_pb.js";
import type { ChildSummary } from "../src/index.js";
import { columnsOf, convertError, rollupTask } from "./columns.js";
import { json } from "./fakebroker.js";

const root = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0";
const owner = "9e8d7c6b-5a49-4837-a625-140f0e0d0c0b";
const id = (n: number): string => `00000000-0000-4000-8000-${n.toString(16).padStart(12, "0")}`;

/**
 * subtree is a rollup's descendants in (kind, name) order: three kinds, four
 * phases, an unhealthy child, owners nested two deep and one owner read
 * after the child it owns (the vpc owns the account listed before it).
 */
function subtree(): pb.ChildSummary[] {
  const c = (n: number, kind: string, name: string, phase: string, healthOk: boolean, owner: string, status: unknown): pb.ChildSummary =>
    create(pb.ChildSummarySchema, { id: id(n), kind, name, phase, healthOk, ownerId: owner, statusJson: status === undefined ? new Uint8Array() : json(status) });
  return [
    c(1, "account", "team-a", "Ready", true, id(4), { accountId: "a-1" }),
    c(2, "account", "team-b", "Failed", false, root, { error: "quota" }),
    c(3, "route", "r-1", "Pending", true, id(1), undefined),
    c(4, "vpc", "main", "Ready", true, root, { cidr: "10.0.0.0/16" }),
    c(5, "vpc", "spare", "Deleting", true, root, {}),
  ];
}

test("columns give exactly what the list gives for the same subtree, with statuses and without", () => {
  for (const withStatus of [true, false]) {
    const list = subtree();
    if (!withStatus) {
      for (const c of list) {
        c.statusJson = new Uint8Array();
      }
    }
    const fromList = requestFromTask(rollupTask(root, { children: list }), undefined).children;
    const cols = columnsOf(root, list, withStatus);
    assert.equal(cols.statuses.length, withStatus ? list.length : 0);
    const fromColumns = requestFromTask(rollupTask(root, { compact: cols }), undefined).children;
    assert.deepEqual(fromColumns, fromList, `withStatus=${withStatus}`);

    const want: ChildSummary[] = [
      { id: id(1), kind: "account", name: "team-a", phase: "Ready", healthOk: true, status: { accountId: "a-1" }, ownerId: id(4) },
      { id: id(2), kind: "account", name: "team-b", phase: "Failed", healthOk: false, status: { error: "quota" }, ownerId: root },
      { id: id(3), kind: "route", name: "r-1", phase: "Pending", healthOk: true, status: undefined, ownerId: id(1) },
      { id: id(4), kind: "vpc", name: "main", phase: "Ready", healthOk: true, status: { cidr: "10.0.0.0/16" }, ownerId: root },
      { id: id(5), kind: "vpc", name: "spare", phase: "Deleting", healthOk: true, status: {}, ownerId: root },
    ];
    if (!withStatus) {
      for (const w of want) {
        w.status = undefined;
      }
    }
    assert.deepEqual(fromColumns, want, `withStatus=${withStatus}`);
  }
});

test("ids are read in RFC 4122 byte order and spelled canonically; an owner shares its descendant's id string", () => {
  const cols = create(pb.ChildColumnsSchema, {
    ids: Uint8Array.from([0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, ...new Uint8Array(15), 0x01]),
    kindNames: ["k"],
    kinds: [0, 0],
    names: ["a", "b"],
    phaseNames: ["Ready"],
    phases: [0, 0],
    owners: [0, 1],
  });
  const children = requestFromTask(rollupTask(root, { compact: cols }), undefined).children ?? [];
  assert.deepEqual(
    children.map((c) => [c.id, c.ownerId]),
    [
      ["00112233-4455-6677-8899-aabbccddeeff", root],
      ["00000000-0000-0000-0000-000000000001", "00112233-4455-6677-8899-aabbccddeeff"],
    ],
  );
});

test("an empty subtree reads as no children, in either form", () => {
  assert.deepEqual(requestFromTask(rollupTask(root, { compact: create(pb.ChildColumnsSchema) }), undefined).children, []);
  assert.deepEqual(requestFromTask(rollupTask(root, {}), undefined).children, []);
});

test("malformed columns are refused, naming the column, before any child is produced", () => {
  const cases: Record<string, { reason: string; mutate: (c: pb.ChildColumns) => void; want: string }> = {
    IdsShort: {
      reason: "ids must hold 16 bytes per child",
      mutate: (c) => (c.ids = c.ids.subarray(1)),
      want: "rollup columns: ids holds 79 bytes for 5 children (16 each)",
    },
    IdsLong: {
      reason: "a 17th byte is as wrong as a missing one",
      mutate: (c) => (c.ids = Uint8Array.from([...c.ids, 0])),
      want: "rollup columns: ids holds 81 bytes for 5 children (16 each)",
    },
    KindsShort: {
      reason: "every child names a kind",
      mutate: (c) => c.kinds.pop(),
      want: "rollup columns: kinds has 4 entries for 5 children",
    },
    PhasesLong: {
      reason: "no phase without a child",
      mutate: (c) => c.phases.push(0),
      want: "rollup columns: phases has 6 entries for 5 children",
    },
    OwnersShort: {
      reason: "every child names its owner",
      mutate: (c) => c.owners.pop(),
      want: "rollup columns: owners has 4 entries for 5 children",
    },
    StatusesPartial: {
      reason: "statuses are carried for all children or none",
      mutate: (c) => c.statuses.pop(),
      want: "rollup columns: statuses has 4 entries for 5 children (all or none)",
    },
    KindOutOfRange: {
      reason: "a kind index past kind_names",
      mutate: (c) => (c.kinds[2] = 3),
      want: "rollup columns: child 2 names kind 3 of 3",
    },
    PhaseOutOfRange: {
      reason: "a phase index past phase_names",
      mutate: (c) => (c.phases[4] = 9),
      want: "rollup columns: child 4 names phase 9 of 4",
    },
    OwnerSelf: {
      reason: "a child does not own itself",
      mutate: (c) => (c.owners[1] = 2),
      want: "rollup columns: child 1 names owner 2 (0 for the root, 1..5 for a child other than itself)",
    },
    OwnerPastEnd: {
      reason: "an owner past the list",
      mutate: (c) => (c.owners[0] = 6),
      want: "rollup columns: child 0 names owner 6 (0 for the root, 1..5 for a child other than itself)",
    },
    UnhealthyRepeated: {
      reason: "unhealthy is strictly ascending: no position twice",
      mutate: (c) => (c.unhealthy = [1, 1]),
      want: "rollup columns: unhealthy must list child positions below 5 in ascending order, got 1 after 1",
    },
    UnhealthyDescending: {
      reason: "unhealthy is ascending",
      mutate: (c) => (c.unhealthy = [3, 1]),
      want: "rollup columns: unhealthy must list child positions below 5 in ascending order, got 1 after 3",
    },
    UnhealthyPastEnd: {
      reason: "unhealthy names only children",
      mutate: (c) => (c.unhealthy = [5]),
      want: "rollup columns: unhealthy must list child positions below 5 in ascending order, got 5 after -1",
    },
  };
  for (const [name, tc] of Object.entries(cases)) {
    const cols = columnsOf(root, subtree(), true);
    tc.mutate(cols);
    const err = convertError(rollupTask(root, { compact: cols }));
    assert.ok(err instanceof Error, `${name}: ${tc.reason}: no error`);
    assert.equal(err.message, tc.want, `${name}: ${tc.reason}`);
  }
});

test("a child status that is not JSON is refused, naming the child", () => {
  const cols = columnsOf(root, subtree(), true);
  cols.statuses[3] = new TextEncoder().encode("{nope");
  const err = convertError(rollupTask(root, { compact: cols }));
  assert.ok(err instanceof Error);
  assert.match(err.message, /^child vpc\/main status is not valid JSON/);
});

test("a resource carrying only its identity (its reaction reads no spec, status, labels or finalizers) converts", () => {
  for (const t of [
    rollupTask(root, { compact: columnsOf(root, subtree(), false) }),
    create(pb.StageTaskSchema, {
      taskId: "t",
      stage: pb.Stage.WORK,
      reaction: "work",
      resource: create(pb.ResourceSchema, { id: root, kind: "k", version: "v1", name: "bare", generation: 3n, ownerId: owner }),
      request: { case: "work", value: create(pb.WorkRequestSchema, { trigger: "specChange" }) },
    }),
  ]) {
    const req = requestFromTask(t, undefined);
    assert.deepEqual(
      { ...req.resource },
      { id: root, kind: "k", version: "v1", name: "bare", labels: {}, spec: undefined, status: undefined, generation: 3, ownerId: owner, finalizers: [] },
      req.stage,
    );
  }
});

test("a react task's request names the watched resource's kind beside the reactor's own", () => {
  const req = requestFromTask(
    create(pb.StageTaskSchema, {
      taskId: "t",
      stage: pb.Stage.REACT,
      reaction: "record",
      resource: create(pb.ResourceSchema, { id: root, kind: "sink", version: "v1", name: "main", generation: 2n }),
      request: {
        case: "react",
        value: create(pb.ReactRequestSchema, {
          transition: "synced", watchKind: "vpc", bindingName: "audit", dedupToken: `${root}:synced:2:audit`, generation: 2n,
        }),
      },
    }),
    undefined,
  );
  assert.equal(req.resource.kind, "sink", "the reactor's kind routes the task");
  assert.deepEqual(req.react, { transition: "synced", watchKind: "vpc", binding: "audit", dedupToken: `${root}:synced:2:audit`, generation: 2 });
});
