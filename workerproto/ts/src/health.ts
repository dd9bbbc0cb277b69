// The worker's probes, served on WorkerOptions.healthAddr (WORKER_HEALTH_ADDR)
// when it is set, as the Go SDK's (core/worker/health.go), for a
// Deployment's livenessProbe and readinessProbe:
//
//   - /livez answers 200 while run runs. It never depends on a broker: a
//     broker outage must not restart every worker.
//   - /readyz answers 200 only while a session is subscribed to a broker and
//     the worker is not draining, 503 with the reason otherwise.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";

/** splitHostPort reads "host:port", ":port" or "[v6]:port" as Go's net.Listen takes it. */
export function splitHostPort(addr: string): { host: string | undefined; port: number } {
  const at = addr.lastIndexOf(":");
  const portText = at < 0 ? "" : addr.slice(at + 1);
  const port = Number(portText);
  if (at < 0 || !/^\d+$/.test(portText) || port > 65_535) {
    throw new Error(`WORKER_HEALTH_ADDR=${JSON.stringify(addr)}: want host:port or :port`);
  }
  let host = addr.slice(0, at);
  if (host.startsWith("[") && host.endsWith("]")) {
    host = host.slice(1, -1);
  }
  return { host: host === "" ? undefined : host, port };
}

/** Health is the probes' server while run runs. */
export class Health {
  private constructor(private readonly server: Server) {}

  /**
   * listen binds addr and serves the probes; unready says why /readyz fails
   * ("" when ready). A bad or busy address rejects, naming WORKER_HEALTH_ADDR.
   */
  static async listen(addr: string, unready: () => string): Promise<Health> {
    const { host, port } = splitHostPort(addr);
    const server = createServer((req, res) => {
      const path = (req.url ?? "").split("?")[0];
      if (req.method !== "GET" || (path !== "/livez" && path !== "/readyz")) {
        res.writeHead(404, { "Content-Type": "text/plain; charset=utf-8" }).end("not found\n");
        return;
      }
      const reason = path === "/readyz" ? unready() : "";
      res.writeHead(reason === "" ? 200 : 503, { "Content-Type": "text/plain; charset=utf-8" }).end(`${reason || "ok"}\n`);
    });
    server.headersTimeout = 5_000;
    await new Promise<void>((resolve, reject) => {
      const fail = (err: Error): void => reject(new Error(`WORKER_HEALTH_ADDR=${JSON.stringify(addr)}: ${err.message}`, { cause: err }));
      server.once("error", fail);
      server.listen(port, host, () => {
        server.off("error", fail);
        resolve();
      });
    });
    return new Health(server);
  }

  /** address is the bound host:port (the port resolved when 0 was asked for). */
  get address(): string {
    const a = this.server.address() as AddressInfo;
    return a.family === "IPv6" ? `[${a.address}]:${a.port}` : `${a.address}:${a.port}`;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}
