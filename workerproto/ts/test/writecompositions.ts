// writecompositions is run by the Go test TestTSSDK_WritesCompositionsAsTheGoBuilder
// (workerproto/ts/compositions_test.go): it reads a JSON array of handler
// outcomes (the SDK's Outcome, as JSON) on stdin and prints, for each, the
// base64 Outcome message the worker would send ({"outcome": "..."}) or the
// conversion's error ({"error": "..."}), so the Go test can read the TS
// writer's columns with the Go reader and hold them to the Go writer's.
import { readFileSync } from "node:fs";

import { toBinary } from "@bufbuild/protobuf";

import { outcomeToProto } from "../src/convert.js";
import * as pb from "../src/gen/converge/worker/v1/worker_pb.js";
import type { Outcome } from "../src/provider.js";

const outcomes = JSON.parse(readFileSync(0, "utf8")) as Outcome[];
const out = outcomes.map((o) => {
  try {
    return { outcome: Buffer.from(toBinary(pb.OutcomeSchema, outcomeToProto(o))).toString("base64") };
  } catch (err) {
    return { error: err instanceof Error ? err.message : String(err) };
  }
});
process.stdout.write(JSON.stringify(out) + "\n");
