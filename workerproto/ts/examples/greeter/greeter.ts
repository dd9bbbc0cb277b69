// The tsgreeting kind: the Go guide's greeter (examples/greeter), in
// TypeScript. docs/implementing-a-provider.md shows this file.
import { terminal, type Outcome, type Provider, type Request } from "../../src/index.js";

/** The kind this provider serves. */
export const kind = "tsgreeting";

/** A tsgreeting's desired state. */
export interface Spec {
  name: string;
  shout?: boolean;
}

/** What a reconcile reports. */
export interface Status {
  message: string;
}

/** The kind's providerconfig spec: how, not what. */
export interface Config {
  salutation?: string;
}

/** The kind's manifest (its CRD), applied with conctl apply --type manifest. */
export const manifest = {
  kind,
  description: "Greets spec.name from a TypeScript worker; the providerconfig picks the salutation.",
  spec_schema: {
    type: "object",
    properties: {
      name: { type: "string", minLength: 1, maxLength: 63, description: "who to greet" },
      shout: { type: "boolean" },
    },
    required: ["name"],
    additionalProperties: false,
  },
  status_schema: {
    type: "object",
    properties: { message: { type: "string" } },
    required: ["message"],
    additionalProperties: false,
  },
  config_schema: {
    type: "object",
    properties: {
      salutation: { type: "string", maxLength: 20, description: "the word to greet with (default Hello)" },
    },
    additionalProperties: false,
  },
  reactions: [{ name: "work", trigger: "specChange", emits: ["status", "conditions"] }],
  task_deadline_secs: 30,
};

/** greeter serves tsgreeting/v1. */
export const greeter: Provider = {
  kind: { kind, version: "v1" },
  // Runs the "work" reaction: it computes the greeting.
  work(req: Request): Outcome {
    const spec = req.resource.spec as Spec | undefined;
    if (typeof spec?.name !== "string" || spec.name === "") {
      throw terminal(new Error("spec.name is missing"));
    }
    const cfg = (req.config.spec ?? {}) as Config;
    let message = `${cfg.salutation ?? "Hello"}, ${spec.name}!`;
    if (spec.shout) {
      message = message.toUpperCase();
    }
    const status: Status = { message };
    return { status };
  },
};
