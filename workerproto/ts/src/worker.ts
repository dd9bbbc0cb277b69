import { randomBytes } from "node:crypto";
import { hostname } from "node:os";

import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";

import { spelled } from "./composecols.js";
import { Defaults } from "./config.js";
import { Health } from "./health.js";
import { configFromProto, outcomeToProto, requestFromTask } from "./convert.js";
import * as pb from "./gen/converge/worker/v1/worker_pb.js";
import { nopLogger, type Logger } from "./log.js";
import { isTerminal, terminal, type Outcome, type Provider, type ProviderConfig } from "./provider.js";
import { checkBrokerURL, Credential, dial, type TLSFiles } from "./transport.js";

/** WorkerOptions tune a Worker; unset fields take the defaults noted (the Go SDK's). */
export interface WorkerOptions {
  /** Identifies this process to brokers (WORKER_ID, default host-pid-random). */
  workerId?: string;
  /** Bounds concurrent tasks (WORKER_MAX_PARALLEL, default 64). */
  maxParallel?: number;
  /**
   * How long running handlers may finish on shutdown (WORKER_DRAIN_TIMEOUT,
   * default 50 s) before their signals abort.
   */
  drainTimeoutMs?: number;
  /** The cadence of coalesced progress heartbeats (default 5 s). */
  heartbeatEveryMs?: number;
  /** How often Provider.ready is polled (default 1 s). */
  readinessEveryMs?: number;
  /**
   * Bounds results kept until a broker acknowledges them — unsent while the
   * stream is down, or sent and not yet acked (default 4096); past it the
   * oldest is discarded and counted (its task re-runs).
   */
  bufferSize?: number;
  /** Bound the jittered reconnect backoff (defaults 100 ms and 10 s). */
  reconnectMinMs?: number;
  reconnectMaxMs?: number;
  /** TLS for https:// brokers (client keypair, CA to verify the broker). */
  tls?: TLSFiles;
  /**
   * The worker-plane bearer token sent on every call (WORKER_TOKEN), or a
   * file whose first line is the token, re-read on every call
   * (WORKER_TOKEN_FILE). Neither: no token (an open broker, or mutual TLS
   * with a converge-worker client certificate).
   */
  token?: string;
  tokenFile?: string;
  /**
   * Bounds one message either way (WORKER_MAX_MESSAGE_BYTES, default 16 MiB):
   * a result larger than it, or than the limit the broker names when the
   * session opens (its own WORKER_MAX_MESSAGE_BYTES) if that is smaller, is
   * sent as its task's terminal failure, naming the size and the limit.
   */
  maxMessageBytes?: number;
  /**
   * Where /livez and /readyz are served (WORKER_HEALTH_ADDR, e.g. ":8081";
   * unset = no probes): /livez answers 200 while run runs, /readyz only while
   * a session is subscribed and the worker is not draining. run binds it
   * first, and rejects on a bad or busy address.
   */
  healthAddr?: string;
  /** Reported to brokers (default "dev"). */
  version?: string;
  logger?: Logger;
}

type Resolved = Required<Omit<WorkerOptions, "tls" | "logger">> & { tls: TLSFiles | undefined; logger: Logger };

function resolve(o: WorkerOptions): Resolved {
  const pos = (v: number | undefined, d: number): number => (v !== undefined && v > 0 ? v : d);
  return {
    workerId: o.workerId || `${hostname()}-${process.pid}-${randomBytes(3).toString("hex")}`,
    maxParallel: pos(o.maxParallel, 64),
    drainTimeoutMs: pos(o.drainTimeoutMs, 50_000),
    heartbeatEveryMs: pos(o.heartbeatEveryMs, 5_000),
    readinessEveryMs: pos(o.readinessEveryMs, 1_000),
    bufferSize: pos(o.bufferSize, 4096),
    reconnectMinMs: pos(o.reconnectMinMs, 100),
    reconnectMaxMs: pos(o.reconnectMaxMs, 10_000),
    tls: o.tls,
    token: o.token ?? "",
    tokenFile: o.tokenFile ?? "",
    maxMessageBytes: pos(o.maxMessageBytes, 16 << 20),
    healthAddr: o.healthAddr ?? "",
    version: o.version || "dev",
    logger: o.logger ?? nopLogger,
  };
}

/** Outbox is a session's outgoing message stream: pushed to synchronously, drained by the transport. */
class Outbox implements AsyncIterable<pb.WorkStreamRequest> {
  private readonly items: pb.WorkStreamRequest[] = [];
  private wake: (() => void) | undefined;
  private closed = false;

  push(msg: pb.WorkStreamRequest["msg"]): void {
    if (this.closed) {
      return;
    }
    this.items.push(create(pb.WorkStreamRequestSchema, { msg }));
    this.wake?.();
  }

  close(): void {
    this.closed = true;
    this.wake?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<pb.WorkStreamRequest> {
    for (;;) {
      const next = this.items.shift();
      if (next !== undefined) {
        yield next;
        continue;
      }
      if (this.closed) {
        return;
      }
      await new Promise<void>((r) => (this.wake = r));
      this.wake = undefined;
    }
  }
}

/** The live session, while there is one. */
/**
 * Running is a task the worker runs: its ref, which heartbeats list, and the
 * lease secret it was handed with, which only a Subscribe's resumed ref
 * carries.
 */
interface Running {
  ref: pb.TaskRef;
  secret: string;
}

interface Live {
  out: Outbox;
  acks: boolean;
  lastReady: string;
  /** drainReported: a readiness report since the drain began was made. */
  drainReported: boolean;
  /** keepalive: the broker asked for a heartbeat even while nothing runs. */
  keepalive: boolean;
  /** batches: the broker acks results and takes several in one message. */
  batches: boolean;
  /**
   * maxBytes is the largest message this session may send: the smaller of
   * maxMessageBytes and the broker's limit (Subscribed.max_message_bytes,
   * when it names one), and whose it is (named in a refusal).
   */
  maxBytes: number;
  maxBytesOf: string;
  /**
   * compositions: the broker takes a composition in columns
   * (Subscribed.compact_compositions); any other gets it spelled out as
   * children and edges when it is sent.
   */
  compositions: boolean;
}

const sleep = (ms: number, signal?: AbortSignal): Promise<void> =>
  new Promise((resolve) => {
    if (signal?.aborted) {
      resolve();
      return;
    }
    const t = setTimeout(done, ms);
    function done(): void {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });

const kvKey = (p: Provider): string => `${p.kind.kind}/${p.kind.version}`;

/**
 * maxResultBatch and resultBatchBytes bound what one StageCompletes message
 * carries, far below the stream's message limit; a result that would take a
 * batch past the bytes starts the next message.
 */
const maxResultBatch = 256;
const resultBatchBytes = 1 << 20;

/** messageOverhead is what a StageComplete gains as a stream message: the field's tag and length. */
const messageOverhead = 16;

/**
 * heartbeats cuts the running tasks' refs into heartbeats that each fit one
 * message of maxBytes: with a small maxMessageBytes and many tasks in flight
 * one heartbeat naming them all would be refused by the worker's own stream,
 * and the session lost at every beat. No refs is one empty heartbeat (the
 * keepalive).
 */
export function heartbeats(refs: pb.TaskRef[], maxBytes: number): pb.TaskRef[][] {
  const out: pb.TaskRef[][] = [[]];
  let size = messageOverhead;
  for (const r of refs) {
    const n = toBinary(pb.TaskRefSchema, r).length + 4; // the repeated field's tag and length
    const cur = out[out.length - 1] as pb.TaskRef[];
    if (cur.length > 0 && size + n > maxBytes) {
      out.push([]);
      size = messageOverhead;
    }
    (out[out.length - 1] as pb.TaskRef[]).push(r);
    size += n;
  }
  return out;
}

/**
 * messageLimit is the largest message a session may send: own
 * (maxMessageBytes), or the broker's (Subscribed.max_message_bytes; 0 from
 * a broker that does not say) when smaller, and whose it is.
 */
function messageLimit(own: number, broker: number): { maxBytes: number; maxBytesOf: string } {
  if (broker > 0 && broker < own) {
    return { maxBytes: broker, maxBytesOf: "the broker's WORKER_MAX_MESSAGE_BYTES" };
  }
  return { maxBytes: own, maxBytesOf: "WORKER_MAX_MESSAGE_BYTES" };
}

/** stageName is a stage as the provider API spells it (compose, work, …). */
function stageName(s: pb.Stage): string {
  return (pb.Stage[s] ?? String(s)).toLowerCase();
}

/**
 * handlerGraceMs is how long a handler whose signal aborted (its task's
 * deadline, or the drain budget spent) may take to settle before the worker
 * abandons it: the task is answered with the failure and its slot freed,
 * while the handler's promise runs on, its result discarded. The broker's
 * own timer has released the task and this worker's slot by then; a hung
 * handler holding its slot for good would leave the worker, with
 * maxParallel of them, connected and ready and running nothing. The Go
 * SDK's handlerGrace.
 */
const handlerGraceMs = 2_000;

const abandoned = new Error(`the handler did not settle within ${handlerGraceMs}ms of its abort: abandoned`);

/**
 * abandonment rejects with `abandoned` handlerGraceMs after signal aborts;
 * cancel it once the handler settled.
 */
function abandonment(signal: AbortSignal): { promise: Promise<never>; cancel: () => void } {
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  const promise = new Promise<never>((_resolve, reject) => {
    onAbort = (): void => {
      timer = setTimeout(() => reject(abandoned), handlerGraceMs);
    };
    if (signal.aborted) {
      onAbort();
    } else {
      signal.addEventListener("abort", onAbort, { once: true });
    }
  });
  promise.catch(() => {}); // settled by the race, or never looked at
  return {
    promise,
    cancel: () => {
      clearTimeout(timer);
      if (onAbort !== undefined) {
        signal.removeEventListener("abort", onAbort);
      }
    },
  };
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * Worker hosts providers and serves them to a broker: it dials in over
 * Connect, subscribes with its kinds and their readiness, runs the tasks it is
 * sent under their deadlines, and streams back each result — echoing the
 * task's fence and lease secret — keeping it until the broker acknowledges
 * it, so a result sent into a dying connection is redelivered on the next
 * session, to whatever broker (the claim_epoch fence applies it once).
 */
export class Worker {
  private readonly o: Resolved;
  private readonly log: Logger;
  private readonly cred: Credential;
  private readonly providers = new Map<string, Provider>();
  private readonly ordered: Provider[];
  private readonly defaults = new Defaults();

  /** The tasks running, by task id, each with the lease secret it was handed with. */
  private readonly running = new Map<string, Running>();
  private readonly slotWaiters: Array<() => void> = [];
  private busy = 0;
  /**
   * The results not yet settled, oldest first: pending[:sent] went out on the
   * current session and await the broker's ResultAck, pending[sent:] are still
   * to send. A new session resends them all.
   */
  private pending: pb.StageComplete[] = [];
  /** kickQueued: a deferred kick (batched results) is scheduled. */
  private kickQueued = false;
  private sent = 0;
  private draining = false;
  private closing = false;
  private droppedCount = 0;
  /** handedBack counts tasks the drain cancelled and handed back unanswered. */
  private handedBack = 0;
  private live: Live | undefined;
  private outbox: Outbox | undefined;
  private readonly changed: Array<() => void> = [];
  private readonly workAbort = new AbortController();
  private health: Health | undefined;

  constructor(
    private readonly brokerUrl: string,
    opts: WorkerOptions,
    providers: Provider[],
  ) {
    this.o = resolve(opts);
    this.log = this.o.logger.with({ worker_id: this.o.workerId });
    if (providers.length === 0) {
      throw new Error("worker: no providers");
    }
    const u = checkBrokerURL(brokerUrl);
    if (u.protocol !== "https:" && (this.o.tls?.certFile || this.o.tls?.keyFile || this.o.tls?.caFile)) {
      // The stream would be cleartext, the files unused: mutual TLS the
      // operator asked for would silently not be.
      throw new Error(`worker: WORKER_TLS_* files are set but the broker url ${JSON.stringify(brokerUrl)} is not https://`);
    }
    for (const p of providers) {
      const key = kvKey(p);
      if (this.providers.has(key)) {
        throw new Error(`worker: two providers serve ${key}`);
      }
      this.providers.set(key, p);
    }
    this.ordered = [...providers].sort((a, b) => (kvKey(a) < kvKey(b) ? -1 : kvKey(a) > kvKey(b) ? 1 : 0));
    this.cred = new Credential(this.o.token, this.o.tokenFile);
  }

  /** The worker's id as brokers see it. */
  get id(): string {
    return this.o.workerId;
  }

  /** Counts results discarded because the redelivery buffer was full. */
  get dropped(): number {
    return this.droppedCount;
  }

  /**
   * run serves until signal aborts, reconnecting with jittered backoff, then
   * drains: the broker is told every kind is unready, running handlers get up
   * to drainTimeoutMs to finish, and their results are delivered.
   */
  async run(signal: AbortSignal): Promise<void> {
    const health = this.o.healthAddr === "" ? undefined : await Health.listen(this.o.healthAddr, () => this.unready());
    this.health = health;
    try {
      await this.serveUntil(signal);
    } finally {
      this.health = undefined;
      await health?.close();
    }
  }

  /** healthAddr is where the probes listen ("" without healthAddr, or outside run), the port resolved. */
  get healthAddr(): string {
    return this.health?.address ?? "";
  }

  /** unready says why /readyz fails, "" when the worker is ready. */
  private unready(): string {
    if (this.draining) {
      return "draining: finishing in-flight tasks, taking no new ones";
    }
    return this.live === undefined ? "not connected to a broker" : "";
  }

  private async serveUntil(signal: AbortSignal): Promise<void> {
    const sessions = new AbortController();
    const loop = this.sessions(sessions.signal);
    await new Promise<void>((r) => (signal.aborted ? r() : signal.addEventListener("abort", () => r(), { once: true })));

    this.draining = true;
    this.log.info("draining in-flight tasks", { in_flight: this.running.size, budget_ms: this.o.drainTimeoutMs });
    this.kick();
    if (!(await this.until(() => this.running.size === 0, this.o.drainTimeoutMs))) {
      this.log.warn("drain budget spent; aborting running handlers");
      this.workAbort.abort(new Error("worker drain budget spent"));
      // A handler that fails for the abort, or ignores it past
      // handlerGraceMs, hands its task back.
      await this.until(() => this.running.size === 0, handlerGraceMs + 1_000);
      if (this.handedBack > 0) {
        this.log.info("handed back the tasks the drain cancelled; the broker dispatches them again", { tasks: this.handedBack });
      }
    }
    // Give the session a moment to flush (and the broker to ack) the last results.
    if (!(await this.until(() => this.pending.length === 0, 5_000))) {
      this.log.warn("results not delivered before exit; their tasks will re-run", { undelivered: this.pending.length });
    }
    // Half-close the stream so what is queued on it goes out, then stop:
    // once the broker has ended the session, or after 2 s. The timer is
    // cleared either way: left running, it kept the process alive for its
    // whole 2 s after an idle worker's session had long ended.
    this.closing = true;
    this.outbox?.close();
    const flushed = new AbortController();
    await Promise.race([loop, sleep(2_000, flushed.signal)]);
    flushed.abort();
    sessions.abort();
    await loop;
  }

  /** until resolves true once cond holds, or false after ms. */
  private async until(cond: () => boolean, ms: number): Promise<boolean> {
    const deadline = Date.now() + ms;
    while (!cond()) {
      const left = deadline - Date.now();
      if (left <= 0) {
        return false;
      }
      await new Promise<void>((r) => {
        const t = setTimeout(fire, left);
        function fire(): void {
          clearTimeout(t);
          r();
        }
        this.changed.push(fire);
      });
    }
    return true;
  }

  private notify(): void {
    for (const f of this.changed.splice(0)) {
      f();
    }
  }

  /** sessions keeps one session open at a time, reconnecting with backoff. */
  private async sessions(signal: AbortSignal): Promise<void> {
    let backoff = this.o.reconnectMinMs;
    while (!signal.aborted && !this.closing) {
      await this.primeDefaults(signal);
      const started = Date.now();
      let err: unknown;
      try {
        await this.session(signal);
      } catch (e) {
        err = e;
      }
      if (signal.aborted || this.closing) {
        return;
      }
      if (Date.now() - started > 30_000) {
        backoff = this.o.reconnectMinMs;
      }
      if (plannedEnd(err)) {
        // The broker drained, or the session reached its maximum age:
        // nothing failed, and the next session starts after the shortest
        // backoff.
        this.log.info("broker ended the session; reconnecting", { error: message(err) });
        backoff = this.o.reconnectMinMs;
      } else {
        this.log.warn("broker stream lost; reconnecting", { error: message(err), retry_in_ms: backoff });
      }
      await sleep(backoff / 2 + Math.random() * (backoff / 2), signal);
      backoff = Math.min(backoff * 2, this.o.reconnectMaxMs);
    }
  }

  /** primeDefaults pulls every served kind's default providerconfig. */
  private async primeDefaults(signal: AbortSignal): Promise<void> {
    let t;
    try {
      t = dial(this.brokerUrl, this.cred, this.o.tls, this.o.maxMessageBytes);
    } catch (err) {
      this.log.debug("dial for providerconfig", { error: message(err) });
      return;
    }
    try {
      const client = createClient(pb.WorkerService, t.transport);
      for (const p of this.providers.values()) {
        const kind = p.kind.kind;
        try {
          const res = await client.getProviderConfig(
            { kind, maxMessageBytes: BigInt(this.o.maxMessageBytes) },
            { signal, timeoutMs: 10_000 },
          );
          this.applyConfig(kind, res.config, !res.found);
        } catch (err) {
          if (err instanceof ConnectError && err.code === Code.ResourceExhausted) {
            // Too big for maxMessageBytes (the broker names the config and
            // both sizes): the session's push skips it too, so the provider
            // runs without it until the limit is raised.
            this.log.warn("default providerconfig refused: over the worker's message limit (WORKER_MAX_MESSAGE_BYTES)", {
              kind,
              maxMessageBytes: this.o.maxMessageBytes,
              error: message(err),
            });
            continue;
          }
          this.log.debug("pull default providerconfig", { kind, error: message(err) });
        }
      }
    } finally {
      t.close();
    }
  }

  private applyConfig(kind: string, c: pb.ProviderConfig | undefined, deleted: boolean): void {
    let cfg: ProviderConfig | undefined;
    try {
      cfg = configFromProto(c);
    } catch (err) {
      this.log.error("default providerconfig unreadable; kept the previous one", { kind, error: message(err) });
      return;
    }
    if (!this.defaults.set(kind, cfg, deleted)) {
      return;
    }
    for (const p of this.providers.values()) {
      if (p.kind.kind !== kind || p.onConfig === undefined) {
        continue;
      }
      try {
        p.onConfig(deleted ? undefined : cfg);
      } catch (err) {
        this.log.error("onConfig threw", { kind, error: message(err) });
      }
    }
  }

  private readiness(): pb.KindReadiness[] {
    return this.ordered.map((p) => {
      let ready = false;
      try {
        ready = !this.draining && (p.ready === undefined || p.ready());
      } catch {
        ready = false;
      }
      return create(pb.KindReadinessSchema, {
        kind: create(pb.KindVersionSchema, { kind: p.kind.kind, version: p.kind.version }),
        ready,
      });
    });
  }

  /** runningRefs lists the running tasks (for heartbeats: without secrets). */
  private runningRefs(): pb.TaskRef[] {
    return [...this.running.values()].map((r) => r.ref);
  }

  /**
   * resumedRefs lists what a new session's Subscribe reports as resumed: the
   * tasks still running and the finished ones whose results await an ack
   * (they go out again on this session), each with the lease secret it was
   * handed with. The broker adopts their leases — only those whose secret it
   * verifies — before it makes this worker routable, so a lease the dead
   * broker's removal freed is not claimed afresh — a new claim epoch would
   * fence out the result about to be redelivered, and the task would run
   * again.
   */
  private resumedRefs(): pb.TaskRef[] {
    const out = new Map<string, pb.TaskRef>();
    for (const [id, r] of this.running) {
      out.set(
        id,
        create(pb.TaskRefSchema, { taskId: r.ref.taskId, fence: r.ref.fence, resourceId: r.ref.resourceId, leaseSecret: r.secret }),
      );
    }
    for (const c of this.pending) {
      if (!out.has(c.taskId)) {
        out.set(
          c.taskId,
          create(pb.TaskRefSchema, { taskId: c.taskId, fence: c.fence, resourceId: c.resourceId, leaseSecret: c.leaseSecret }),
        );
      }
    }
    return [...out.values()];
  }

  /**
   * session runs one WorkStream: subscribe, redeliver buffered results, then
   * receive tasks and send results, heartbeats and readiness changes until
   * the stream breaks or signal aborts.
   */
  private async session(signal: AbortSignal): Promise<void> {
    const t = dial(this.brokerUrl, this.cred, this.o.tls, this.o.maxMessageBytes);
    const abort = new AbortController();
    const onAbort = (): void => abort.abort();
    signal.addEventListener("abort", onAbort, { once: true });
    const out = new Outbox();
    this.outbox = out;
    const timers: NodeJS.Timeout[] = [];
    try {
      const ready = this.readiness();
      out.push({
        case: "subscribe",
        value: create(pb.SubscribeSchema, {
          workerId: this.o.workerId,
          kinds: ready,
          maxInFlight: this.o.maxParallel,
          resumed: this.resumedRefs(),
          version: this.o.version,
          keepalive: true,
          batches: true,
          compactRollups: true,
          maxMessageBytes: BigInt(this.o.maxMessageBytes),
        }),
      });
      const client = createClient(pb.WorkerService, t.transport);
      const stream = client.workStream(out, { signal: abort.signal })[Symbol.asyncIterator]();
      const first = await stream.next();
      if (first.done === true || first.value.msg.case !== "subscribed") {
        throw new Error("broker did not acknowledge the subscription");
      }
      const sub = first.value.msg.value;
      this.sent = 0; // a new session redelivers every pending result
      this.log.info("connected to broker", { broker_id: sub.brokerId, kinds: ready.length, redelivering: this.pending.length });
      // A broker that times out silent sessions (keepaliveMs) hears from
      // this worker at least that often: an empty heartbeat when idle.
      const keepaliveMs = Number(sub.keepaliveMs);
      this.live = {
        out,
        acks: sub.acksResults,
        lastReady: readinessKey(ready),
        drainReported: this.draining,
        keepalive: keepaliveMs > 0,
        batches: sub.acksResults && sub.batches,
        compositions: sub.compactCompositions,
        ...messageLimit(this.o.maxMessageBytes, Number(sub.maxMessageBytes)),
      };
      const beatEvery = keepaliveMs > 0 ? Math.min(this.o.heartbeatEveryMs, keepaliveMs) : this.o.heartbeatEveryMs;
      timers.push(setInterval(() => this.heartbeat(), beatEvery));
      timers.push(setInterval(() => this.sendReadiness(), this.o.readinessEveryMs));
      this.kick();
      for (;;) {
        const r = await stream.next();
        if (r.done === true) {
          throw new Error("the broker ended the stream");
        }
        this.handle(r.value);
      }
    } finally {
      for (const tm of timers) {
        clearInterval(tm);
      }
      this.live = undefined;
      this.outbox = undefined;
      out.close();
      signal.removeEventListener("abort", onAbort);
      abort.abort();
      t.close();
    }
  }

  private handle(msg: pb.WorkStreamResponse): void {
    switch (msg.msg.case) {
      case "task":
        this.start(msg.msg.value);
        break;
      case "tasks":
        for (const task of msg.msg.value.tasks) {
          this.start(task);
        }
        break;
      case "config":
        this.applyConfig(msg.msg.value.kind, msg.msg.value.config, msg.msg.value.deleted);
        break;
      case "ack":
        this.acked(msg.msg.value.taskIds);
        break;
      default:
        break;
    }
  }

  private heartbeat(): void {
    if (this.live === undefined || (this.running.size === 0 && !this.live.keepalive)) {
      return;
    }
    for (const tasks of heartbeats(this.runningRefs(), this.live.maxBytes)) {
      this.live.out.push({ case: "heartbeat", value: create(pb.HeartbeatSchema, { tasks }) });
    }
  }

  private sendReadiness(): void {
    const live = this.live;
    if (live === undefined) {
      return;
    }
    live.drainReported ||= this.draining;
    const r = this.readiness();
    const key = readinessKey(r);
    if (key === live.lastReady) {
      return;
    }
    live.lastReady = key;
    live.out.push({ case: "readiness", value: create(pb.ReadinessUpdateSchema, { kinds: r }) });
  }

  /**
   * kick flushes pending results and, once the drain begins, reports it at
   * once (draining flips every kind unready). Kicks also follow finished
   * tasks, so a provider's own readiness waits for the ticker instead of
   * being rebuilt for every batch of results.
   */
  private kick(): void {
    this.flush();
    if (this.draining && this.live?.drainReported === false) {
      this.sendReadiness();
    }
    this.notify();
  }

  /**
   * flush sends every pending result not yet sent on this session. Against a
   * broker that acks results, a sent result stays pending until its ResultAck
   * arrives (a send can land in a connection that is already dead, so only
   * the ack proves the broker took it); against one that does not, a result
   * is done once sent. A broker that takes batches gets what is pending in as
   * few messages as maxResultBatch allows.
   */
  private flush(): void {
    const live = this.live;
    if (live === undefined) {
      return;
    }
    if (live.batches) {
      while (this.sent < this.pending.length) {
        const batch: pb.StageComplete[] = [];
        let bytes = 0;
        // A batch stays within the message limit too (it can be below a
        // batch's bytes): each result costs its field's tag and length
        // besides its bytes.
        const bound = Math.min(resultBatchBytes, live.maxBytes - messageOverhead);
        while (this.sent < this.pending.length && batch.length < maxResultBatch) {
          const [c, n] = this.fit(this.sent, live);
          if (batch.length > 0 && bytes + n + messageOverhead > bound) {
            break;
          }
          batch.push(c);
          bytes += n + messageOverhead;
          this.sent++;
        }
        live.out.push(
          batch.length === 1
            ? { case: "complete", value: batch[0] as pb.StageComplete }
            : { case: "completes", value: create(pb.StageCompletesSchema, { completes: batch }) },
        );
      }
      return;
    }
    while (this.sent < this.pending.length) {
      live.out.push({ case: "complete", value: this.fit(this.sent, live)[0] });
      if (live.acks) {
        this.sent++;
      } else {
        this.pending.splice(this.sent, 1);
      }
    }
  }

  /**
   * fit is pending[i] as this session's broker takes it (onWire), with its
   * size in bytes; or, when it cannot travel in one message (live.maxBytes:
   * maxMessageBytes, or the broker's limit when smaller), its task's
   * terminal failure naming the size and the limit, which replaces it in
   * pending. Sent as it is, the result would break the stream (or the
   * broker would refuse it) and be sent again on every session after, the
   * results behind it never delivered. The same input makes the same
   * outcome, so the failure is terminal.
   */
  private fit(i: number, live: Live): [pb.StageComplete, number] {
    const c = this.onWire(this.pending[i] as pb.StageComplete, live);
    const n = toBinary(pb.StageCompleteSchema, c).length;
    if (n + messageOverhead <= live.maxBytes) {
      return [c, n];
    }
    const msg =
      `the ${stageName(c.stage)} result is ${n} bytes, over the ${live.maxBytes}-byte limit of one message ` +
      `to the broker (${live.maxBytesOf})`;
    this.log.error("result too large to send; failing its task", {
      task_id: c.taskId,
      resource_id: c.resourceId,
      bytes: n,
      limit: live.maxBytes,
      limit_of: live.maxBytesOf,
    });
    const f = create(pb.StageCompleteSchema, {
      taskId: c.taskId,
      fence: c.fence,
      resourceId: c.resourceId,
      stage: c.stage,
      leaseSecret: c.leaseSecret,
      result: { case: "error", value: create(pb.TaskErrorSchema, { message: msg, terminal: true }) },
    });
    this.pending[i] = f;
    return [f, toBinary(pb.StageCompleteSchema, f).length];
  }

  /**
   * onWire is c as this session's broker takes it. A pending result keeps
   * the composition columns it was built with (outcomeToProto); a broker
   * that does not take columns gets a copy with them spelled out as
   * children and edges, so a redelivery to a later broker that takes them
   * still carries them. Columns that do not read back (which the builder
   * never writes) go as a transient failure, so the task re-runs.
   */
  private onWire(c: pb.StageComplete, live: Live): pb.StageComplete {
    if (live.compositions) {
      return c;
    }
    try {
      return spelled(c);
    } catch (err) {
      this.log.error("a result's composition columns do not read back; sending it as a failure", { task_id: c.taskId, error: message(err) });
      return { ...c, result: { case: "error", value: create(pb.TaskErrorSchema, { message: message(err), terminal: false }) } };
    }
  }

  /**
   * acked drops the results the broker acknowledged: each id settles one sent
   * result with that task id (a task re-dispatched under the same id may have
   * two, and each is acked on its own).
   */
  private acked(ids: string[]): void {
    const settle = new Map<string, number>();
    for (const id of ids) {
      settle.set(id, (settle.get(id) ?? 0) + 1);
    }
    const kept: pb.StageComplete[] = [];
    let sent = this.sent;
    this.pending.forEach((p, i) => {
      const n = settle.get(p.taskId) ?? 0;
      if (i < this.sent && n > 0) {
        settle.set(p.taskId, n - 1);
        sent--;
        return;
      }
      kept.push(p);
    });
    this.pending = kept;
    this.sent = sent;
    this.notify();
  }

  /** deliver queues a result for the current (or next) session; it stays pending until acked. */
  private deliver(c: pb.StageComplete): void {
    if (this.pending.length >= this.o.bufferSize) {
      this.pending.shift();
      if (this.sent > 0) {
        this.sent--;
      }
      this.droppedCount++;
      this.log.warn("redelivery buffer full; discarded the oldest result (its task will re-run)", { dropped: this.droppedCount });
    }
    this.pending.push(c);
    if (this.live?.batches !== true) {
      this.kick();
      return;
    }
    // Against a broker that takes batches, the results finished in this turn
    // of the event loop go out together, one turn later.
    if (!this.kickQueued) {
      this.kickQueued = true;
      setImmediate(() => {
        this.kickQueued = false;
        this.kick();
      });
    }
  }

  /** start runs one task, bounded by maxParallel. */
  private start(t: pb.StageTask): void {
    if (this.draining) {
      this.deliver(completion(t, undefined, new Error("worker is draining for shutdown")));
      return;
    }
    if (this.running.has(t.taskId)) {
      return; // already running (a redelivered dispatch)
    }
    this.running.set(t.taskId, {
      ref: create(pb.TaskRefSchema, { taskId: t.taskId, fence: t.fence, resourceId: t.resource?.id ?? "" }),
      secret: t.leaseSecret,
    });
    // The deadline counts from the task's arrival, as the broker's timer
    // runs: not from when a slot frees.
    const ms = Number(t.taskDeadlineMs);
    void this.runTask(t, ms > 0 ? Date.now() + ms : undefined);
  }

  private async runTask(t: pb.StageTask, deadlineAt: number | undefined): Promise<void> {
    if (this.busy >= this.o.maxParallel) {
      await new Promise<void>((r) => this.slotWaiters.push(r));
    }
    this.busy++;
    try {
      if (this.workAbort.signal.aborted) {
        // The drain budget was spent while it waited for a slot: handed
        // back unrun (see below).
        this.handedBack++;
        return;
      }
      let c: pb.StageComplete;
      try {
        c = completion(t, await this.execute(t, deadlineAt), undefined);
      } catch (err) {
        if (this.workAbort.signal.aborted) {
          // The drain budget was spent and the handler failed (or was
          // abandoned): hand the task back unanswered. The broker, told the
          // worker went unready when the drain began, dispatches it again
          // when the session ends, at once and without counting an attempt,
          // where a failure would count toward max_transient_attempts and
          // wait out a retry backoff.
          this.handedBack++;
          return;
        }
        c = completion(t, undefined, err);
      }
      this.deliver(c);
    } finally {
      this.busy--;
      this.slotWaiters.shift()?.();
      this.running.delete(t.taskId);
      this.notify();
    }
  }

  /** execute runs the provider's handler under the task deadline. */
  private async execute(t: pb.StageTask, deadlineAt: number | undefined): Promise<Outcome> {
    const r = t.resource;
    const p = this.providers.get(`${r?.kind ?? ""}/${r?.version ?? ""}`);
    if (p === undefined) {
      throw terminal(new Error(`worker ${this.o.workerId} serves no provider for ${r?.kind ?? ""}/${r?.version ?? ""}`));
    }
    let req;
    try {
      req = requestFromTask(t, this.defaults.get(p.kind.kind));
    } catch (err) {
      throw terminal(err);
    }
    const ms = Number(t.taskDeadlineMs);
    if (deadlineAt !== undefined && deadlineAt <= Date.now()) {
      // Spent waiting for a slot: the broker has released the task.
      throw new Error(`task deadline of ${ms}ms exceeded before a slot was free: not run`);
    }
    const deadline = new AbortController();
    const timer =
      deadlineAt !== undefined
        ? setTimeout(() => deadline.abort(new Error(`task deadline of ${ms}ms exceeded`)), deadlineAt - Date.now())
        : undefined;
    if (deadlineAt !== undefined) {
      req.deadline = deadlineAt;
    }
    const signal = AbortSignal.any([this.workAbort.signal, deadline.signal]);
    const started = Date.now();
    const abandon = abandonment(signal);
    try {
      const out = await Promise.race([p.work(req, signal), abandon.promise]);
      if (deadline.signal.aborted) {
        throw new Error(`task deadline of ${ms}ms exceeded`);
      }
      this.log.debug("task done", { kind: p.kind.kind, name: req.resource.name, stage: req.stage, took_ms: Date.now() - started });
      return out;
    } catch (err) {
      this.log.debug("task failed", {
        kind: p.kind.kind,
        name: req.resource.name,
        stage: req.stage,
        took_ms: Date.now() - started,
        error: message(err),
      });
      if (err === abandoned) {
        this.log.error("handler ignores its abort signal; abandoned it (its promise runs on)", {
          kind: p.kind.kind,
          name: req.resource.name,
          reaction: req.reaction,
          task_id: t.taskId,
        });
      }
      if (deadline.signal.aborted && !isTerminal(err)) {
        throw new Error(`task deadline of ${ms}ms exceeded: ${message(err)}`, { cause: err });
      }
      throw err;
    } finally {
      clearTimeout(timer);
      abandon.cancel();
    }
  }
}

/**
 * completion builds the StageComplete answering t, echoing its fence and
 * lease secret. A composition in the outcome goes in columns when it fits
 * them (outcomeToProto): send it as is only to a broker whose
 * Subscribed.compact_compositions is true; the Worker spells it out as
 * children and edges for any other.
 */
export function completion(t: pb.StageTask, out: Outcome | undefined, err: unknown): pb.StageComplete {
  const c = create(pb.StageCompleteSchema, {
    taskId: t.taskId,
    fence: t.fence,
    resourceId: t.resource?.id ?? "",
    stage: t.stage,
    leaseSecret: t.leaseSecret,
  });
  if (err === undefined) {
    try {
      c.result = { case: "outcome", value: outcomeToProto(out) };
      return c;
    } catch (e) {
      err = terminal(e);
    }
  }
  c.result = { case: "error", value: create(pb.TaskErrorSchema, { message: message(err), terminal: isTerminal(err) }) };
  return c;
}

function readinessKey(rs: pb.KindReadiness[]): string {
  return rs.map((r) => `${r.kind?.kind ?? ""}/${r.kind?.version ?? ""}${r.ready ? "+" : "-"}`).join("");
}

/**
 * serve runs providers against the broker at brokerUrl until signal aborts,
 * then drains in-flight work (see WorkerOptions.drainTimeoutMs).
 */
export async function serve(signal: AbortSignal, brokerUrl: string, opts: WorkerOptions, ...providers: Provider[]): Promise<void> {
  await new Worker(brokerUrl, opts, providers).run(signal);
}

/**
 * shutdownSignal aborts on the first SIGTERM or SIGINT: the worker drains and
 * returns. A second signal gets Node's default, ending the process at once.
 */
export function shutdownSignal(): AbortSignal {
  const ac = new AbortController();
  const stop = (sig: NodeJS.Signals): void => ac.abort(new Error(`received ${sig}`));
  process.once("SIGTERM", stop);
  process.once("SIGINT", stop);
  return ac.signal;
}

/**
 * PLANNED_SESSION_END begins the message of the Unavailable status with which
 * a broker ends a session on purpose (it drained, or the session reached
 * WORKER_SESSION_MAX_AGE): the Go protocol package's PlannedSessionEnd.
 */
export const PLANNED_SESSION_END = "session ended by the broker";

/** plannedEnd reports whether err is a broker ending the session on purpose. */
export function plannedEnd(err: unknown): boolean {
  return err instanceof ConnectError && err.code === Code.Unavailable && err.rawMessage.startsWith(PLANNED_SESSION_END);
}
