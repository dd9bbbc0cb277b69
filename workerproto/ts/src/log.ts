// A small structured logger shaped like the Go side's zerolog output:
// LOG_FORMAT=json writes one JSON object per line, anything else a console
// line; LOG_LEVEL is debug, info, warn or error (default info).

export type Level = "debug" | "info" | "warn" | "error";
export type Fields = Record<string, unknown>;

/** Logger is what the SDK logs through; pass your own to WorkerOptions.logger. */
export interface Logger {
  debug(msg: string, fields?: Fields): void;
  info(msg: string, fields?: Fields): void;
  warn(msg: string, fields?: Fields): void;
  error(msg: string, fields?: Fields): void;
  /** with returns a logger adding fields to every line. */
  with(fields: Fields): Logger;
}

const order: Record<Level, number> = { debug: 0, info: 1, warn: 2, error: 3 };
const short: Record<Level, string> = { debug: "DBG", info: "INF", warn: "WRN", error: "ERR" };

function render(v: unknown): unknown {
  if (v instanceof Error) {
    return v.message;
  }
  if (typeof v === "bigint") {
    return Number(v);
  }
  return v;
}

class StreamLogger implements Logger {
  constructor(
    private readonly min: number,
    private readonly json: boolean,
    private readonly base: Fields,
    private readonly write: (line: string) => void,
  ) {}

  private log(level: Level, msg: string, fields?: Fields): void {
    if (order[level] < this.min) {
      return;
    }
    const all: Fields = { ...this.base, ...fields };
    if (this.json) {
      const obj: Fields = { level, time: new Date().toISOString() };
      for (const [k, v] of Object.entries(all)) {
        obj[k] = render(v);
      }
      obj["message"] = msg;
      this.write(JSON.stringify(obj) + "\n");
      return;
    }
    const kv = Object.entries(all)
      .map(([k, v]) => `${k}=${typeof render(v) === "string" ? String(render(v)) : JSON.stringify(render(v))}`)
      .join(" ");
    const time = new Date().toTimeString().slice(0, 8);
    this.write(`${time} ${short[level]} ${msg}${kv === "" ? "" : " " + kv}\n`);
  }

  debug(msg: string, fields?: Fields): void {
    this.log("debug", msg, fields);
  }
  info(msg: string, fields?: Fields): void {
    this.log("info", msg, fields);
  }
  warn(msg: string, fields?: Fields): void {
    this.log("warn", msg, fields);
  }
  error(msg: string, fields?: Fields): void {
    this.log("error", msg, fields);
  }
  with(fields: Fields): Logger {
    return new StreamLogger(this.min, this.json, { ...this.base, ...fields }, this.write);
  }
}

/**
 * newLogger builds a logger writing to stderr (or write). It throws on an
 * unknown format or level, naming the variable.
 */
export function newLogger(format = "", level = "", write: (line: string) => void = (l) => process.stderr.write(l)): Logger {
  const lvl = (level === "" ? "info" : level.toLowerCase()) as Level;
  if (!(lvl in order)) {
    throw new Error(`LOG_LEVEL ${JSON.stringify(level)}: want debug, info, warn or error`);
  }
  const f = format.toLowerCase();
  if (f !== "json" && f !== "" && f !== "text" && f !== "console") {
    throw new Error(`LOG_FORMAT ${JSON.stringify(format)}: want json or text`);
  }
  return new StreamLogger(order[lvl], f === "json", {}, write);
}

/** loggerFromEnv is newLogger with LOG_FORMAT and LOG_LEVEL. */
export function loggerFromEnv(env: Record<string, string | undefined> = process.env): Logger {
  return newLogger(env["LOG_FORMAT"] ?? "", env["LOG_LEVEL"] ?? "");
}

/** A logger that drops everything. */
export const nopLogger: Logger = {
  debug() {},
  info() {},
  warn() {},
  error() {},
  with() {
    return nopLogger;
  },
};
