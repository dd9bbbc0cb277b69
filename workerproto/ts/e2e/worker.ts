// The worker the Go end-to-end test (workerproto/ts/e2e_test.go) runs with
// node: the tsgreeting example plus tsprobe, a kind whose spec picks a
// behaviour (terminal or transient failures, a handler that outlives the
// task deadline, one that holds a task for a while, an unhealthy result),
// and tsfleet, a composite of probes (and one nested fleet) whose rollup
// reports the subtree it was given. Every task start, end, rollup and config
// push is one JSON line on stdout for the test to wait on.
import { existsSync } from "node:fs";

import {
  loggerFromEnv,
  optionsFromEnv,
  serve,
  shutdownSignal,
  terminal,
  type Outcome,
  type Provider,
  type Request,
} from "../src/index.js";
import { greeter, manifest as greeterManifest } from "../examples/greeter/greeter.js";

function event(e: Record<string, unknown>): void {
  process.stdout.write(JSON.stringify(e) + "\n");
}

interface ProbeSpec {
  mode: "ok" | "terminal" | "transient" | "overrun" | "hold" | "gate" | "unhealthy";
  /** transient: how many attempts fail before one succeeds. */
  fail_times?: number;
  /** hold: how long the handler runs. */
  hold_ms?: number;
  /** gate: the handler finishes once this file exists. */
  gate_file?: string;
}

const probeManifest = {
  kind: "tsprobe",
  description: "The TypeScript SDK's end-to-end probe.",
  spec_schema: {
    type: "object",
    properties: {
      mode: { enum: ["ok", "terminal", "transient", "overrun", "hold", "gate", "unhealthy"] },
      fail_times: { type: "integer", minimum: 0 },
      hold_ms: { type: "integer", minimum: 0 },
      gate_file: { type: "string" },
    },
    required: ["mode"],
    additionalProperties: false,
  },
  reactions: [{ name: "work", trigger: "specChange", emits: ["status", "conditions"] }],
  task_deadline_secs: 3,
};

const attempts = new Map<string, number>();

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener(
      "abort",
      () => {
        clearTimeout(t);
        reject(signal.reason instanceof Error ? signal.reason : new Error(String(signal.reason)));
      },
      { once: true },
    );
  });
}

const probe: Provider = {
  kind: { kind: "tsprobe", version: "v1" },
  async work(req: Request, signal: AbortSignal): Promise<Outcome> {
    const spec = req.resource.spec as ProbeSpec;
    const key = `${req.resource.id}@${req.resource.generation}`;
    const n = (attempts.get(key) ?? 0) + 1;
    attempts.set(key, n);
    event({ event: "start", kind: req.resource.kind, name: req.resource.name, attempt: n, deadline: req.deadline !== undefined });
    switch (spec.mode) {
      case "terminal":
        throw terminal(new Error(`probe ${req.resource.name} refuses terminally`));
      case "transient":
        if (n <= (spec.fail_times ?? 1)) {
          throw new Error(`probe ${req.resource.name} fails transiently (attempt ${n})`);
        }
        break;
      case "overrun":
        if (n === 1) {
          try {
            await sleep(60_000, signal);
          } catch (err) {
            event({ event: "aborted", name: req.resource.name, reason: err instanceof Error ? err.message : String(err) });
            throw err;
          }
        }
        break;
      case "hold":
        await sleep(spec.hold_ms ?? 1000, signal);
        break;
      case "gate":
        while (!existsSync(spec.gate_file ?? "")) {
          await sleep(5, signal);
        }
        break;
      default:
        break;
    }
    event({ event: "done", kind: req.resource.kind, name: req.resource.name, attempt: n });
    const out: Outcome = { status: { attempts: n, lease: req.resource.id !== "" } };
    if (spec.mode === "unhealthy") {
      out.healthOk = false;
    }
    return out;
  },
};

// tsgate is tsprobe with a deadline long enough for a broker to die and be
// replaced while one of its tasks is held.
const gateManifest = { ...probeManifest, kind: "tsgate", task_deadline_secs: 300 };
const gate: Provider = { kind: { kind: "tsgate", version: "v1" }, work: (req, signal) => probe.work(req, signal) };

const greeterTraced: Provider = {
  kind: greeter.kind,
  work(req: Request, signal: AbortSignal) {
    event({ event: "start", kind: greeter.kind.kind, name: req.resource.name });
    return greeter.work(req, signal);
  },
  onConfig(cfg) {
    event({ event: "config", kind: greeter.kind.kind, spec: cfg?.spec ?? null });
  },
};

interface FleetSpec {
  /** One tsprobe child per mode, named <fleet>-p<i>. */
  modes: ProbeSpec["mode"][];
  /** A nested fleet of the same kind, named <fleet>-sub. */
  sub?: { modes: ProbeSpec["mode"][] };
}

const fleetModes = { type: "array", items: { enum: ["ok", "terminal", "unhealthy"] } };

// tsfleet's rollup reads only its children's status: its own spec, status,
// labels and finalizers are not sent, and it reports what it was given.
// tsfleetbare is the same composite whose rollup reads nothing at all.
const fleetManifest = {
  kind: "tsfleet",
  description: "The TypeScript SDK's end-to-end composite: probes and a nested fleet, rolled up.",
  spec_schema: {
    type: "object",
    properties: {
      modes: fleetModes,
      sub: { type: "object", properties: { modes: fleetModes }, required: ["modes"], additionalProperties: false },
    },
    required: ["modes"],
    additionalProperties: false,
  },
  reactions: [
    { name: "compose", trigger: "specChange", emits: ["children", "status"], reads: ["spec"] },
    { name: "rollup", trigger: "childrenSettled", emits: ["status"], reads: ["childStatus"] },
  ],
};
const fleetBareManifest = {
  ...fleetManifest,
  kind: "tsfleetbare",
  reactions: [fleetManifest.reactions[0], { name: "rollup", trigger: "childrenSettled", emits: ["status"], reads: [] }],
};

function fleet(kind: string): Provider {
  return {
    kind: { kind, version: "v1" },
    work(req: Request): Outcome {
      const name = req.resource.name;
      if (req.stage === "compose") {
        const spec = req.resource.spec as FleetSpec;
        const children: NonNullable<Outcome["children"]> = spec.modes.map((mode, i) => ({ kind: "tsprobe", name: `${name}-p${i}`, spec: { mode } }));
        if (spec.sub !== undefined) {
          children.push({ kind, name: `${name}-sub`, spec: { modes: spec.sub.modes } });
        }
        return { children, status: { composed: children.length } };
      }
      const kids = req.children ?? [];
      const r = req.resource;
      event({
        event: "rollup",
        kind,
        name,
        resource: { spec: r.spec ?? null, status: r.status ?? null, labels: r.labels, finalizers: r.finalizers },
        children: kids.map((c) => ({ id: c.id, kind: c.kind, name: c.name, phase: c.phase, healthOk: c.healthOk, ownerId: c.ownerId, status: c.status ?? null })),
      });
      return { status: { children: kids.length, ready: kids.filter((c) => c.phase === "Ready").length } };
    },
  };
}

if (process.argv[2] === "--print-manifests") {
  console.log(JSON.stringify([greeterManifest, probeManifest, gateManifest, fleetManifest, fleetBareManifest]));
} else {
  const opts = { ...optionsFromEnv(), logger: loggerFromEnv(), heartbeatEveryMs: 500, reconnectMaxMs: 500 };
  serve(shutdownSignal(), process.env["BROKER_URL"] ?? "", opts, greeterTraced, probe, gate, fleet("tsfleet"), fleet("tsfleetbare")).then(
    () => event({ event: "exit" }),
    (err: unknown) => {
      console.error("e2e worker:", err instanceof Error ? err.message : err);
      process.exit(1);
    },
  );
}
