#!/usr/bin/env node
// gen-types: typed GraphQL documents for the dashboard, generated from the
// schema the server serves.
//
// Reads the schema (graph/schema/*.graphqls, the files gqlgen serves at
// /graphql/schema.graphql; or --schema FILE|URL, e.g. a running converge's
// http://localhost:8080/graphql/schema.graphql) and every src/**/*.graphql
// document, validates each operation against the schema, and writes
// src/gql/graphql.ts: the schema's enums (string unions plus ordered value
// lists), its input types, and for every operation its result and variables
// types and a TypedDocument constant (the minified document text).
//
// It stands in for GraphQL Code Generator's typed-document-node output: the
// codegen CLI's current releases depend on packages that require Node 22.
// Output is deterministic (sorted inputs, no timestamps); `just generate`
// reruns it and CI fails when the committed file differs.
//
// Usage: node scripts/gen-types.mjs [--schema FILE|URL] [--check]
import { readFileSync, readdirSync, writeFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  Kind,
  buildSchema,
  getNamedType,
  isEnumType,
  isInputObjectType,
  isListType,
  isNonNullType,
  isObjectType,
  isScalarType,
  parse,
  print,
  stripIgnoredCharacters,
  typeFromAST,
  validate,
  visit,
} from 'graphql';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '..');
const repo = resolve(root, '..');
const out = join(root, 'src/gql/graphql.ts');

const args = process.argv.slice(2);
const flag = (name) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};

// Scalars: what the server sends for each custom scalar.
const scalars = {
  ID: 'string',
  String: 'string',
  Int: 'number',
  Float: 'number',
  Boolean: 'boolean',
  JSON: 'JSONValue',
  Time: 'string',
};

function fail(msg) {
  console.error(`gen-types: ${msg}`);
  process.exit(1);
}

async function loadSDL() {
  const src = flag('--schema');
  if (src && /^https?:\/\//.test(src)) {
    const res = await fetch(src);
    if (!res.ok) fail(`GET ${src}: ${res.status}`);
    return { sdl: await res.text(), from: src };
  }
  if (src) return { sdl: readFileSync(src, 'utf8'), from: src };
  const dir = join(repo, 'graph/schema');
  const files = readdirSync(dir).filter((f) => f.endsWith('.graphqls')).sort();
  if (files.length === 0) fail(`no *.graphqls in ${dir}`);
  return {
    sdl: files.map((f) => readFileSync(join(dir, f), 'utf8')).join('\n'),
    from: 'graph/schema/*.graphqls',
  };
}

function walk(dir, acc = []) {
  for (const name of readdirSync(dir).sort()) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) walk(p, acc);
    else if (name.endsWith('.graphql')) acc.push(p);
  }
  return acc;
}

const { sdl, from } = await loadSDL();
let schema;
try {
  schema = buildSchema(sdl);
} catch (e) {
  fail(`schema from ${from}: ${e.message}`);
}

// Documents: every operation and fragment of src/**/*.graphql.
const files = walk(join(root, 'src'));
const operations = [];
const fragments = new Map();
for (const file of files) {
  const rel = relative(root, file);
  let doc;
  try {
    doc = parse(readFileSync(file, 'utf8'));
  } catch (e) {
    fail(`${rel}: ${e.message}`);
  }
  for (const def of doc.definitions) {
    if (def.kind === Kind.OPERATION_DEFINITION) {
      if (!def.name) fail(`${rel}: every operation needs a name`);
      operations.push({ def, file: rel });
    } else if (def.kind === Kind.FRAGMENT_DEFINITION) {
      if (fragments.has(def.name.value)) fail(`${rel}: fragment ${def.name.value} is defined twice`);
      fragments.set(def.name.value, { def, file: rel });
    }
  }
}
const opNames = new Set();
for (const { def, file } of operations) {
  if (opNames.has(def.name.value)) fail(`${file}: operation ${def.name.value} is defined twice`);
  opNames.add(def.name.value);
}

// Fragments an operation (or fragment) uses, transitively, in first-use order.
function usedFragments(node, seen = new Set()) {
  visit(node, {
    FragmentSpread(s) {
      const name = s.name.value;
      if (seen.has(name)) return;
      const f = fragments.get(name);
      if (!f) fail(`unknown fragment ${name}`);
      seen.add(name);
      usedFragments(f.def, seen);
    },
  });
  return seen;
}

// Validate every operation with the fragments it uses.
const errors = [];
for (const { def, file } of operations) {
  const used = [...usedFragments(def)].map((n) => fragments.get(n).def);
  const doc = { kind: Kind.DOCUMENT, definitions: [def, ...used] };
  for (const e of validate(schema, doc)) errors.push(`${file}: ${def.name.value}: ${e.message}`);
}
for (const [name, { def, file }] of fragments) {
  const t = schema.getType(def.typeCondition.name.value);
  if (!t) errors.push(`${file}: fragment ${name} on unknown type ${def.typeCondition.name.value}`);
}
if (errors.length) fail(`documents do not validate against ${from}:\n  ${errors.join('\n  ')}`);

// --- type printing ---------------------------------------------------------

const pascal = (s) => s.charAt(0).toUpperCase() + s.slice(1);

function indent(s, n) {
  const pad = '  '.repeat(n);
  return s.split('\n').map((l, i) => (i === 0 ? l : pad + l)).join('\n');
}

// outputType wraps a leaf/object rendering in the list/null wrappers of t.
function wrapOutput(t, inner) {
  if (isNonNullType(t)) return wrapOutputNonNull(t.ofType, inner);
  return `${wrapOutputNonNull(t, inner)} | null`;
}
function wrapOutputNonNull(t, inner) {
  if (isListType(t)) {
    const el = wrapOutput(t.ofType, inner);
    return `Array<${el}>`;
  }
  return inner;
}

function leafName(named) {
  if (isScalarType(named)) {
    const s = scalars[named.name];
    if (!s) fail(`no TypeScript type for scalar ${named.name}`);
    return s;
  }
  if (isEnumType(named)) return named.name;
  fail(`not a leaf type: ${named.name}`);
}

// selectionType renders the result type of a selection set on parent.
function selectionType(parent, selectionSet, depth) {
  const fields = [];
  const parts = [];
  const collect = (set) => {
    for (const sel of set.selections) {
      if (sel.kind === Kind.FIELD) {
        fields.push(sel);
      } else if (sel.kind === Kind.INLINE_FRAGMENT) {
        const cond = sel.typeCondition ? schema.getType(sel.typeCondition.name.value) : parent;
        if (cond !== parent) fail(`inline fragments on other types (${cond.name}) are not supported`);
        collect(sel.selectionSet);
      } else if (sel.kind === Kind.FRAGMENT_SPREAD) {
        const f = fragments.get(sel.name.value);
        if (f.def.typeCondition.name.value !== parent.name) {
          fail(`fragment ${sel.name.value} spread on ${parent.name} (fragments on other types are not supported)`);
        }
        parts.push(`${sel.name.value}Fragment`);
      }
    }
  };
  collect(selectionSet);
  const seen = new Map();
  for (const f of fields) {
    const key = f.alias ? f.alias.value : f.name.value;
    if (seen.has(key)) {
      // The same response key twice: merge sub-selections.
      const prev = seen.get(key);
      if (f.selectionSet && prev.selectionSet) {
        prev.selectionSet = { kind: Kind.SELECTION_SET, selections: [...prev.selectionSet.selections, ...f.selectionSet.selections] };
      }
      continue;
    }
    seen.set(key, { ...f });
  }
  const lines = [];
  for (const [key, f] of seen) {
    const name = f.name.value;
    if (name === '__typename') {
      lines.push(`${key}: '${parent.name}';`);
      continue;
    }
    const def = parent.getFields()[name];
    if (!def) fail(`${parent.name}.${name} does not exist`);
    const named = getNamedType(def.type);
    let inner;
    if (isObjectType(named)) {
      if (!f.selectionSet) fail(`${parent.name}.${name} needs a selection set`);
      inner = selectionType(named, f.selectionSet, depth + 1);
    } else {
      inner = leafName(named);
    }
    const doc = def.description ? `/** ${def.description.replace(/\*\//g, '* /').split('\n').join(' ')} */\n` : '';
    lines.push(`${doc}${key}: ${wrapOutput(def.type, inner)};`);
  }
  const obj = lines.length ? `{\n  ${lines.map((l) => indent(l, 1)).join('\n  ')}\n}` : '{}';
  if (parts.length === 0) return obj;
  return lines.length ? `${parts.join(' & ')} & ${indent(obj, 0)}` : parts.join(' & ');
}

function inputTypeRef(t) {
  if (isNonNullType(t)) return inputTypeRefNonNull(t.ofType);
  return `${inputTypeRefNonNull(t)} | null`;
}
function inputTypeRefNonNull(t) {
  if (isListType(t)) return `Array<${inputTypeRef(t.ofType)}>`;
  if (isInputObjectType(t)) return t.name;
  return leafName(t);
}

// --- emit ------------------------------------------------------------------

const outParts = [];
outParts.push(`// Code generated by scripts/gen-types.mjs from ${from}; DO NOT EDIT.
// Regenerate with \`npm run codegen\` (or \`just generate\`).
/* eslint-disable */
import type { TypedDocument } from './typed';

/** Any JSON value (the JSON scalar). */
export type JSONValue = null | boolean | number | string | JSONValue[] | { [key: string]: JSONValue };
`);

const typeNames = Object.keys(schema.getTypeMap()).filter((n) => !n.startsWith('__')).sort();
for (const n of typeNames) {
  const t = schema.getType(n);
  if (!isEnumType(t)) continue;
  const values = t.getValues().map((v) => v.name);
  const doc = t.description ? `/** ${t.description.split('\n').join(' ')} */\n` : '';
  outParts.push(`${doc}export type ${n} = ${values.map((v) => `'${v}'`).join(' | ')};
/** Every ${n} value, in schema order. */
export const ${n}Values: readonly ${n}[] = [${values.map((v) => `'${v}'`).join(', ')}];
`);
}
for (const n of typeNames) {
  const t = schema.getType(n);
  if (!isInputObjectType(t)) continue;
  const fields = Object.values(t.getFields()).map((f) => {
    const optional = !isNonNullType(f.type) || f.defaultValue !== undefined;
    const doc = f.description ? `/** ${f.description.split('\n').join(' ')} */\n  ` : '';
    return `${doc}${f.name}${optional ? '?' : ''}: ${inputTypeRef(f.type)};`;
  });
  const doc = t.description ? `/** ${t.description.split('\n').join(' ')} */\n` : '';
  outParts.push(`${doc}export type ${n} = {\n  ${fields.join('\n  ')}\n};\n`);
}

// Fragments, in name order.
for (const name of [...fragments.keys()].sort()) {
  const { def, file } = fragments.get(name);
  const parent = schema.getType(def.typeCondition.name.value);
  outParts.push(`/** Fragment ${name} (${file}). */\nexport type ${name}Fragment = ${selectionType(parent, def.selectionSet, 0)};\n`);
}

// Operations, in file then definition order.
for (const { def, file } of operations) {
  const name = def.name.value;
  const opType = def.operation; // query | mutation | subscription
  const suffix = pascal(opType);
  const rootType = opType === 'query' ? schema.getQueryType() : opType === 'mutation' ? schema.getMutationType() : schema.getSubscriptionType();
  const result = selectionType(rootType, def.selectionSet, 0);
  const vars = (def.variableDefinitions ?? []).map((v) => {
    const t = typeFromAST(schema, v.type);
    const optional = !isNonNullType(t) || v.defaultValue !== undefined;
    return `${v.variable.name.value}${optional ? '?' : ''}: ${inputTypeRef(t)};`;
  });
  const used = [...usedFragments(def)].sort().map((n) => fragments.get(n).def);
  const text = stripIgnoredCharacters(print({ kind: Kind.DOCUMENT, definitions: [def, ...used] }));
  outParts.push(`/** ${suffix} ${name} (${file}). */
export type ${name}${suffix} = ${result};
export type ${name}${suffix}Variables = ${vars.length ? `{\n  ${vars.join('\n  ')}\n}` : 'Record<string, never>'};
export const ${name}Document = {
  kind: '${opType}',
  operationName: '${name}',
  query: ${JSON.stringify(text)},
} as TypedDocument<${name}${suffix}, ${name}${suffix}Variables>;
`);
}

const text = outParts.join('\n');
if (args.includes('--check')) {
  let cur = '';
  try {
    cur = readFileSync(out, 'utf8');
  } catch {}
  if (cur !== text) fail(`${relative(root, out)} is stale: run npm run codegen`);
  console.log(`gen-types: ${relative(root, out)} is fresh`);
} else {
  writeFileSync(out, text);
  console.log(`gen-types: ${operations.length} operations, ${fragments.size} fragments from ${files.length} files → ${relative(root, out)}`);
}
