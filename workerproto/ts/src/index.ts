// The TypeScript worker SDK for Converge: the same protocol and semantics as
// the Go SDK (core/worker). A worker hosts providers, one per served
// (kind, version), dials IN to a broker over Connect and runs the tasks it is
// sent; it never touches the database.
export type {
  Child,
  ChildSummary,
  Condition,
  Edge,
  EffectiveConfig,
  KindVersion,
  Operation,
  Outcome,
  Provider,
  ProviderConfig,
  Reaction,
  Ref,
  Request,
  Resource,
  Stage,
  ValueFlow,
} from "./provider.js";
export { TerminalError, isTerminal, terminal } from "./provider.js";
export { effective } from "./config.js";
export { optionsFromEnv, parseDuration } from "./env.js";
export { loggerFromEnv, newLogger, nopLogger, type Fields, type Level, type Logger } from "./log.js";
export type { TLSFiles } from "./transport.js";
export { Worker, completion, serve, shutdownSignal, type WorkerOptions } from "./worker.js";
