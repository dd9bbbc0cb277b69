// plannedEnd: a broker's planned end of a session (it drained, or the
// session reached WORKER_SESSION_MAX_AGE) is told apart from a lost stream
// by its code and message, as the Go SDK does (workerproto.PlannedSessionEnd).
import assert from "node:assert/strict";
import { test } from "node:test";

import { Code, ConnectError } from "@connectrpc/connect";

import { PLANNED_SESSION_END, plannedEnd } from "../src/worker.js";

test("plannedEnd knows the broker's planned ends from failures", () => {
  assert.equal(PLANNED_SESSION_END, "session ended by the broker");
  assert.ok(plannedEnd(new ConnectError("session ended by the broker: the session reached WORKER_SESSION_MAX_AGE; reconnect", Code.Unavailable)));
  assert.ok(!plannedEnd(new ConnectError("connection reset", Code.Unavailable)), "a lost connection is not planned");
  assert.ok(!plannedEnd(new ConnectError("session ended by the broker", Code.Internal)), "only Unavailable is");
  assert.ok(!plannedEnd(new Error("session ended by the broker")), "only a Connect status is");
  assert.ok(!plannedEnd(undefined));
});
