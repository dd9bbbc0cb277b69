// optionsFromEnv, parseDuration, effective and the logger: the Go SDK's
// names, limits and merge rules.
import assert from "node:assert/strict";
import { test } from "node:test";

import { effective, isTerminal, newLogger, optionsFromEnv, parseDuration, terminal, TerminalError } from "../src/index.js";

test("optionsFromEnv reads the Go SDK's variables", () => {
  assert.deepEqual(
    optionsFromEnv({
      WORKER_ID: "w",
      WORKER_MAX_PARALLEL: "8",
      WORKER_DRAIN_TIMEOUT: "1m30s",
      WORKER_MAX_MESSAGE_BYTES: "2048",
      WORKER_TOKEN_FILE: "/run/token",
      WORKER_TLS_CERT_FILE: "c.pem",
      WORKER_TLS_KEY_FILE: "k.pem",
      WORKER_TLS_CA_FILE: "ca.pem",
      WORKER_HEALTH_ADDR: ":8081",
    }),
    {
      workerId: "w",
      maxParallel: 8,
      drainTimeoutMs: 90_000,
      maxMessageBytes: 2048,
      tokenFile: "/run/token",
      tls: { certFile: "c.pem", keyFile: "k.pem", caFile: "ca.pem" },
      healthAddr: ":8081",
    },
  );
  assert.deepEqual(optionsFromEnv({}), {});
  assert.deepEqual(optionsFromEnv({ WORKER_TOKEN: "t" }), { token: "t" });
});

test("optionsFromEnv refuses bad values, naming the variable and its limit", () => {
  const cases: Array<[Record<string, string>, RegExp]> = [
    [{ WORKER_MAX_PARALLEL: "0" }, /WORKER_MAX_PARALLEL="0": want a positive integer/],
    [{ WORKER_HEALTH_ADDR: "8081" }, /WORKER_HEALTH_ADDR="8081": want host:port or :port/],
    [{ WORKER_MAX_PARALLEL: "many" }, /WORKER_MAX_PARALLEL="many": want a positive integer/],
    [{ WORKER_DRAIN_TIMEOUT: "50" }, /WORKER_DRAIN_TIMEOUT="50": want a positive duration like 50s/],
    [{ WORKER_DRAIN_TIMEOUT: "0s" }, /WORKER_DRAIN_TIMEOUT="0s"/],
    [{ WORKER_MAX_MESSAGE_BYTES: "1023" }, /WORKER_MAX_MESSAGE_BYTES="1023": want a byte count of at least 1024/],
    [{ WORKER_TOKEN: "a", WORKER_TOKEN_FILE: "b" }, /WORKER_TOKEN and WORKER_TOKEN_FILE are both set: set one/],
    [{ WORKER_TLS_CERT_FILE: "c.pem" }, /WORKER_TLS_CERT_FILE and WORKER_TLS_KEY_FILE must be set together/],
  ];
  for (const [env, want] of cases) {
    assert.throws(() => optionsFromEnv(env), want);
  }
});

test("parseDuration reads Go durations", () => {
  assert.equal(parseDuration("50s"), 50_000);
  assert.equal(parseDuration("1h2m3s"), 3_723_000);
  assert.equal(parseDuration("250ms"), 250);
  assert.equal(parseDuration("1.5s"), 1500);
  for (const bad of ["", "5", "s", "5x", "-1s", "5s "]) {
    assert.equal(parseDuration(bad), undefined, bad);
  }
});

test("effective merges the attached spec over the default's by key and replaces the bundle whole", () => {
  const def = { kind: "k", name: "default", isDefault: true, spec: { a: 1, b: 1 }, data: { x: 1 }, revision: 1 };
  assert.deepEqual(effective(undefined, undefined), { name: "", spec: undefined, data: undefined });
  assert.deepEqual(effective(def, undefined), { name: "default", spec: { a: 1, b: 1 }, data: { x: 1 } });
  const att = { kind: "k", name: "att", isDefault: false, spec: { b: 2, c: 3 }, data: { y: 2 }, revision: 1 };
  assert.deepEqual(effective(def, att), { name: "att", spec: { a: 1, b: 2, c: 3 }, data: { y: 2 } });
  assert.deepEqual(effective(def, { ...att, spec: null, data: undefined }), { name: "att", spec: { a: 1, b: 1 }, data: { x: 1 } });
  assert.deepEqual(effective(undefined, att), { name: "att", spec: { b: 2, c: 3 }, data: { y: 2 } });
  assert.throws(() => effective(def, { ...att, spec: [1] }), /config "att" spec is not an object/);
});

test("terminal wraps, isTerminal follows causes", () => {
  const t = terminal(new Error("bad"));
  assert.ok(t instanceof TerminalError);
  assert.equal(t.message, "bad");
  assert.equal(terminal(t), t);
  assert.ok(isTerminal(new Error("outer", { cause: t })));
  assert.ok(!isTerminal(new Error("plain")));
  assert.ok(!isTerminal(undefined));
});

test("the logger writes JSON lines or console lines at the level asked, and refuses unknown settings", () => {
  const lines: string[] = [];
  const log = newLogger("json", "info", (l) => lines.push(l)).with({ worker_id: "w" });
  log.debug("hidden");
  log.info("shown", { n: 1n, err: new Error("boom") });
  assert.equal(lines.length, 1);
  const rec = JSON.parse(lines[0] as string) as Record<string, unknown>;
  assert.deepEqual([rec["level"], rec["worker_id"], rec["n"], rec["err"], rec["message"]], ["info", "w", 1, "boom", "shown"]);
  const text: string[] = [];
  newLogger("", "debug", (l) => text.push(l)).debug("hi", { k: "v" });
  assert.match(text[0] as string, /DBG hi k=v\n$/);
  assert.throws(() => newLogger("yaml"), /LOG_FORMAT "yaml": want json or text/);
  assert.throws(() => newLogger("", "loud"), /LOG_LEVEL "loud": want debug, info, warn or error/);
});
