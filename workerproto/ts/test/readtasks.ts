// readtasks is run by the Go test TestTSSDK_ReadsTheGoWritersColumns
// (workerproto/ts/childcols_test.go): it reads a JSON array of base64
// StageTask messages on stdin and prints, for each, the children the
// handler would be given ({"children": [...]}) or the conversion's error
// ({"error": "..."}), so the Go test can hold the TS reader to the Go one.
import { readFileSync } from "node:fs";

import { fromBinary } from "@bufbuild/protobuf";

import { requestFromTask } from "../src/convert.js";
import * as pb from "../src/gen/converge/worker/v1/worker_pb.js";

const tasks = JSON.parse(readFileSync(0, "utf8")) as string[];
const out = tasks.map((b64) => {
  try {
    return { children: requestFromTask(fromBinary(pb.StageTaskSchema, Buffer.from(b64, "base64")), undefined).children };
  } catch (err) {
    return { error: err instanceof Error ? err.message : String(err) };
  }
});
process.stdout.write(JSON.stringify(out) + "\n");
