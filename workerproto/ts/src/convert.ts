import { create } from "@bufbuild/protobuf";

import { childrenFromColumns } from "./childcols.js";
import { CompositionBuilder } from "./composecols.js";
import { effective } from "./config.js";
import * as pb from "./gen/converge/worker/v1/worker_pb.js";
import { parseJSON, toJSON } from "./json.js";
import type { Child, Edge, Outcome, ProviderConfig, Request, Stage } from "./provider.js";

export function configFromProto(c: pb.ProviderConfig | undefined): ProviderConfig | undefined {
  if (c === undefined) {
    return undefined;
  }
  return {
    kind: c.kind,
    name: c.name,
    isDefault: c.isDefault,
    spec: parseJSON(c.specJson, `providerconfig ${c.name} spec`),
    data: parseJSON(c.dataJson, `providerconfig ${c.name} data`),
    revision: Number(c.revision),
  };
}

const stages: Partial<Record<pb.Stage, Stage>> = {
  [pb.Stage.COMPOSE]: "compose",
  [pb.Stage.WORK]: "work",
  [pb.Stage.ROLLUP]: "rollup",
  [pb.Stage.DELETE]: "delete",
  [pb.Stage.OPERATE]: "operate",
  [pb.Stage.REACT]: "react",
};

/**
 * requestFromTask builds the provider's view of a task; it throws on a
 * malformed task (a document that is not JSON, rollup columns that do not
 * add up), which the worker fails terminally.
 */
export function requestFromTask(t: pb.StageTask, def: ProviderConfig | undefined): Request {
  const r = t.resource ?? create(pb.ResourceSchema);
  const stage = stages[t.stage];
  if (stage === undefined) {
    throw new Error(`task ${t.taskId} has an unknown stage ${t.stage}`);
  }
  const req: Request = {
    stage,
    reaction: t.reaction,
    resource: {
      id: r.id,
      kind: r.kind,
      version: r.version,
      name: r.name,
      labels: { ...r.labels },
      spec: parseJSON(r.specJson, "resource spec"),
      status: parseJSON(r.statusJson, "resource status"),
      generation: Number(r.generation),
      ownerId: r.ownerId,
      finalizers: [...r.finalizers],
    },
    config: effective(def, configFromProto(t.config)),
  };
  const x = t.request;
  switch (x.case) {
    case "work":
      req.trigger = x.value.trigger;
      break;
    case "rollup":
      // A broker sends the subtree as columns to a worker that asked for
      // them, and as a list otherwise (an older broker, a relayed stage).
      if (x.value.compact !== undefined) {
        req.children = childrenFromColumns(x.value.compact, r.id);
        break;
      }
      req.children = x.value.children.map((c) => ({
        id: c.id,
        kind: c.kind,
        name: c.name,
        phase: c.phase,
        healthOk: c.healthOk,
        status: parseJSON(c.statusJson, `child ${c.kind}/${c.name} status`),
        ownerId: c.ownerId,
      }));
      break;
    case "delete":
      req.finalizer = x.value.finalizer;
      break;
    case "operate":
      req.operation = { id: x.value.operationId, verb: x.value.verb, input: parseJSON(x.value.inputJson, "operation input") };
      break;
    case "react":
      req.react = {
        transition: x.value.transition,
        watchKind: x.value.watchKind,
        binding: x.value.bindingName,
        dedupToken: x.value.dedupToken,
        generation: Number(x.value.generation),
      };
      break;
    default:
      break;
  }
  return req;
}

/**
 * outcomeToProto converts a handler's outcome for the wire; it throws on
 * what JSON cannot carry. A composition goes in columns (Outcome.composition)
 * when it fits them, else as children and edges; the worker spells columns
 * out as lists when it sends them to a broker that does not take them
 * (Subscribed.compact_compositions), so a result kept for redelivery keeps
 * its columns for a later broker that does.
 */
export function outcomeToProto(o: Outcome | undefined | null): pb.Outcome {
  const v: Outcome = o ?? {};
  const out = create(pb.OutcomeSchema, {
    statusJson: toJSON(v.status, "outcome status"),
    operationOutputJson: toJSON(v.operationOutput, "outcome operationOutput"),
  });
  if (v.healthOk !== undefined) {
    out.healthOk = v.healthOk;
  }
  for (const c of v.conditions ?? []) {
    out.conditions.push(create(pb.ConditionSchema, { type: c.type, status: c.status, reason: c.reason ?? "", message: c.message ?? "" }));
  }
  const children = v.children ?? [];
  const edges = v.edges ?? [];
  const specs = children.map((c) => toJSON(c.spec, `child ${c.kind}/${c.name} spec`));
  if (children.length > 0) {
    out.composition = compositionColumns(children, specs, edges);
  }
  if (out.composition === undefined) {
    children.forEach((c, i) => {
      out.children.push(
        create(pb.ChildSchema, {
          kind: c.kind,
          version: c.version ?? "",
          name: c.name,
          labels: { ...(c.labels ?? {}) },
          specJson: specs[i] as Uint8Array,
          providerConfigRef: c.providerConfigRef ?? "",
        }),
      );
    });
    for (const e of edges) {
      out.edges.push(
        create(pb.EdgeSchema, {
          dependentKind: e.dependent.kind,
          dependentName: e.dependent.name,
          dependencyKind: e.dependency.kind,
          dependencyName: e.dependency.name,
          valueFlows: (e.valueFlows ?? []).map((f) => create(pb.ValueFlowSchema, { srcField: f.srcField, depField: f.depField })),
        }),
      );
    }
  }
  for (const c of v.configs ?? []) {
    out.configs.push(
      create(pb.ProviderConfigSchema, {
        kind: c.kind,
        name: c.name,
        isDefault: c.isDefault ?? false,
        specJson: toJSON(c.spec, `config ${c.name} spec`),
        dataJson: toJSON(c.data, `config ${c.name} data`),
        revision: BigInt(c.revision ?? 0),
      }),
    );
  }
  return out;
}

/**
 * compositionColumns writes children (their specs already serialised) and
 * edges in columns, the form a broker that takes them reads without an
 * allocation per child; undefined when the composition does not fit columns
 * (CompositionBuilder.finish): it then goes as lists.
 */
function compositionColumns(children: readonly Child[], specs: readonly Uint8Array[], edges: readonly Edge[]): pb.CompositionColumns | undefined {
  const b = new CompositionBuilder();
  children.forEach((c, i) => b.child(c.kind, c.version ?? "", c.name, c.labels, specs[i] as Uint8Array, c.providerConfigRef ?? ""));
  for (const e of edges) {
    b.edge(e.dependent, e.dependency, e.valueFlows);
  }
  return b.finish();
}
