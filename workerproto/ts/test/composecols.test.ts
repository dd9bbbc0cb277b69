// A composition in columns (Outcome.composition): what the builder writes
// spells back out, after a trip over the wire, as exactly the Child and
// Edge lists the worker sends a broker that does not take columns; label
// sets, config refs, value flows and outside dependencies are listed once
// by the Go writer's rules (workerproto/composecols); a composition columns
// cannot carry goes as lists; malformed columns are refused naming the
// column, with the Go Check's messages.
import assert from "node:assert/strict";
import { test } from "node:test";

import { create, fromBinary, toBinary, toJson } from "@bufbuild/protobuf";

import { checkComposition, CompositionBuilder, spellComposition, spelled, utf8Length } from "../src/composecols.js";
import { outcomeToProto } from "../src/convert.js";
import * as pb from "../src/gen/converge/worker/v1/worker_pb.js";
import type { Child, Edge, Outcome, Ref, ValueFlow } from "../src/index.js";

const enc = new TextEncoder();

interface Kid {
  kind: string;
  version: string;
  name: string;
  labels?: Record<string, string>;
  spec: string;
  configRef: string;
}

interface Link {
  dependent: Ref;
  dependency: Ref;
  flows: ValueFlow[];
}

/**
 * composition has what columns must carry (the Go test's fixture): two
 * kinds and a versioned one, children sharing a labels object and children
 * with equal labels in objects of their own, a child without labels and one
 * with an empty spec, a config ref on one child only (not the first), edges
 * to children (before and after them) and to a resource outside, with
 * shared, distinct and no value flows.
 */
function composition(): { children: Kid[]; edges: Link[] } {
  const team = { bom: "b1", team: "t0" };
  const flowsA = [{ srcField: "/account_id", depField: "/account_id" }];
  const children: Kid[] = [
    { kind: "account", version: "", name: "b1-t0-account", labels: team, spec: `{"team":"t0"}`, configRef: "" },
    { kind: "vpc", version: "v2", name: "b1-t0-vpc", labels: team, spec: `{"cidr":"10.0.0.0/24"}`, configRef: "eu" },
    { kind: "route", version: "", name: "b1-t0-route-0", labels: { bom: "b1", team: "t1" }, spec: `{"d":0}`, configRef: "" },
    { kind: "route", version: "", name: "b1-t0-route-1", labels: { bom: "b1", team: "t1" }, spec: "", configRef: "" },
    { kind: "route", version: "", name: "b1-t0-route-2", spec: `{}`, configRef: "" },
  ];
  const ref = (kind: string, name: string): Ref => ({ kind, name });
  const edges: Link[] = [
    { dependent: ref("vpc", "b1-t0-vpc"), dependency: ref("account", "b1-t0-account"), flows: flowsA },
    { dependent: ref("route", "b1-t0-route-0"), dependency: ref("vpc", "b1-t0-vpc"), flows: [{ srcField: "/vpc_id", depField: "/vpc_id" }] },
    { dependent: ref("route", "b1-t0-route-1"), dependency: ref("vpc", "b1-t0-vpc"), flows: [{ srcField: "/vpc_id", depField: "/vpc_id" }] },
    { dependent: ref("account", "b1-t0-account"), dependency: ref("network", "shared"), flows: [] },
    {
      dependent: ref("route", "b1-t0-route-2"),
      dependency: ref("network", "shared"),
      flows: [
        { srcField: "/a", depField: "/a" },
        { srcField: "/b", depField: "/c" },
      ],
    },
    // A dependency of the same name as a child but another kind is a
    // resource outside the composition.
    { dependent: ref("route", "b1-t0-route-2"), dependency: ref("subnet", "b1-t0-vpc"), flows: flowsA },
  ];
  return { children, edges };
}

/** build writes the composition, one edge before the children (an edge may come before its children). */
function build(children: Kid[], edges: Link[]): pb.CompositionColumns | undefined {
  const b = new CompositionBuilder();
  const [first, ...rest] = edges;
  if (first !== undefined) {
    b.edge(first.dependent, first.dependency, first.flows);
  }
  for (const c of children) {
    b.child(c.kind, c.version, c.name, c.labels, enc.encode(c.spec), c.configRef);
  }
  for (const e of rest) {
    b.edge(e.dependent, e.dependency, e.flows);
  }
  return b.finish();
}

function mustBuild(children: Kid[], edges: Link[]): pb.CompositionColumns {
  const cols = build(children, edges);
  assert.ok(cols !== undefined, "the composition fits columns");
  return cols;
}

/** lists is the composition as a worker sends it to a broker that does not take columns. */
function lists(children: Kid[], edges: Link[]): pb.Outcome {
  return create(pb.OutcomeSchema, {
    children: children.map((c) =>
      create(pb.ChildSchema, { kind: c.kind, version: c.version, name: c.name, labels: c.labels ?? {}, specJson: enc.encode(c.spec), providerConfigRef: c.configRef }),
    ),
    edges: edges.map((e) =>
      create(pb.EdgeSchema, {
        dependentKind: e.dependent.kind,
        dependentName: e.dependent.name,
        dependencyKind: e.dependency.kind,
        dependencyName: e.dependency.name,
        valueFlows: e.flows.map((f) => create(pb.ValueFlowSchema, f)),
      }),
    ),
  });
}

const overTheWire = (c: pb.CompositionColumns): pb.CompositionColumns => fromBinary(pb.CompositionColumnsSchema, toBinary(pb.CompositionColumnsSchema, c));

/** outcomeJSON is o in proto JSON, for comparisons whose failures read. */
const outcomeJSON = (o: pb.Outcome): unknown => toJson(pb.OutcomeSchema, o);

test("built columns spell out, after a trip over the wire, as exactly the lists form", () => {
  const { children, edges } = composition();
  const got = spellComposition(overTheWire(mustBuild(children, edges)));
  assert.deepEqual(outcomeJSON(create(pb.OutcomeSchema, got)), outcomeJSON(lists(children, edges)));
});

test("the columns are laid out by the Go writer's rules", () => {
  const { children, edges } = composition();
  const c = mustBuild(children, edges);
  assert.deepEqual(
    c.kinds.map((k) => [k.kind, k.version]),
    [
      ["account", ""],
      ["vpc", "v2"],
      ["route", ""],
    ],
    "each (kind, version) once, in order of first use",
  );
  assert.deepEqual(c.childKinds, [0, 1, 2, 2, 2]);
  assert.equal(c.names, children.map((k) => k.name).join(""));
  assert.deepEqual(c.nameLengths, [13, 9, 13, 13, 13]);
  assert.deepEqual(c.specLengths, [13, 22, 7, 0, 2], "0 for the empty spec");
  assert.equal(new TextDecoder().decode(c.specs), children.map((k) => k.spec).join(""));
  assert.deepEqual(c.childLabelSets, [1, 1, 2, 2, 0], "one labels object: one set; equal labels one after the other: one set; none: 0");
  assert.deepEqual(
    c.labelSets.map((s) => s.labels),
    [
      { bom: "b1", team: "t0" },
      { bom: "b1", team: "t1" },
    ],
  );
  assert.deepEqual(c.childConfigRefs, [0, 1, 0, 0, 0], "the column is filled with 0 before its first ref");
  assert.deepEqual(c.configRefs, ["eu"]);
  assert.deepEqual(c.edgeDependents, [1, 2, 3, 0, 4, 4]);
  assert.deepEqual(c.edgeDependencies, [0, 1, 1, 5, 5, 6], "below 5: a child; 5 and up: an outside resource");
  assert.deepEqual(
    c.externalDependencies.map((r) => [r.kind, r.name]),
    [
      ["network", "shared"],
      ["subnet", "b1-t0-vpc"],
    ],
    "each outside resource once; a child's name under another kind is outside",
  );
  assert.deepEqual(c.edgeFlowSets, [1, 2, 2, 0, 3, 1], "equal flows share a set, the last one or an earlier one");
  assert.equal(c.flowSets.length, 3);
});

test("a column nobody needs stays empty", () => {
  const c = mustBuild(
    [
      { kind: "k", version: "", name: "a", spec: "", configRef: "" },
      { kind: "k", version: "", name: "b", spec: "", configRef: "" },
    ],
    [{ dependent: { kind: "k", name: "b" }, dependency: { kind: "k", name: "a" }, flows: [] }],
  );
  assert.deepEqual([c.childLabelSets, c.childConfigRefs, c.edgeFlowSets, c.specLengths, c.specs.length], [[], [], [], [0, 0], 0]);
  assert.deepEqual([c.edgeDependents, c.edgeDependencies, c.externalDependencies], [[1], [0], []]);
});

test("name lengths are UTF-8 bytes, and such names spell back", () => {
  const names = ["café", "日本", "🚀x", "a", ""];
  const children: Kid[] = names.map((name) => ({ kind: "k", version: "", name, spec: "", configRef: "" }));
  const c = mustBuild(children, []);
  assert.deepEqual(c.nameLengths, [5, 6, 5, 1, 0]);
  assert.deepEqual(
    spellComposition(overTheWire(c)).children.map((k) => k.name),
    names,
  );
});

test("utf8Length is the length TextEncoder writes, lone surrogates included", () => {
  for (const s of ["", "ascii", "é", "ß€", "日本語", "🚀", "a🚀b", "\ud800", "x\udc00y", "\ud83d", "\ud83d\ud83d\ude80", "\u07ff\u0800\uffff"]) {
    assert.equal(utf8Length(s), enc.encode(s).length, JSON.stringify(s));
  }
});

test("children sharing one labels object share one set; equal labels in another object only right after their set", () => {
  const x = { app: "x" };
  const y = { app: "y" };
  const kid = (name: string, labels: Record<string, string> | undefined): Kid => ({ kind: "k", version: "", name, labels, spec: "", configRef: "" });
  const c = mustBuild([kid("n0", undefined), kid("n1", x), kid("n2", y), kid("n3", x), kid("n4", { ...x }), kid("n5", { app: "x" }), kid("n6", {})], []);
  // n3 is x itself: set 1 again, though y's set came between. n4 equals x
  // but is another object, and the last set listed is y's: a new set, which
  // n5 (equal, right after) shares. An empty object is no labels.
  assert.deepEqual(c.childLabelSets, [0, 1, 2, 1, 3, 3, 0]);
  assert.equal(c.labelSets.length, 3);

  const spelledOut = spellComposition(c).children;
  assert.equal(spelledOut[1]?.labels, spelledOut[3]?.labels, "children of one set share its labels object");
  assert.deepEqual(spelledOut[6]?.labels, {});

  x.app = "changed";
  assert.deepEqual(c.labelSets[0]?.labels, { app: "x" }, "a set holds a copy of the labels it was given");
});

test("an empty composition is valid columns with nothing in them", () => {
  const c = new CompositionBuilder().finish();
  assert.ok(c !== undefined);
  const got = spellComposition(overTheWire(c));
  assert.deepEqual([got.children, got.edges], [[], []]);
});

test("outcomeToProto sends a composition that fits as columns, and one that does not as lists", () => {
  const child = (kind: string, name: string, extra: Partial<Child> = {}): Child => ({ kind, name, spec: { n: name }, ...extra });
  const edge = (dependent: Ref, dependency: Ref): Edge => ({ dependent, dependency, valueFlows: [{ srcField: "/id", depField: "/upstream" }] });
  const shared = { team: "a" };
  const fits: Outcome = {
    status: { phase: "composed" },
    children: [child("account", "a", { labels: shared, providerConfigRef: "eu" }), child("vpc", "v", { version: "v2", labels: shared })],
    edges: [edge({ kind: "vpc", name: "v" }, { kind: "account", name: "a" }), edge({ kind: "vpc", name: "v" }, { kind: "dns", name: "zone" })],
  };
  const out = outcomeToProto(fits);
  assert.ok(out.composition !== undefined, "columns");
  assert.deepEqual([out.children, out.edges], [[], []], "never both forms");
  assert.equal(out.composition.labelSets.length, 1, "one labels object: one set");
  const want = create(pb.OutcomeSchema, {
    statusJson: enc.encode(`{"phase":"composed"}`),
    children: [
      create(pb.ChildSchema, { kind: "account", name: "a", labels: shared, specJson: enc.encode(`{"n":"a"}`), providerConfigRef: "eu" }),
      create(pb.ChildSchema, { kind: "vpc", version: "v2", name: "v", labels: shared, specJson: enc.encode(`{"n":"v"}`) }),
    ],
    edges: [
      create(pb.EdgeSchema, { dependentKind: "vpc", dependentName: "v", dependencyKind: "account", dependencyName: "a", valueFlows: [create(pb.ValueFlowSchema, { srcField: "/id", depField: "/upstream" })] }),
      create(pb.EdgeSchema, { dependentKind: "vpc", dependentName: "v", dependencyKind: "dns", dependencyName: "zone", valueFlows: [create(pb.ValueFlowSchema, { srcField: "/id", depField: "/upstream" })] }),
    ],
  });
  const complete = create(pb.StageCompleteSchema, { taskId: "t", result: { case: "outcome", value: out } });
  assert.deepEqual(outcomeJSON(spelled(complete).result.value as pb.Outcome), outcomeJSON(want), "the columns spell out as the lists");

  const asLists: Record<string, Outcome> = {
    "two children share a (kind, name)": { children: [child("route", "r"), child("route", "r")] },
    "an edge's dependent is not a child": { children: [child("route", "r")], edges: [edge({ kind: "route", name: "elsewhere" }, { kind: "route", name: "r" })] },
    "an edge's dependent is named without its kind": { children: [child("route", "r")], edges: [edge({ kind: "", name: "r" }, { kind: "x", name: "y" })] },
    "edges without children": { edges: [edge({ kind: "route", name: "r" }, { kind: "x", name: "y" })] },
  };
  for (const [why, o] of Object.entries(asLists)) {
    const got = outcomeToProto(o);
    assert.equal(got.composition, undefined, why);
    assert.deepEqual(
      [got.children.map((c) => `${c.kind}/${c.name} ${new TextDecoder().decode(c.specJson)}`), got.edges.map((e) => `${e.dependentKind}/${e.dependentName}->${e.dependencyKind}/${e.dependencyName}`)],
      [(o.children ?? []).map((c) => `${c.kind}/${c.name} {"n":"${c.name}"}`), (o.edges ?? []).map((e) => `${e.dependent.kind}/${e.dependent.name}->${e.dependency.kind}/${e.dependency.name}`)],
      `${why}: the lists carry it as sent`,
    );
  }
  const none = outcomeToProto({ status: {} });
  assert.deepEqual([none.composition, none.children, none.edges], [undefined, [], []], "no composition: neither form");
});

test("a child spec JSON cannot carry fails the conversion, naming the child, whichever form the rest would take", () => {
  for (const children of [[{ kind: "k", name: "b", spec: () => 1 }], [{ kind: "k", name: "a" }, { kind: "k", name: "a" }, { kind: "k", name: "b", spec: () => 1 }]]) {
    assert.throws(() => outcomeToProto({ children }), { message: "child k/b spec cannot be serialised as JSON" });
  }
});

test("malformed columns are refused, naming the column, with the Go Check's messages", () => {
  const cases: Array<[string, (c: pb.CompositionColumns) => void, string]> = [
    ["name lengths short", (c) => c.nameLengths.shift(), "name_lengths has 4 entries for 5 children"],
    ["spec lengths long", (c) => c.specLengths.push(0), "spec_lengths has 6 entries for 5 children"],
    ["label sets short", (c) => c.childLabelSets.shift(), "child_label_sets has 4 entries for 5 children (all or none)"],
    ["config refs short", (c) => c.childConfigRefs.shift(), "child_config_refs has 4 entries for 5 children (all or none)"],
    ["dependencies short", (c) => c.edgeDependencies.shift(), "edge_dependencies has 5 entries for 6 edges"],
    ["flow sets short", (c) => c.edgeFlowSets.shift(), "edge_flow_sets has 5 entries for 6 edges (all or none)"],
    ["names longer than lengths", (c) => (c.names += "x"), "name_lengths add up to 61 bytes, names holds 62"],
    ["names longer by a character of two bytes", (c) => (c.names += "é"), "name_lengths add up to 61 bytes, names holds 63"],
    ["specs shorter than lengths", (c) => (c.specs = c.specs.subarray(1)), "spec_lengths add up to 44 bytes, specs holds 43"],
    ["length past names", (c) => ((c.nameLengths[0] = 2 ** 31), (c.nameLengths[1] = 2 ** 31)), "name_lengths add up to 4294967335 bytes, names holds 61"],
    ["kind out of range", (c) => (c.childKinds[2] = 9), "child_kinds[2] is 9, past the 3 entries of kinds"],
    ["label set out of range", (c) => (c.childLabelSets[0] = 3), "child_label_sets[0] is 3, past the 3 entries of label_sets"],
    ["config ref out of range", (c) => (c.childConfigRefs[4] = 2), "child_config_refs[4] is 2, past the 2 entries of config_refs"],
    ["dependent out of range", (c) => (c.edgeDependents[1] = 5), "edge_dependents[1] is 5, past the 5 entries of children"],
    ["dependency out of range", (c) => (c.edgeDependencies[1] = 7), "edge_dependencies[1] is 7, past the 7 entries of children and external_dependencies"],
    ["flow set out of range", (c) => (c.edgeFlowSets[0] = 4), "edge_flow_sets[0] is 4, past the 4 entries of flow_sets"],
  ];
  const { children, edges } = composition();
  for (const [name, mangle, want] of cases) {
    const c = mustBuild(children, edges);
    mangle(c);
    assert.throws(() => checkComposition(c), { message: `composition columns: ${want}` }, name);
    assert.throws(() => spellComposition(c), { message: `composition columns: ${want}` }, name);
  }
});

test("a name length that ends inside a character is refused", () => {
  const c = mustBuild(
    ["é", "b"].map((name) => ({ kind: "k", version: "", name, spec: "", configRef: "" })),
    [],
  );
  c.nameLengths = [1, 2];
  assert.throws(() => spellComposition(c), { message: "composition columns: name_lengths[0] ends inside a character of names" });
});

test("spelled leaves a result without columns alone, and copies one with them, leaving the original its columns", () => {
  const plain = create(pb.StageCompleteSchema, { taskId: "t", result: { case: "outcome", value: create(pb.OutcomeSchema, { statusJson: enc.encode("{}") }) } });
  assert.equal(spelled(plain), plain);
  const failed = create(pb.StageCompleteSchema, { taskId: "t", result: { case: "error", value: create(pb.TaskErrorSchema, { message: "no" }) } });
  assert.equal(spelled(failed), failed);

  const { children, edges } = composition();
  const cols = mustBuild(children, edges);
  const c = create(pb.StageCompleteSchema, {
    taskId: "t",
    leaseSecret: "s",
    fence: create(pb.FenceSchema, { claimEpoch: 4n }),
    result: { case: "outcome", value: create(pb.OutcomeSchema, { statusJson: enc.encode(`{"phase":"composed"}`), healthOk: true, composition: cols }) },
  });
  const before = toBinary(pb.StageCompleteSchema, c);
  const s = spelled(c);
  assert.notEqual(s, c);
  assert.deepEqual(toBinary(pb.StageCompleteSchema, c), before, "the original is unchanged");
  assert.equal((c.result.value as pb.Outcome).composition, cols, "the original keeps its columns");
  const want = lists(children, edges);
  want.statusJson = enc.encode(`{"phase":"composed"}`);
  want.healthOk = true;
  assert.deepEqual(
    toJson(pb.StageCompleteSchema, fromBinary(pb.StageCompleteSchema, toBinary(pb.StageCompleteSchema, s))),
    toJson(pb.StageCompleteSchema, create(pb.StageCompleteSchema, { taskId: "t", leaseSecret: "s", fence: create(pb.FenceSchema, { claimEpoch: 4n }), result: { case: "outcome", value: want } })),
  );

  cols.nameLengths.shift();
  assert.throws(() => spelled(c), { message: "result of t: composition columns: name_lengths has 4 entries for 5 children" });
});
