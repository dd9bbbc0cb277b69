// A scripted broker for the SDK's unit tests: a real Connect server (HTTP/2
// cleartext, node:http2) serving WorkerService, whose sessions the test
// drives message by message.
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";

import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type ConnectRouter } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";

import * as pb from "../src/gen/converge/worker/v1/worker_pb.js";

/** TaskInit is a StageTask to build. */
export type TaskInit = MessageInitShape<typeof pb.StageTaskSchema>;

const END = Symbol("end");
const FAIL = Symbol("fail");
type Out = pb.WorkStreamResponse | typeof END | typeof FAIL;

/** waitUntil polls cond every 5 ms until it holds, failing after ms. */
export async function waitUntil(what: string, cond: () => boolean, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${ms}ms waiting for ${what}`);
    }
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** One WorkStream as the broker sees it. */
export class Session {
  readonly received: pb.WorkStreamRequest[] = [];
  private readonly queue: Out[] = [];
  private wake: (() => void) | undefined;
  ended = false;

  constructor(readonly authorization: string | null) {}

  get subscribe(): pb.Subscribe {
    const m = this.received[0]?.msg;
    if (m?.case !== "subscribe") {
      throw new Error("the session did not open with a Subscribe");
    }
    return m.value;
  }

  /** completes lists the StageCompletes received, in order, batched or not. */
  completes(): pb.StageComplete[] {
    return this.received.flatMap((r) =>
      r.msg.case === "complete" ? [r.msg.value] : r.msg.case === "completes" ? r.msg.value.completes : [],
    );
  }

  /** batchSizes lists how many results each result message carried. */
  batchSizes(): number[] {
    return this.received.flatMap((r) =>
      r.msg.case === "complete" ? [1] : r.msg.case === "completes" ? [r.msg.value.completes.length] : [],
    );
  }

  heartbeats(): pb.Heartbeat[] {
    return this.received.flatMap((r) => (r.msg.case === "heartbeat" ? [r.msg.value] : []));
  }

  readiness(): pb.ReadinessUpdate[] {
    return this.received.flatMap((r) => (r.msg.case === "readiness" ? [r.msg.value] : []));
  }

  push(o: Out): void {
    this.queue.push(o);
    this.wake?.();
  }

  send(msg: pb.WorkStreamResponse["msg"]): void {
    this.push(create(pb.WorkStreamResponseSchema, { msg }));
  }

  task(t: TaskInit): void {
    this.send({ case: "task", value: create(pb.StageTaskSchema, t) });
  }

  /** tasks sends several tasks in one StageTasks message. */
  tasks(...ts: TaskInit[]): void {
    this.send({ case: "tasks", value: create(pb.StageTasksSchema, { tasks: ts.map((t) => create(pb.StageTaskSchema, t)) }) });
  }

  ack(...taskIds: string[]): void {
    this.send({ case: "ack", value: create(pb.ResultAckSchema, { taskIds }) });
  }

  /** end closes the stream cleanly; fail ends it with an error (a broker going away). */
  end(): void {
    this.push(END);
  }

  fail(): void {
    this.push(FAIL);
  }

  async next(): Promise<Out> {
    for (;;) {
      const o = this.queue.shift();
      if (o !== undefined) {
        return o;
      }
      await new Promise<void>((r) => (this.wake = r));
      this.wake = undefined;
    }
  }
}

export interface FakeBrokerOptions {
  acks?: boolean;
  /** autoAck acks every result as it arrives (default true when acks). */
  autoAck?: boolean;
  /** defaults are served by GetProviderConfig, by kind. */
  defaults?: Map<string, pb.ProviderConfig>;
  /** token, when set, is required as the bearer token. */
  token?: string;
  /** keepaliveMs is the Subscribed.keepalive_ms asked for (default 0: none). */
  keepaliveMs?: number;
  /** batches is the Subscribed.batches advertised (default false). */
  batches?: boolean;
  /** compositions is the Subscribed.compact_compositions advertised (default false). */
  compositions?: boolean;
  /**
   * maxMessageBytes is the largest message read, as a broker's
   * WORKER_MAX_MESSAGE_BYTES, and the Subscribed.max_message_bytes
   * advertised (default: Connect's, and 0).
   */
  maxMessageBytes?: number;
}

/** FakeBroker is the scripted broker. */
export class FakeBroker {
  readonly sessions: Session[] = [];
  readonly configPulls: string[] = [];
  private server: http2.Http2Server | undefined;
  private readonly conns = new Set<http2.ServerHttp2Session>();
  url = "";
  /**
   * compositions is the Subscribed.compact_compositions the next session is
   * told (options.compositions until a test changes it).
   */
  compositions: boolean;

  constructor(private readonly o: FakeBrokerOptions = {}) {
    this.compositions = o.compositions ?? false;
  }

  private routes = (router: ConnectRouter): void => {
    router.service(pb.WorkerService, {
      getProviderConfig: (req, ctx) => {
        this.authorize(ctx.requestHeader.get("authorization"));
        this.configPulls.push(req.kind);
        const c = this.o.defaults?.get(req.kind);
        return create(pb.GetProviderConfigResponseSchema, c === undefined ? { found: false } : { found: true, config: c });
      },
      workStream: (reqs, ctx) => this.stream(reqs, ctx.requestHeader.get("authorization")),
      relayStage: () => {
        throw new ConnectError("not a mesh peer", Code.Unimplemented);
      },
    });
  };

  private authorize(h: string | null): void {
    if (this.o.token !== undefined && h !== `Bearer ${this.o.token}`) {
      throw new ConnectError("worker token required", Code.Unauthenticated);
    }
  }

  private async *stream(reqs: AsyncIterable<pb.WorkStreamRequest>, authorization: string | null): AsyncIterable<pb.WorkStreamResponse> {
    this.authorize(authorization);
    const s = new Session(authorization);
    this.sessions.push(s);
    void (async () => {
      try {
        for await (const r of reqs) {
          s.received.push(r);
          if ((this.o.acks ?? true) && (this.o.autoAck ?? true)) {
            if (r.msg.case === "complete") {
              s.ack(r.msg.value.taskId);
            } else if (r.msg.case === "completes") {
              s.ack(...r.msg.value.completes.map((c) => c.taskId));
            }
          }
        }
      } catch {
        // the stream broke; the session ends below
      }
      s.ended = true;
      s.end(); // the worker half-closed (or the stream broke): end ours too
    })();
    await waitUntil("the Subscribe", () => s.received.length > 0);
    yield create(pb.WorkStreamResponseSchema, {
      msg: { case: "subscribed", value: create(pb.SubscribedSchema, {
          brokerId: "fake",
          acksResults: this.o.acks ?? true,
          keepaliveMs: BigInt(this.o.keepaliveMs ?? 0),
          batches: this.o.batches ?? false,
          compactCompositions: this.compositions,
          maxMessageBytes: BigInt(this.o.maxMessageBytes ?? 0),
        }) },
    });
    for (;;) {
      const o = await s.next();
      if (o === END) {
        s.ended = true;
        return;
      }
      if (o === FAIL) {
        s.ended = true;
        throw new ConnectError("broker restarting", Code.Unavailable);
      }
      yield o;
    }
  }

  /** session waits for the nth (0-based) session and its Subscribe. */
  async session(n: number): Promise<Session> {
    await waitUntil(`session ${n}`, () => this.sessions.length > n && (this.sessions[n]?.received.length ?? 0) > 0);
    return this.sessions[n] as Session;
  }

  async listen(port = 0): Promise<string> {
    const server = http2.createServer(connectNodeAdapter({ routes: this.routes, readMaxBytes: this.o.maxMessageBytes }));
    server.on("session", (s) => {
      this.conns.add(s);
      s.on("close", () => this.conns.delete(s));
    });
    await new Promise<void>((r) => server.listen(port, "127.0.0.1", r));
    this.server = server;
    this.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    return this.url;
  }

  /** close stops listening and drops every connection at once (a broker dying). */
  async close(): Promise<void> {
    for (const s of this.conns) {
      s.destroy();
    }
    await new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()));
    this.server = undefined;
  }
}

const enc = new TextEncoder();

/** json encodes a value as the wire's JSON bytes. */
export function json(v: unknown): Uint8Array {
  return enc.encode(JSON.stringify(v));
}

/** decode reads the wire's JSON bytes. */
export function decode(b: Uint8Array): unknown {
  return b.length === 0 ? undefined : JSON.parse(new TextDecoder().decode(b));
}

/** task builds a WORK task for kind/name with a fence and a lease secret. */
export function workTask(taskId: string, kind: string, name: string, spec: unknown, extra: TaskInit = {}): TaskInit {
  return {
    taskId,
    fence: create(pb.FenceSchema, { leaseToken: `lease-${taskId}`, claimEpoch: 7n, manifestGen: 3n }),
    stage: pb.Stage.WORK,
    reaction: "work",
    resource: create(pb.ResourceSchema, { id: `id-${name}`, kind, version: "v1", name, specJson: json(spec), generation: 2n }),
    leaseSecret: `secret-${taskId}`,
    request: { case: "work", value: create(pb.WorkRequestSchema, { trigger: "specChange" }) },
    ...extra,
  };
}
