// Serves the tsgreeting kind; --print-manifest prints its CRD.
import { loggerFromEnv, optionsFromEnv, serve, shutdownSignal } from "../../src/index.js";
import { greeter, manifest } from "./greeter.js";

async function main(args: string[]): Promise<void> {
  if (args.length === 1 && args[0] === "--print-manifest") {
    console.log(JSON.stringify(manifest, null, 2));
    return;
  }
  const url = process.env["BROKER_URL"] ?? "";
  const opts = { ...optionsFromEnv(), logger: loggerFromEnv() };
  await serve(shutdownSignal(), url, opts, greeter);
}

main(process.argv.slice(2)).catch((err: unknown) => {
  console.error("tsgreeter:", err instanceof Error ? err.message : err);
  process.exit(1);
});
