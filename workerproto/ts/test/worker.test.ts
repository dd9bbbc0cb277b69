// The worker's session semantics against a scripted broker (a real Connect
// server): subscribe and readiness, fences and lease secrets echoed, config
// merge, terminal vs transient, deadlines, the redelivery buffer with
// ResultAck, resume after reconnect, heartbeats, drain.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, test } from "node:test";

import { create, toJson } from "@bufbuild/protobuf";

import { spellComposition } from "../src/composecols.js";
import * as pb from "../src/gen/converge/worker/v1/worker_pb.js";
import { terminal, Worker, type Outcome, type Provider, type Request, type WorkerOptions } from "../src/index.js";
import { columnsOf, rollupTask } from "./columns.js";
import { Credential } from "../src/transport.js";
import { decode, FakeBroker, json, waitUntil, workTask, type Session } from "./fakebroker.js";

const fast: WorkerOptions = { reconnectMinMs: 10, reconnectMaxMs: 50, heartbeatEveryMs: 50, readinessEveryMs: 20, drainTimeoutMs: 5_000 };

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) {
    await c();
  }
});

async function startBroker(o: ConstructorParameters<typeof FakeBroker>[0] = {}): Promise<FakeBroker> {
  const b = new FakeBroker(o);
  await b.listen();
  cleanups.push(() => b.close());
  return b;
}

/** startWorker runs a worker until the test ends (or stop is called). */
function startWorker(url: string, opts: WorkerOptions, ...providers: Provider[]): { worker: Worker; stop: () => Promise<void> } {
  const worker = new Worker(url, { ...fast, ...opts }, providers);
  const ac = new AbortController();
  const done = worker.run(ac.signal);
  let stopped = false;
  const stop = async (): Promise<void> => {
    if (!stopped) {
      stopped = true;
      ac.abort();
      await done;
    }
  };
  cleanups.push(stop);
  return { worker, stop };
}

function provider(kind: string, work: Provider["work"], extra: Partial<Provider> = {}): Provider {
  return { kind: { kind, version: "v1" }, work, ...extra };
}

test("subscribes with its kinds sorted, their readiness, its id, bounds and token; flips readiness live", async () => {
  const b = await startBroker({ token: "tok" });
  let ready = false;
  startWorker(
    b.url,
    { workerId: "w1", maxParallel: 7, version: "1.2.3", token: "tok", maxMessageBytes: 3 << 20 },
    provider("zeta", () => ({})),
    provider("alpha", () => ({}), { ready: () => ready }),
  );
  const s = await b.session(0);
  assert.equal(s.authorization, "Bearer tok");
  assert.equal(s.subscribe.workerId, "w1");
  assert.equal(s.subscribe.maxInFlight, 7);
  assert.equal(s.subscribe.version, "1.2.3");
  assert.equal(s.subscribe.compactRollups, true, "the worker takes a rollup's subtree as columns");
  assert.equal(s.subscribe.maxMessageBytes, BigInt(3 << 20), "the broker holds what it sends to the worker's limit");
  assert.deepEqual(
    s.subscribe.kinds.map((k) => [k.kind?.kind, k.ready]),
    [
      ["alpha", false],
      ["zeta", true],
    ],
  );
  ready = true;
  await waitUntil("a readiness update", () => s.readiness().length > 0);
  assert.deepEqual(
    s.readiness()[0]?.kinds.map((k) => [k.kind?.kind, k.ready]),
    [
      ["alpha", true],
      ["zeta", true],
    ],
  );
});

test("promises keepalives and, when the broker asks, heartbeats at its cadence while idle", async () => {
  const b = await startBroker({ keepaliveMs: 30 });
  startWorker(b.url, { workerId: "w1", heartbeatEveryMs: 3_600_000 }, provider("vpc", () => ({})));
  const s = await b.session(0);
  assert.equal(s.subscribe.keepalive, true);
  await waitUntil("three idle keepalives", () => s.heartbeats().length >= 3);
  assert.ok(s.heartbeats().every((h) => h.tasks.length === 0), "an idle worker's keepalive lists no task");
});

test("the token file is re-read on every call, so a rotated token applies at the next reconnect", async () => {
  const dir = await mkdtemp(join(tmpdir(), "tssdk-"));
  const file = join(dir, "token");
  await writeFile(file, "first\nignored\n");
  const b = await startBroker();
  startWorker(b.url, { tokenFile: file }, provider("k", () => ({})));
  const s0 = await b.session(0);
  assert.equal(s0.authorization, "Bearer first");
  await writeFile(file, "second\n");
  s0.fail();
  const s1 = await b.session(1);
  assert.equal(s1.authorization, "Bearer second");
});

test("a token file with no token is an error naming it, never a call without the credential", async () => {
  const dir = await mkdtemp(join(tmpdir(), "tssdk-"));
  const file = join(dir, "token");
  await writeFile(file, "\n");
  await assert.rejects(new Credential("", file).value(), /WORKER_TOKEN_FILE .*: its first line is empty/);
  await assert.rejects(new Credential("", join(dir, "missing")).value(), /read WORKER_TOKEN_FILE/);
});

test("a result echoes the task's id, fence, resource, stage and lease secret; the config is the attached one merged over the default", async () => {
  const defaults = new Map([
    ["k", create(pb.ProviderConfigSchema, { kind: "k", name: "default", isDefault: true, specJson: json({ a: 1, b: 1 }), dataJson: json({ bundle: "d" }), revision: 4n })],
  ]);
  const b = await startBroker({ defaults });
  const seen: Request[] = [];
  const configs: unknown[] = [];
  startWorker(
    b.url,
    {},
    provider(
      "k",
      (req) => {
        seen.push(req);
        return { status: { got: (req.resource.spec as { x: number }).x }, healthOk: true, conditions: [{ type: "Synced", status: "True" }] };
      },
      { onConfig: (c) => configs.push(c?.spec) },
    ),
  );
  const s = await b.session(0);
  assert.deepEqual(configs, [{ a: 1, b: 1 }], "the default was primed before the session");
  s.task(workTask("t1", "k", "r1", { x: 5 }, { config: create(pb.ProviderConfigSchema, { kind: "k", name: "special", specJson: json({ b: 2 }) }) }));
  await waitUntil("the result", () => s.completes().length === 1);
  const c = s.completes()[0] as pb.StageComplete;
  assert.equal(c.taskId, "t1");
  assert.equal(c.leaseSecret, "secret-t1");
  assert.equal(c.resourceId, "id-r1");
  assert.equal(c.stage, pb.Stage.WORK);
  assert.deepEqual([c.fence?.leaseToken, c.fence?.claimEpoch, c.fence?.manifestGen], ["lease-t1", 7n, 3n]);
  assert.equal(c.result.case, "outcome");
  const out = c.result.value as pb.Outcome;
  assert.deepEqual(decode(out.statusJson), { got: 5 });
  assert.equal(out.healthOk, true);
  assert.equal(out.conditions[0]?.type, "Synced");
  const req = seen[0] as Request;
  assert.deepEqual(req.config, { name: "special", spec: { a: 1, b: 2 }, data: { bundle: "d" } });
  assert.equal(req.trigger, "specChange");
  assert.equal(req.resource.generation, 2);

  // A pushed edit reaches onConfig; an unchanged one does not.
  const edit = create(pb.ProviderConfigSchema, { kind: "k", name: "default", isDefault: true, specJson: json({ a: 9 }), revision: 5n });
  s.send({ case: "config", value: create(pb.ConfigPushSchema, { kind: "k", config: edit }) });
  s.send({ case: "config", value: create(pb.ConfigPushSchema, { kind: "k", config: edit }) });
  s.send({ case: "config", value: create(pb.ConfigPushSchema, { kind: "k", deleted: true }) });
  await waitUntil("the pushes", () => configs.length === 3);
  assert.deepEqual(configs, [{ a: 1, b: 1 }, { a: 9 }, undefined]);
});

test("terminal and transient failures are flagged as such; an unserved kind and a malformed spec are terminal", async () => {
  const b = await startBroker();
  startWorker(
    b.url,
    {},
    provider("k", (req) => {
      if (req.resource.name === "bad") {
        throw terminal(new Error("bad spec"));
      }
      throw new Error("try again");
    }),
  );
  const s = await b.session(0);
  s.task(workTask("t1", "k", "bad", {}));
  s.task(workTask("t2", "k", "flaky", {}));
  s.task(workTask("t3", "other", "x", {}));
  const malformed = workTask("t4", "k", "garbled", {});
  malformed.resource = { ...malformed.resource, specJson: new TextEncoder().encode("{not json") };
  s.task(malformed);
  await waitUntil("four results", () => s.completes().length === 4);
  const byId = new Map(s.completes().map((c) => [c.taskId, c.result.value as pb.TaskError]));
  assert.deepEqual([byId.get("t1")?.message, byId.get("t1")?.terminal], ["bad spec", true]);
  assert.deepEqual([byId.get("t2")?.message, byId.get("t2")?.terminal], ["try again", false]);
  assert.equal(byId.get("t3")?.terminal, true);
  assert.match(byId.get("t3")?.message ?? "", /serves no provider for other\/v1/);
  assert.equal(byId.get("t4")?.terminal, true);
  assert.match(byId.get("t4")?.message ?? "", /resource spec is not valid JSON/);
});

test("a rollup's columns reach the handler as its children; malformed ones fail the task terminally without running it", async () => {
  const b = await startBroker();
  const seen: Request[] = [];
  startWorker(
    b.url,
    {},
    provider("k", (req) => {
      seen.push(req);
      return { status: { children: req.children?.length } };
    }),
  );
  const s = await b.session(0);
  const root = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0";
  const kid = "00000000-0000-4000-8000-000000000001";
  const children = [
    create(pb.ChildSummarySchema, { id: kid, kind: "vpc", name: "main", phase: "Ready", healthOk: true, ownerId: root, statusJson: json({ cidr: "10/8" }) }),
    create(pb.ChildSummarySchema, { id: "00000000-0000-4000-8000-000000000002", kind: "route", name: "r", phase: "Failed", ownerId: kid }),
  ];
  const good = rollupTask(root, { compact: columnsOf(root, children, true) });
  s.task({ ...good, taskId: "good" });
  const cols = columnsOf(root, children, true);
  cols.owners[1] = 2;
  s.task({ ...rollupTask(root, { compact: cols }), taskId: "bad" });
  await waitUntil("both results", () => s.completes().length === 2);
  const byId = new Map(s.completes().map((c) => [c.taskId, c.result]));
  assert.equal(byId.get("good")?.case, "outcome");
  assert.deepEqual(seen.map((r) => r.children), [
    [
      { id: kid, kind: "vpc", name: "main", phase: "Ready", healthOk: true, status: { cidr: "10/8" }, ownerId: root },
      { id: "00000000-0000-4000-8000-000000000002", kind: "route", name: "r", phase: "Failed", healthOk: false, status: undefined, ownerId: kid },
    ],
  ], "the handler ran once, for the well-formed rollup");
  const bad = byId.get("bad")?.value as pb.TaskError;
  assert.deepEqual([bad.message, bad.terminal], ["rollup columns: child 1 names owner 2 (0 for the root, 1..2 for a child other than itself)", true]);
});

/**
 * composer emits two teams' account and VPC, a team's children sharing one
 * labels object, each VPC after its account with a value flow.
 */
const composer = provider("bom", (req) => {
  const out: Outcome = { status: { phase: "composed" }, children: [], edges: [] };
  for (const team of ["t0", "t1"]) {
    const labels = { bom: req.resource.name, team };
    const acct = `${req.resource.name}-${team}-account`;
    const vpc = `${req.resource.name}-${team}-vpc`;
    out.children?.push({ kind: "account", name: acct, labels, spec: { team } }, { kind: "vpc", name: vpc, labels, spec: { cidr: "10.0.0.0/24" } });
    out.edges?.push({ dependent: { kind: "vpc", name: vpc }, dependency: { kind: "account", name: acct }, valueFlows: [{ srcField: "/account_id", depField: "/account_id" }] });
  }
  return out;
});

/** composedLists is composer's composition of bom b1 as children and edges lists, in proto JSON. */
function composedLists(): unknown {
  const out = create(pb.OutcomeSchema, { statusJson: json({ phase: "composed" }) });
  for (const team of ["t0", "t1"]) {
    const labels = { bom: "b1", team };
    const acct = `b1-${team}-account`;
    const vpc = `b1-${team}-vpc`;
    out.children.push(
      create(pb.ChildSchema, { kind: "account", name: acct, labels, specJson: json({ team }) }),
      create(pb.ChildSchema, { kind: "vpc", name: vpc, labels, specJson: json({ cidr: "10.0.0.0/24" }) }),
    );
    out.edges.push(
      create(pb.EdgeSchema, {
        dependentKind: "vpc",
        dependentName: vpc,
        dependencyKind: "account",
        dependencyName: acct,
        valueFlows: [create(pb.ValueFlowSchema, { srcField: "/account_id", depField: "/account_id" })],
      }),
    );
  }
  return toJson(pb.OutcomeSchema, out);
}

for (const batches of [false, true]) {
  test(`a composition goes as lists to a broker that does not take columns and as columns to one that does; an unacked result keeps its columns for the next session (batches: ${batches})`, async () => {
    const b = await startBroker({ acks: true, autoAck: false, batches });
    startWorker(b.url, {}, composer, provider("k", () => ({ status: { plain: true } })));
    const compose = workTask("c1", "bom", "b1", {}, { stage: pb.Stage.COMPOSE, reaction: "compose", request: { case: "compose", value: create(pb.ComposeRequestSchema) } });
    const s0 = await b.session(0);
    s0.tasks(compose, workTask("p1", "k", "plain", {}));
    await waitUntil("both results", () => s0.completes().length === 2);
    const outcome = (s: Session, id: string): pb.Outcome => {
      const c = s.completes().find((x) => x.taskId === id);
      assert.ok(c !== undefined && c.result.case === "outcome", `${id}'s outcome`);
      return c.result.value;
    };
    const lists = outcome(s0, "c1");
    assert.equal(lists.composition, undefined, "no columns for a broker that did not ask for them");
    assert.deepEqual(toJson(pb.OutcomeSchema, lists), composedLists());
    assert.deepEqual(decode(outcome(s0, "p1").statusJson), { plain: true });

    // Unacked, the results go again on the next session, whose broker takes columns.
    b.compositions = true;
    s0.fail();
    const s1 = await b.session(1);
    await waitUntil("both redelivered", () => s1.completes().length === 2);
    const again = outcome(s1, "c1");
    assert.ok(again.composition !== undefined, "columns for a broker that takes them");
    assert.deepEqual([again.children, again.edges], [[], []], "never both forms");
    assert.equal(again.composition.labelSets.length, 2, "a team's children share one label set");
    assert.equal(again.composition.flowSets.length, 1, "the edges share one list of flows");
    const spelledOut = spellComposition(again.composition);
    assert.deepEqual(toJson(pb.OutcomeSchema, create(pb.OutcomeSchema, { statusJson: again.statusJson, ...spelledOut })), composedLists());
    assert.deepEqual(decode(outcome(s1, "p1").statusJson), { plain: true });
    assert.equal(s1.completes().find((c) => c.taskId === "c1")?.leaseSecret, "secret-c1");
    s1.ack("c1", "p1");
  });
}

test("the task deadline aborts the handler's signal and fails the task transiently", async () => {
  const b = await startBroker();
  startWorker(
    b.url,
    {},
    provider(
      "k",
      (_req, signal) =>
        new Promise((_resolve, reject) => {
          signal.addEventListener("abort", () => reject(signal.reason as Error), { once: true });
        }),
    ),
  );
  const s = await b.session(0);
  s.task(workTask("t1", "k", "slow", {}, { taskDeadlineMs: 80n }));
  await waitUntil("the result", () => s.completes().length === 1);
  const e = s.completes()[0]?.result.value as pb.TaskError;
  assert.equal(e.terminal, false);
  assert.match(e.message, /^task deadline of 80ms exceeded/);
});

test("a handler that ignores its deadline is abandoned a grace later: its task is answered and its slot taken by the next task", async () => {
  const b = await startBroker();
  let unstick: () => void = () => {};
  const stuck = new Promise<void>((r) => (unstick = r));
  cleanups.push(async () => unstick());
  startWorker(
    b.url,
    { maxParallel: 1 },
    provider("k", async (req) => {
      if (req.resource.name === "stuck") {
        await stuck; // ignores its signal
      }
      return { status: { ok: true } };
    }),
  );
  const s = await b.session(0);
  s.task(workTask("t1", "k", "stuck", {}, { taskDeadlineMs: 50n }));
  await waitUntil("the hung task's answer", () => s.completes().some((c) => c.taskId === "t1"));
  const e = s.completes().find((c) => c.taskId === "t1")?.result.value as pb.TaskError;
  assert.match(e.message, /^task deadline of 50ms exceeded/);
  assert.equal(e.terminal, false);
  s.task(workTask("t2", "k", "next", {}));
  await waitUntil("the next task's result, in the freed slot", () => s.completes().some((c) => c.taskId === "t2"));
  assert.equal(s.completes().find((c) => c.taskId === "t2")?.result.case, "outcome");
});

test("a task whose deadline passed while it waited for a slot is answered with the deadline failure and never run", async () => {
  const b = await startBroker();
  let release: () => void = () => {};
  const held = new Promise<void>((r) => (release = r));
  const ran: string[] = [];
  startWorker(
    b.url,
    { maxParallel: 1 },
    provider("k", async (req) => {
      ran.push(req.resource.name);
      if (req.resource.name === "busy") {
        await held;
      }
      return {};
    }),
  );
  const s = await b.session(0);
  s.task(workTask("t1", "k", "busy", {}));
  await waitUntil("the busy task running", () => ran.length === 1);
  const sent = Date.now();
  s.task(workTask("t2", "k", "late", {}, { taskDeadlineMs: 100n }));
  // Past the queued task's deadline, measured from before it was sent.
  await new Promise((r) => setTimeout(r, sent + 300 - Date.now()));
  release();
  await waitUntil("the late task's answer", () => s.completes().some((c) => c.taskId === "t2"));
  const e = s.completes().find((c) => c.taskId === "t2")?.result.value as pb.TaskError;
  assert.match(e.message, /^task deadline of 100ms exceeded/);
  assert.equal(e.terminal, false);
  assert.deepEqual(ran, ["busy"], "the late task's handler never ran");
});

test("an unacknowledged result is redelivered on the next session until acked; heartbeats name running tasks, resume names them and the unacked", async () => {
  const b = await startBroker({ acks: true, autoAck: false });
  let release: () => void = () => {};
  const held = new Promise<void>((r) => (release = r));
  startWorker(
    b.url,
    {},
    provider("k", async (req) => {
      if (req.resource.name === "held") {
        await held;
      }
      return { status: { name: req.resource.name } };
    }),
  );
  const s0 = await b.session(0);
  s0.task(workTask("t1", "k", "quick", {}));
  s0.task(workTask("t2", "k", "held", {}));
  await waitUntil("t1's result", () => s0.completes().length === 1);
  await waitUntil("a heartbeat for t2", () => s0.heartbeats().some((h) => h.tasks.some((t) => t.taskId === "t2")));
  const hb = s0.heartbeats().find((h) => h.tasks.length > 0);
  assert.deepEqual(
    hb?.tasks.map((t) => [t.taskId, t.resourceId, t.fence?.claimEpoch, t.leaseSecret]),
    [["t2", "id-held", 7n, ""]],
    "a heartbeat carries no lease secret",
  );

  // No ack, and the broker goes away: the next session resumes t2 (still
  // running) and t1 (its result awaits the ack, so the broker adopts its
  // lease before anyone can claim it afresh), and redelivers t1's result
  // with its lease secret.
  s0.fail();
  const s1 = await b.session(1);
  assert.deepEqual(
    s1.subscribe.resumed.map((r) => [r.taskId, r.resourceId, r.fence?.claimEpoch, r.leaseSecret]),
    [
      ["t2", "id-held", 7n, "secret-t2"],
      ["t1", "id-quick", 7n, "secret-t1"],
    ],
    "each resumed task carries the lease secret it was handed with, so the broker can verify it before adopting its lease",
  );
  await waitUntil("t1 redelivered", () => s1.completes().length === 1);
  assert.equal(s1.completes()[0]?.taskId, "t1");
  assert.equal(s1.completes()[0]?.leaseSecret, "secret-t1");
  s1.ack("t1");
  release();
  await waitUntil("t2's result", () => s1.completes().length === 2);

  // t1 was acked, t2 was not: only t2 is redelivered after the next break.
  s1.fail();
  const s2 = await b.session(2);
  await waitUntil("t2 redelivered", () => s2.completes().length === 1);
  assert.deepEqual(
    s2.completes().map((c) => c.taskId),
    ["t2"],
  );
  assert.deepEqual(
    s2.subscribe.resumed.map((r) => r.taskId),
    ["t2"],
    "t2's result awaits its ack",
  );
  s2.ack("t2");
  s2.fail();
  const s3 = await b.session(3);
  assert.deepEqual(s3.subscribe.resumed, [], "nothing running, nothing unacked");
  await new Promise((r) => setTimeout(r, 200));
  assert.deepEqual(s3.completes(), [], "nothing left to redeliver");
});

test("a redelivery survives the broker dying outright and a successor on the same address", async () => {
  const b = await startBroker({ acks: true, autoAck: false });
  startWorker(b.url, {}, provider("k", () => ({ status: { ok: true } })));
  const s0 = await b.session(0);
  s0.task(workTask("t1", "k", "r", {}));
  await waitUntil("the result", () => s0.completes().length === 1);
  const port = Number(new URL(b.url).port);
  await b.close();
  const successor = new FakeBroker({ acks: true });
  await successor.listen(port);
  cleanups.push(() => successor.close());
  const s = await successor.session(0);
  await waitUntil("the redelivery", () => s.completes().length === 1);
  assert.equal(s.completes()[0]?.taskId, "t1");
});

test("against a broker that takes batches: a batch of tasks runs each, pending results go out together, acks settle each", async () => {
  const b = await startBroker({ acks: true, autoAck: false, batches: true });
  let release: () => void = () => {};
  const held = new Promise<void>((r) => (release = r));
  startWorker(
    b.url,
    {},
    provider("k", async (req) => {
      await held;
      return { status: { name: req.resource.name } };
    }),
  );
  const s0 = await b.session(0);
  assert.equal(s0.subscribe.batches, true, "the worker says it takes batches");
  s0.tasks(workTask("t1", "k", "a", {}), workTask("t2", "k", "b", {}), workTask("t3", "k", "c", {}));
  await waitUntil("all three running", () => s0.heartbeats().some((h) => h.tasks.length === 3));
  release();
  await waitUntil("three results", () => s0.completes().length === 3);
  assert.deepEqual(
    s0.completes().map((c) => c.taskId).sort(),
    ["t1", "t2", "t3"],
  );
  assert.ok(s0.batchSizes().length < 3, `results finished together share a message (${s0.batchSizes().join(",")})`);
  s0.ack("t1", "t3");
  s0.fail();
  const s1 = await b.session(1);
  await waitUntil("t2 redelivered", () => s1.completes().length === 1);
  assert.equal(s1.completes()[0]?.taskId, "t2");
});

test("against a broker that does not ack, a result is done once sent", async () => {
  const b = await startBroker({ acks: false });
  startWorker(b.url, {}, provider("k", () => ({})));
  const s0 = await b.session(0);
  s0.task(workTask("t1", "k", "r", {}));
  await waitUntil("the result", () => s0.completes().length === 1);
  s0.fail();
  const s1 = await b.session(1);
  await new Promise((r) => setTimeout(r, 200));
  assert.deepEqual(s1.completes(), []);
});

test("the buffer keeps at most bufferSize results, dropping the oldest", async () => {
  const b = await startBroker({ acks: true, autoAck: false });
  const { worker } = startWorker(b.url, { bufferSize: 2 }, provider("k", () => ({})));
  const s0 = await b.session(0);
  for (const id of ["t1", "t2", "t3"]) {
    s0.task(workTask(id, "k", id, {}));
  }
  await waitUntil("three results", () => s0.completes().length === 3);
  assert.equal(worker.dropped, 1);
  s0.fail();
  const s1 = await b.session(1);
  await waitUntil("two redelivered", () => s1.completes().length === 2);
  assert.deepEqual(
    s1.completes().map((c) => c.taskId),
    ["t2", "t3"],
  );
  s1.ack("t2", "t3");
});

test("drain: kinds go unready, the running task finishes and is delivered, a new task is refused, run returns", async () => {
  const b = await startBroker({ acks: true, autoAck: false });
  let release: () => void = () => {};
  const held = new Promise<void>((r) => (release = r));
  // The readiness ticker never fires here: the drain itself must tell.
  const { stop } = startWorker(
    b.url,
    { readinessEveryMs: 3_600_000 },
    provider("k", async () => {
      await held;
      return { status: { drained: true } };
    }),
  );
  const s = await b.session(0);
  s.task(workTask("t1", "k", "r", {}));
  await waitUntil("a heartbeat", () => s.heartbeats().length > 0);
  let returned = false;
  const stopped = stop().then(() => (returned = true));
  await waitUntil("the unready update", () => s.readiness().some((r) => r.kinds.every((k) => !k.ready)));
  s.task(workTask("t2", "k", "late", {}));
  await waitUntil("t2 refused", () => s.completes().some((c) => c.taskId === "t2"));
  const refused = s.completes().find((c) => c.taskId === "t2")?.result.value as pb.TaskError;
  assert.deepEqual([refused.message, refused.terminal], ["worker is draining for shutdown", false]);
  s.ack("t2");
  assert.equal(returned, false, "run waits for the running task");
  release();
  await waitUntil("t1 delivered", () => s.completes().some((c) => c.taskId === "t1"));
  s.ack("t1");
  await stopped;
});

test("drain budget spent: the handler's signal aborts; a task it fails is handed back unanswered, one that finishes is delivered", async () => {
  const b = await startBroker({ acks: false });
  let aborted = 0;
  const { stop } = startWorker(
    b.url,
    { drainTimeoutMs: 100 },
    provider(
      "k",
      (req, signal) =>
        new Promise((resolve, reject) => {
          signal.addEventListener(
            "abort",
            () => {
              aborted++;
              if (req.resource.name === "finishes") {
                resolve({ status: { done: true } });
              } else {
                reject(new Error("aborted"));
              }
            },
            { once: true },
          );
        }),
    ),
  );
  const s = await b.session(0);
  s.task(workTask("t1", "k", "r", {}));
  s.task(workTask("t2", "k", "finishes", {}));
  await waitUntil("a heartbeat naming both", () => s.heartbeats().some((h) => h.tasks.length === 2));
  await stop();
  await waitUntil("the stream's end", () => s.ended);
  assert.equal(aborted, 2);
  assert.deepEqual(
    s.completes().map((c) => [c.taskId, c.result.case]),
    [["t2", "outcome"]],
    "the failed task was handed back (no transient failure counted against it); the finished one delivered",
  );
});

for (const batches of [true, false]) {
  test(`a result too large for one message fails its task terminally, naming the limit, and the results after it flow (batches ${batches})`, async () => {
    const b = await startBroker({ acks: true, batches });
    const { worker } = startWorker(
      b.url,
      { maxMessageBytes: 64 << 10 },
      provider("k", (req) => (req.resource.name === "big" ? { status: { blob: "x".repeat(256 << 10) } } : { status: { ok: true } })),
    );
    const s = await b.session(0);
    s.task(workTask("big", "k", "big", {}));
    await waitUntil("the oversized task's answer", () => s.completes().some((c) => c.taskId === "big"), 5_000);
    const c = s.completes().find((x) => x.taskId === "big") as pb.StageComplete;
    assert.equal(c.result.case, "error", "an outcome past the message limit is a failure, not an outcome the stream cannot carry");
    const e = c.result.value as pb.TaskError;
    assert.match(e.message, /WORKER_MAX_MESSAGE_BYTES/);
    assert.equal(e.terminal, true, "the same input makes the same outcome: retrying cannot fix it");
    assert.equal(c.fence?.claimEpoch, 7n, "the failure answers the task's claim");
    s.task(workTask("small", "k", "small", {}));
    await waitUntil("the next task's result", () => s.completes().some((x) => x.taskId === "small"), 5_000);
    assert.equal(b.sessions.length, 1, "the session was never broken");
    await waitUntil("every result acked", () => worker["pending"].length === 0);
  });
}

test("a result over the broker's smaller message limit fails its task terminally, naming the size and the broker's limit", async () => {
  // The broker names its limit in Subscribed; the worker's own is larger.
  // The broker refused the message before: the session broke, and the
  // worker sent the result again on the next one, forever.
  const b = await startBroker({ acks: true, batches: true, maxMessageBytes: 64 << 10 });
  const { worker } = startWorker(
    b.url,
    { maxMessageBytes: 1 << 20 },
    provider("k", (req) => (req.resource.name === "big" ? { status: { blob: "x".repeat(200 << 10) } } : { status: { ok: true } })),
  );
  const s = await b.session(0);
  s.task(workTask("big", "k", "big", {}));
  await waitUntil("the oversized task's answer", () => s.completes().some((c) => c.taskId === "big"), 5_000);
  const c = s.completes().find((x) => x.taskId === "big") as pb.StageComplete;
  assert.equal(c.result.case, "error");
  const e = c.result.value as pb.TaskError;
  assert.match(e.message, /is \d+ bytes, over the 65536-byte limit of one message to the broker \(the broker's WORKER_MAX_MESSAGE_BYTES\)/);
  assert.equal(e.terminal, true);
  s.task(workTask("small", "k", "small", {}));
  await waitUntil("the next task's result", () => s.completes().some((x) => x.taskId === "small"), 5_000);
  assert.equal(b.sessions.length, 1, "the session was never broken");
  await waitUntil("every result acked", () => worker["pending"].length === 0);
});

test("a batch of held results stays within the message limit", async () => {
  // Results that each fit one message, held back together while an ack is
  // awaited, go in batches that fit it too: a batch bounded by its own
  // 1 MiB only failed its send over a smaller limit, forever.
  const b = await startBroker({ acks: true, autoAck: false, batches: true });
  let release: () => void = () => {};
  const released = new Promise<void>((r) => (release = r));
  const { worker } = startWorker(
    b.url,
    { maxMessageBytes: 8 << 10 },
    provider("k", async (req) => {
      if (req.resource.name !== "first") {
        await released;
      }
      return { status: { blob: "x".repeat(3 << 10) } };
    }),
  );
  const s = await b.session(0);
  s.task(workTask("first", "k", "first", {}));
  await waitUntil("the first result", () => s.completes().some((c) => c.taskId === "first"), 5_000);
  const names = ["a", "b", "c", "d", "e", "f"];
  for (const n of names) {
    s.task(workTask(n, "k", n, {}));
  }
  await waitUntil("every task running", () => worker["running"].size === names.length, 5_000);
  release();
  await waitUntil("the held results", () => names.every((n) => s.completes().some((c) => c.taskId === n)), 5_000);
  assert.equal(b.sessions.length, 1, "the batches never broke the session");
  s.ack("first", ...names);
  await waitUntil("every result acked", () => worker["pending"].length === 0);
});

test("an idle worker's drain ends at once, leaving nothing that keeps its process alive", async () => {
  // A worker process with nothing in flight exits as soon as its session
  // has ended. The drain's wait for the session to end raced it against a
  // 2 s timer it never cleared, which kept the process alive that long.
  const b = await startBroker({ acks: true, batches: true });
  const sdk = new URL("../src/index.js", import.meta.url).href;
  const script = `
    import { Worker, shutdownSignal } from ${JSON.stringify(sdk)};
    const w = new Worker(process.argv[1], { reconnectMinMs: 10, reconnectMaxMs: 50 },
      [{ kind: { kind: "k", version: "v1" }, work: async () => ({}) }]);
    await w.run(shutdownSignal());`;
  const child = spawn(process.execPath, ["--input-type=module", "-e", script, b.url], { stdio: "ignore" });
  const exited = new Promise<number>((r) => child.once("exit", () => r(Date.now())));
  cleanups.push(async () => {
    child.kill("SIGKILL");
    await exited;
  });
  await b.session(0);
  const signalled = Date.now();
  child.kill("SIGTERM");
  const took = (await exited) - signalled;
  assert.ok(took < 1_000, `the idle worker's process took ${took} ms to exit after SIGTERM`);
});

test("drain budget spent: a task still waiting for a slot is handed back without running", async () => {
  const b = await startBroker({ acks: false });
  const ran: string[] = [];
  const { stop } = startWorker(
    b.url,
    { drainTimeoutMs: 100, maxParallel: 1 },
    provider(
      "k",
      (req, signal) =>
        new Promise((_resolve, reject) => {
          ran.push(req.resource.name);
          signal.addEventListener("abort", () => reject(new Error("aborted")), { once: true });
        }),
    ),
  );
  const s = await b.session(0);
  s.task(workTask("t1", "k", "running", {}));
  s.task(workTask("t2", "k", "queued", {}));
  await waitUntil("a heartbeat naming both", () => s.heartbeats().some((h) => h.tasks.length === 2));
  await stop();
  await waitUntil("the stream's end", () => s.ended);
  assert.deepEqual(ran, ["running"], "the queued task's handler never ran");
  assert.deepEqual(s.completes(), [], "both were handed back");
});

async function probe(worker: Worker, path: string): Promise<[number, string]> {
  const res = await fetch(`http://${worker.healthAddr}${path}`);
  return [res.status, (await res.text()).trim()];
}

test("probes: /livez while run runs, without a broker; /readyz only while subscribed, and 503 once draining", async () => {
  const alone = startWorker("http://127.0.0.1:1", { healthAddr: "127.0.0.1:0" }, provider("k", () => ({})));
  await waitUntil("the probes' listener", () => alone.worker.healthAddr !== "");
  assert.deepEqual(await probe(alone.worker, "/livez"), [200, "ok"]);
  assert.deepEqual(await probe(alone.worker, "/readyz"), [503, "not connected to a broker"]);

  const b = await startBroker({ acks: true, autoAck: false });
  let release: () => void = () => {};
  const held = new Promise<void>((r) => (release = r));
  const { worker, stop } = startWorker(
    b.url,
    { healthAddr: "127.0.0.1:0" },
    provider("k", async () => {
      await held;
      return {};
    }),
  );
  const s = await b.session(0);
  await waitUntil("ready", () => worker.healthAddr !== "");
  let ready: [number, string] = [0, ""];
  for (const deadline = Date.now() + 10_000; ready[0] !== 200 && Date.now() < deadline; ) {
    ready = await probe(worker, "/readyz");
  }
  assert.deepEqual(ready, [200, "ok"]);
  s.task(workTask("t1", "k", "r", {}));
  await waitUntil("a heartbeat", () => s.heartbeats().some((h) => h.tasks.length === 1));
  const addr = worker.healthAddr;
  const stopped = stop();
  await waitUntil("the drain's unready update", () => s.readiness().some((r) => r.kinds.every((k) => !k.ready)));
  assert.deepEqual(await probe(worker, "/readyz"), [503, "draining: finishing in-flight tasks, taking no new ones"]);
  assert.deepEqual(await probe(worker, "/livez"), [200, "ok"]);
  release();
  await waitUntil("t1 delivered", () => s.completes().some((c) => c.taskId === "t1"));
  s.ack("t1");
  await stopped;
  await assert.rejects(fetch(`http://${addr}/livez`), "the probes stop with run");
});

test("probes: a bad or busy address fails run, naming WORKER_HEALTH_ADDR", async () => {
  const first = startWorker("http://127.0.0.1:1", { healthAddr: "127.0.0.1:0" }, provider("k", () => ({})));
  await waitUntil("the first listener", () => first.worker.healthAddr !== "");
  for (const addr of [first.worker.healthAddr, "nonsense"]) {
    const w = new Worker("http://127.0.0.1:1", { ...fast, healthAddr: addr }, [provider("k", () => ({}))]);
    await assert.rejects(w.run(new AbortController().signal), /WORKER_HEALTH_ADDR=/);
  }
});

test("construction refuses what cannot work, naming why", () => {
  assert.throws(() => new Worker("http://x", {}, []), /no providers/);
  assert.throws(() => new Worker("ftp://x", {}, [provider("k", () => ({}))]), /scheme must be http or https/);
  assert.throws(
    () => new Worker("http://x", { tls: { caFile: "ca.pem" } }, [provider("k", () => ({}))]),
    /WORKER_TLS_\* files are set but the broker url "http:\/\/x" is not https:\/\//,
  );
  assert.throws(() => new Worker("http://x", {}, [provider("k", () => ({})), provider("k", () => ({}))]), /two providers serve k\/v1/);
});
