import { readFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import type * as http2 from "node:http2";

import { Code, ConnectError, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node";

/** TLS material for https:// brokers: file paths, re-read on every reconnect. */
export interface TLSFiles {
  /** The client certificate for mutual TLS (WORKER_TLS_CERT_FILE), with keyFile. */
  certFile?: string;
  /** The client key (WORKER_TLS_KEY_FILE), with certFile. */
  keyFile?: string;
  /** The CA that verifies the broker (WORKER_TLS_CA_FILE); unset = the system roots. */
  caFile?: string;
}

/** checkBrokerURL validates a broker URL the way the Go SDK does. */
export function checkBrokerURL(baseUrl: string): URL {
  let u: URL;
  try {
    u = new URL(baseUrl);
  } catch {
    throw new Error(`broker url ${JSON.stringify(baseUrl)}: scheme must be http or https`);
  }
  if (u.protocol !== "http:" && u.protocol !== "https:") {
    throw new Error(`broker url ${JSON.stringify(baseUrl)}: scheme must be http or https`);
  }
  return u;
}

/**
 * Credential presents the worker's bearer token on every call: token, else
 * the first line of file, re-read on every call so a rotated file applies at
 * the next reconnect.
 */
export class Credential {
  constructor(
    private readonly token = "",
    private readonly file = "",
  ) {}

  async value(): Promise<string> {
    if (this.token !== "" || this.file === "") {
      return this.token;
    }
    let b: string;
    try {
      b = await readFile(this.file, "utf8");
    } catch (err) {
      throw new Error(`read WORKER_TOKEN_FILE: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
    }
    const token = (b.split("\n")[0] ?? "").trim();
    if (token === "") {
      throw new Error(`WORKER_TOKEN_FILE ${this.file}: its first line is empty`);
    }
    return token;
  }

  interceptor(): Interceptor {
    return (next) => async (req) => {
      let t: string;
      try {
        t = await this.value();
      } catch (err) {
        throw new ConnectError(err instanceof Error ? err.message : String(err), Code.Unauthenticated);
      }
      if (t !== "") {
        req.header.set("Authorization", `Bearer ${t}`);
      }
      return next(req);
    };
  }
}

/** A transport for one session, and the HTTP/2 connection to close after it. */
export interface SessionTransport {
  transport: Transport;
  close(): void;
}

/**
 * dial builds one session's Connect transport: HTTP/2 (cleartext for http://,
 * TLS for https://) with 15 s pings so a dead broker is noticed, the bearer
 * token on every call and the message size bound both ways.
 */
export function dial(baseUrl: string, cred: Credential, tls: TLSFiles | undefined, maxMessageBytes: number): SessionTransport {
  const u = checkBrokerURL(baseUrl);
  const nodeOptions: http2.SecureClientSessionOptions = {};
  if (u.protocol === "https:" && tls !== undefined) {
    if (tls.caFile) {
      nodeOptions.ca = readFileSync(tls.caFile);
    }
    if (tls.certFile && tls.keyFile) {
      nodeOptions.cert = readFileSync(tls.certFile);
      nodeOptions.key = readFileSync(tls.keyFile);
    }
  }
  const sessionManager = new Http2SessionManager(u, { pingIntervalMs: 15_000, pingTimeoutMs: 15_000 }, nodeOptions);
  const transport = createConnectTransport({
    baseUrl,
    httpVersion: "2",
    sessionManager,
    interceptors: [cred.interceptor()],
    readMaxBytes: maxMessageBytes,
    writeMaxBytes: maxMessageBytes,
  });
  return { transport, close: () => sessionManager.abort() };
}
