import type { EffectiveConfig, ProviderConfig } from "./provider.js";

/** present reports whether a parsed JSON value carries anything (not empty, not null). */
function present(v: unknown): boolean {
  return v !== undefined && v !== null;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/**
 * effective computes the config a task runs with: attached spec keys win over
 * the default's, an attached bundle (data) replaces the default's whole. It
 * throws when a spec to merge is not a JSON object.
 */
export function effective(def: ProviderConfig | undefined, attached: ProviderConfig | undefined): EffectiveConfig {
  const out: EffectiveConfig = { name: def?.name ?? "", spec: def?.spec, data: def?.data };
  if (attached === undefined) {
    return out;
  }
  out.name = attached.name;
  if (present(attached.data)) {
    out.data = attached.data;
  }
  if (!present(attached.spec)) {
    return out;
  }
  if (!present(out.spec)) {
    out.spec = attached.spec;
    return out;
  }
  if (!isObject(out.spec)) {
    throw new Error(`default config "${def?.name ?? ""}" spec is not an object`);
  }
  if (!isObject(attached.spec)) {
    throw new Error(`config "${attached.name}" spec is not an object`);
  }
  out.spec = { ...out.spec, ...attached.spec };
  return out;
}

/**
 * Defaults caches each kind's default providerconfig: primed by a pull before
 * every session, refreshed by every broker push.
 */
export class Defaults {
  private readonly cfg = new Map<string, ProviderConfig>();

  get(kind: string): ProviderConfig | undefined {
    return this.cfg.get(kind);
  }

  /** set stores cfg (or forgets the kind's default) and reports whether anything changed. */
  set(kind: string, cfg: ProviderConfig | undefined, deleted: boolean): boolean {
    const old = this.cfg.get(kind);
    if (deleted || cfg === undefined) {
      return this.cfg.delete(kind);
    }
    if (
      old !== undefined &&
      old.revision === cfg.revision &&
      JSON.stringify(old.spec) === JSON.stringify(cfg.spec) &&
      JSON.stringify(old.data) === JSON.stringify(cfg.data)
    ) {
      return false;
    }
    this.cfg.set(kind, cfg);
    return true;
  }
}
