// Kinds as the dashboard shows them.
import type { KindPolicyFragment, KindSummaryFragment, Outcome, Trigger } from '../gql/graphql';

const TRIGGER_TEXT: Record<Trigger, string> = {
  SPEC_CHANGE: 'spec change',
  CHILDREN_SETTLED: 'children settled',
  DELETE_REQUESTED: 'delete requested',
  OPERATION: 'operation',
  REACTOR: 'reactor',
  RESYNC: 'resync',
};

export function triggerText(t: Trigger): string {
  return TRIGGER_TEXT[t] ?? t;
}

export function outcomesText(o: readonly Outcome[]): string {
  return o.map((x) => x.toLowerCase().replace(/_/g, ' ')).join(', ');
}

/** The role a reaction plays, named as the manifest model names it. */
export function reactionRole(r: KindSummaryFragment['reactions'][number]): string {
  const has = (o: Outcome) => r.emits.includes(o);
  switch (r.trigger) {
    case 'SPEC_CHANGE':
      return has('CHILDREN') ? 'composer' : 'worker';
    case 'CHILDREN_SETTLED':
      return 'status rollup';
    case 'DELETE_REQUESTED':
      return 'finalizer teardown';
    case 'OPERATION':
      return `operator verb ${r.verb ?? ''}`.trim();
    case 'REACTOR':
      return 'reactor';
    case 'RESYNC':
      return 'resync';
  }
}

export interface PolicyDraft {
  maxInflight: string;
  taskDeadlineSecs: string;
  resyncIntervalSecs: string;
  resyncRecomposes: boolean;
  orphanGraceSecs: string;
  maxTransientAttempts: string;
}

export function policyDraft(p: KindPolicyFragment): PolicyDraft {
  return {
    maxInflight: String(p.maxInflight),
    taskDeadlineSecs: String(p.taskDeadlineSecs),
    resyncIntervalSecs: String(p.resyncIntervalSecs),
    resyncRecomposes: p.resyncRecomposes,
    orphanGraceSecs: String(p.orphanGraceSecs),
    maxTransientAttempts: String(p.maxTransientAttempts),
  };
}

/**
 * rebaseDraft moves a draft from the served policy it was started from (old)
 * to a newly served one (next): a field the user left as served takes the
 * new value, an edited field keeps the edit.
 */
export function rebaseDraft(draft: PolicyDraft, old: PolicyDraft, next: PolicyDraft): PolicyDraft {
  const out = { ...draft };
  for (const k of Object.keys(next) as Array<keyof PolicyDraft>) {
    if (draft[k] === old[k]) (out as Record<keyof PolicyDraft, string | boolean>)[k] = next[k];
  }
  return out;
}

export type PolicyField = 'maxInflight' | 'taskDeadlineSecs' | 'resyncIntervalSecs' | 'orphanGraceSecs' | 'maxTransientAttempts';

/** The largest value a policy field takes (the server's bound, a Postgres integer). */
export const MAX_POLICY_INT = 2147483647;

/**
 * policyInput turns the form into the partial update the server takes:
 * only changed fields are sent; each must be a whole number ≥ 0.
 */
export function policyInput(draft: PolicyDraft, current: KindPolicyFragment): { input: Partial<KindPolicyFragment>; errors: Partial<Record<PolicyField, string>> } {
  const input: Partial<KindPolicyFragment> = {};
  const errors: Partial<Record<PolicyField, string>> = {};
  for (const f of ['maxInflight', 'taskDeadlineSecs', 'resyncIntervalSecs', 'orphanGraceSecs', 'maxTransientAttempts'] as const) {
    const t = draft[f].trim();
    if (!/^\d+$/.test(t)) {
      errors[f] = 'a whole number, 0 or more';
      continue;
    }
    const n = Number(t);
    if (n > MAX_POLICY_INT) {
      errors[f] = `at most ${MAX_POLICY_INT.toLocaleString('en-US')}`;
      continue;
    }
    if (n !== current[f]) input[f] = n;
  }
  if (draft.resyncRecomposes !== current.resyncRecomposes) input.resyncRecomposes = draft.resyncRecomposes;
  return { input, errors };
}

export const MANIFEST_TEMPLATE = `{
  "kind": "example",
  "spec_schema": { "type": "object", "properties": { "size": { "type": "integer" } } },
  "reactions": [
    { "name": "work", "trigger": "specChange", "emits": ["status"] }
  ],
  "max_inflight": 0
}
`;

/** A refused manifest apply: the stored resources and fields its new spec_schema would break. */
export interface BreakingChange {
  message: string;
  resourceCount: number;
  resources: string[];
  fields: string[];
}

/** breakingChange picks the schema-stability gate's refusal out of an API error (null when it is not one). */
export function breakingChange(err: { errors: readonly { message: string; extensions?: Record<string, unknown> }[] } | null | undefined): BreakingChange | null {
  const e = err?.errors.find((x) => x.extensions?.rule === 'breaking_change');
  if (!e) return null;
  const x = e.extensions ?? {};
  const strings = (v: unknown) => (Array.isArray(v) ? v.filter((s): s is string => typeof s === 'string') : []);
  return { message: e.message, resourceCount: typeof x.resourceCount === 'number' ? x.resourceCount : 0, resources: strings(x.resources), fields: strings(x.fields) };
}
