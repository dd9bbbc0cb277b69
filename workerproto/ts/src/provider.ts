// The provider's view of the protocol: what a handler is given and returns.
// These mirror the Go SDK (core/worker) type for type; JSON documents are
// parsed values here (the wire carries them as UTF-8 JSON bytes).

/** KindVersion names one served (kind, version) pair. */
export interface KindVersion {
  kind: string;
  /** The kind's version, "v1" unless the manifest names another. */
  version: string;
}

/** The part of the reconcile pipeline a task runs. */
export type Stage = "compose" | "work" | "rollup" | "delete" | "operate" | "react";

/**
 * The snapshot of the resource a task is about. The identity (id, kind,
 * version, name, generation, ownerId) is always set; spec, status, labels
 * and finalizers only when the task's reaction reads them (its manifest's
 * reads; a reaction that declares none reads all four); a part it does
 * not read is undefined (spec, status), {} (labels) or [] (finalizers).
 */
export interface Resource {
  id: string;
  kind: string;
  version: string;
  name: string;
  labels: Record<string, string>;
  /** The parsed spec (undefined when empty). */
  spec: unknown;
  /** The parsed stored status (undefined when empty). */
  status: unknown;
  generation: number;
  ownerId: string;
  finalizers: string[];
}

/** A providerconfig document. */
export interface ProviderConfig {
  kind: string;
  name: string;
  isDefault: boolean;
  /** The parsed spec (the knobs the provider reads). */
  spec: unknown;
  /** The parsed bundle. */
  data: unknown;
  /** Changes whenever the document changes. */
  revision: number;
}

/**
 * The config a task runs with: the attached config's spec merged key by key
 * over the default's (the attached one wins per key), and the attached bundle
 * replacing the default's whole.
 */
export interface EffectiveConfig {
  /** The attached config's name, or the default's ("" when neither). */
  name: string;
  spec: unknown;
  data: unknown;
}

/** One descendant as a rollup sees it. */
export interface ChildSummary {
  id: string;
  kind: string;
  name: string;
  phase: string;
  healthOk: boolean;
  /**
   * The parsed status (undefined when empty, and for every child when the
   * rollup's manifest reads leave out childStatus).
   */
  status: unknown;
  /** The owning resource: the rollup's own, or another descendant. */
  ownerId: string;
}

/** The operator verb an OPERATE task runs. */
export interface Operation {
  id: string;
  verb: string;
  input: unknown;
}

/** The lifecycle transition a REACT task delivers. */
export interface Reaction {
  /** One of created, synced, degraded, failed, deleted. */
  transition: string;
  /**
   * The watched resource's kind: req.resource carries the watched resource's
   * id, name and parts, but the reactor's own kind and version. A name is
   * unique within its kind only.
   */
  watchKind: string;
  binding: string;
  /**
   * Stable across redeliveries (<id>:<transition>:<generation>:<binding>):
   * key idempotent side effects on it.
   */
  dedupToken: string;
  generation: number;
}

/** One task as a provider sees it. */
export interface Request {
  stage: Stage;
  /** The manifest reaction's name. */
  reaction: string;
  resource: Resource;
  config: EffectiveConfig;
  /** What pended a WORK task: specChange or resync. */
  trigger?: string;
  /** Set for ROLLUP: the settled subtree. */
  children?: ChildSummary[];
  /** Set for DELETE: the finalizer to tear down. */
  finalizer?: string;
  /** Set for OPERATE. */
  operation?: Operation;
  /** Set for REACT. */
  react?: Reaction;
  /** The task deadline (task_deadline_secs) as an epoch-ms time, if any. */
  deadline?: number;
}

/** A Kubernetes-style condition. */
export interface Condition {
  type: string;
  /** True, False or Unknown. */
  status: "True" | "False" | "Unknown";
  reason?: string;
  message?: string;
}

/** Copies an upstream status field into a dependent's spec. */
export interface ValueFlow {
  /** A JSON pointer into the upstream's status. */
  srcField: string;
  /** A JSON pointer into the dependent's spec. */
  depField: string;
}

/** One desired composed child. */
export interface Child {
  kind: string;
  version?: string;
  name: string;
  labels?: Record<string, string>;
  spec?: unknown;
  providerConfigRef?: string;
}

/** Names a resource by kind and name. */
export interface Ref {
  kind: string;
  name: string;
}

/** Orders dependent after dependency and carries value flows. */
export interface Edge {
  dependent: Ref;
  dependency: Ref;
  valueFlows?: ValueFlow[];
}

/**
 * What a handler returns; the core applies only the parts the reaction's
 * manifest emits declares.
 */
export interface Outcome {
  /** The observed status (serialised with JSON.stringify). */
  status?: unknown;
  /** Unset leaves health unchanged. */
  healthOk?: boolean;
  conditions?: Condition[];
  children?: Child[];
  edges?: Edge[];
  configs?: Array<Partial<ProviderConfig> & { kind: string; name: string }>;
  operationOutput?: unknown;
}

/**
 * A provider serves ONE (kind, version). It declares no schema, reactions or
 * policy (those live in the kind's manifest); it only runs handler code,
 * keyed by the reaction name the broker ships with each task.
 */
export interface Provider {
  /** The one (kind, version) served. */
  readonly kind: KindVersion;
  /**
   * Runs one task: the reaction named by req.reaction at req.stage. Throw (or
   * reject with) terminal(err) for a failure retrying cannot fix: the resource
   * goes Failed for its current generation. Any other error is transient and
   * retried with backoff. signal aborts at the task deadline, and when a
   * shutdown's drain budget is spent.
   */
  work(req: Request, signal: AbortSignal): Promise<Outcome> | Outcome;
  /**
   * Called with the kind's default providerconfig when first pulled and on
   * every edit (undefined when the default was deleted). Keep it quick.
   */
  onConfig?(cfg: ProviderConfig | undefined): void;
  /** Whether the provider can take work now (default: always). */
  ready?(): boolean;
}

/** Marks a failure retrying cannot fix. */
export class TerminalError extends Error {
  override readonly name = "TerminalError";
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/**
 * Wraps err as a terminal failure: the resource goes Failed for its current
 * generation and is not retried until its spec changes.
 */
export function terminal(err: unknown): TerminalError {
  if (err instanceof TerminalError) {
    return err;
  }
  return new TerminalError(err instanceof Error ? err.message : String(err), { cause: err });
}

/** Reports whether err is (or wraps, through cause) a terminal failure. */
export function isTerminal(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e !== undefined && e !== null && depth < 16; depth++) {
    if (e instanceof TerminalError) {
      return true;
    }
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}
