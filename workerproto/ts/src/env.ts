import { splitHostPort } from "./health.js";
import type { WorkerOptions } from "./worker.js";

const units: Record<string, number> = { ns: 1e-6, us: 1e-3, "µs": 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/**
 * parseDuration reads a Go-style duration ("50s", "1m30s", "500ms") as
 * milliseconds; it returns undefined for anything else.
 */
export function parseDuration(s: string): number | undefined {
  const re = /(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/y;
  let total = 0;
  let at = 0;
  if (s === "") {
    return undefined;
  }
  while (at < s.length) {
    re.lastIndex = at;
    const m = re.exec(s);
    if (m === null) {
      return undefined;
    }
    total += Number(m[1]) * (units[m[2] as string] as number);
    at = re.lastIndex;
  }
  return total;
}

type Env = Record<string, string | undefined>;

function positiveInt(env: Env, name: string, min: number, want: string): number | undefined {
  const v = env[name];
  if (v === undefined || v === "") {
    return undefined;
  }
  const n = Number(v);
  if (!/^\d+$/.test(v) || !Number.isSafeInteger(n) || n < min) {
    throw new Error(`${name}=${JSON.stringify(v)}: want ${want}`);
  }
  return n;
}

/**
 * optionsFromEnv reads the worker's settings from the environment, with the
 * same names and limits as the Go SDK: WORKER_ID, WORKER_MAX_PARALLEL
 * (default 64), WORKER_DRAIN_TIMEOUT (default 50s), WORKER_MAX_MESSAGE_BYTES
 * (default 16 MiB), WORKER_HEALTH_ADDR (the probes' listen address; unset =
 * no probes), the credential WORKER_TOKEN or WORKER_TOKEN_FILE (not
 * both), and for https:// brokers WORKER_TLS_CERT_FILE + WORKER_TLS_KEY_FILE
 * (the client keypair for mutual TLS) and WORKER_TLS_CA_FILE (the CA that
 * verifies the broker). It throws an error naming the variable and its limit.
 */
export function optionsFromEnv(env: Env = process.env): WorkerOptions {
  const o: WorkerOptions = {};
  const id = env["WORKER_ID"];
  if (id) {
    o.workerId = id;
  }
  const parallel = positiveInt(env, "WORKER_MAX_PARALLEL", 1, "a positive integer");
  if (parallel !== undefined) {
    o.maxParallel = parallel;
  }
  const drain = env["WORKER_DRAIN_TIMEOUT"];
  if (drain) {
    const ms = parseDuration(drain);
    if (ms === undefined || ms <= 0) {
      throw new Error(`WORKER_DRAIN_TIMEOUT=${JSON.stringify(drain)}: want a positive duration like 50s`);
    }
    o.drainTimeoutMs = ms;
  }
  const healthAddr = env["WORKER_HEALTH_ADDR"] ?? "";
  if (healthAddr !== "") {
    splitHostPort(healthAddr); // throws naming the variable
    o.healthAddr = healthAddr;
  }
  const maxBytes = positiveInt(env, "WORKER_MAX_MESSAGE_BYTES", 1024, "a byte count of at least 1024");
  if (maxBytes !== undefined) {
    o.maxMessageBytes = maxBytes;
  }
  const token = env["WORKER_TOKEN"] ?? "";
  const tokenFile = env["WORKER_TOKEN_FILE"] ?? "";
  if (token !== "" && tokenFile !== "") {
    throw new Error("WORKER_TOKEN and WORKER_TOKEN_FILE are both set: set one");
  }
  if (token !== "") {
    o.token = token;
  }
  if (tokenFile !== "") {
    o.tokenFile = tokenFile;
  }
  const certFile = env["WORKER_TLS_CERT_FILE"] ?? "";
  const keyFile = env["WORKER_TLS_KEY_FILE"] ?? "";
  const caFile = env["WORKER_TLS_CA_FILE"] ?? "";
  if ((certFile === "") !== (keyFile === "")) {
    throw new Error("WORKER_TLS_CERT_FILE and WORKER_TLS_KEY_FILE must be set together");
  }
  if (certFile !== "" || caFile !== "") {
    o.tls = {};
    if (certFile !== "") {
      o.tls.certFile = certFile;
      o.tls.keyFile = keyFile;
    }
    if (caFile !== "") {
      o.tls.caFile = caFile;
    }
  }
  return o;
}
