// The worker the Go end-to-end test (workerproto/ts/e2e_test.go) runs with
// node: the tsgreeting example plus tsprobe, a kind whose spec picks a
// behaviour (terminal or transient failures, a handler that outlives the
// task deadline, one that holds a task for a while). Every task start, end
// and config push is one JSON line on stdout for the test to wait on.
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
  mode: "ok" | "terminal" | "transient" | "overrun" | "hold" | "gate";
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
      mode: { enum: ["ok", "terminal", "transient", "overrun", "hold", "gate"] },
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
    return { status: { attempts: n, lease: req.resource.id !== "" } };
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

if (process.argv[2] === "--print-manifests") {
  console.log(JSON.stringify([greeterManifest, probeManifest, gateManifest]));
} else {
  const opts = { ...optionsFromEnv(), logger: loggerFromEnv(), heartbeatEveryMs: 500, reconnectMaxMs: 500 };
  serve(shutdownSignal(), process.env["BROKER_URL"] ?? "", opts, greeterTraced, probe, gate).then(
    () => event({ event: "exit" }),
    (err: unknown) => {
      console.error("e2e worker:", err instanceof Error ? err.message : err);
      process.exit(1);
    },
  );
}
