// The SDK's hand-written models and error classes checked against docs/openapi.json, the document
// generated from the server's wire types: every field a schema has is a (camelCase) field of the
// model that stands for it, the model adds only the conveniences listed here, and every error code
// the API answers has its class. A field the server gains fails here until the SDK has it.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const doc = JSON.parse(fs.readFileSync(path.join(here, '../../../docs/openapi.json'), 'utf8'));
const source = fs
  .readdirSync(path.join(here, '../src'))
  .filter((f) => f.endsWith('.ts'))
  .map((f) => fs.readFileSync(path.join(here, '../src', f), 'utf8'))
  .join('\n');

// SDK model → the schema it reads, and the fields it adds of its own (derived, not on the wire).
const MODELS = {
  ErrorDetail: ['ErrorDetail', []],
  Limits: ['Limits', []],
  NetworkPolicy: ['NetworkSpec', []],
  NetworkInfo: ['NetworkInfo', []],
  SandboxInfo: ['SandboxInfo', []],
  CommandResult: ['ExecResult', ['ok', 'pid']],
  ProcessInfo: ['ProcessInfo', []],
  FileStat: ['FileStat', ['isDir', 'isFile']],
  WriteResult: ['WriteResult', []],
  SnapshotInfo: ['SnapshotInfo', []],
  PortInfo: ['PortInfo', []],
  ImageLayer: ['ImageLayer', []],
  ImageConfig: ['ImageRunConfig', []],
  ImageInfo: ['ImageInfo', []],
  KeyCreated: ['KeyCreated', []],
  Health: ['Health', []],
  AuditEntry: ['AuditEntry', []],
};

const camel = (name) => name.replace(/_([a-z0-9])/g, (_, c) => c.toUpperCase());

/** The field names of `export interface NAME { … }` in the SDK's sources, comments left out. */
function fields(name) {
  const m = source.match(new RegExp(`export interface ${name}\\b[^{]*\\{([\\s\\S]*?)\\n\\}`));
  assert.ok(m, `no interface ${name} in sdk/typescript/src`);
  const body = m[1].replace(/\/\*[\s\S]*?\*\//g, '');
  return new Set([...body.matchAll(/^\s+(?:readonly\s+)?([A-Za-z0-9_]+)\??:/gm)].map((f) => f[1]));
}

for (const [model, [schema, extras]] of Object.entries(MODELS)) {
  test(`${model} has every field of the ${schema} schema`, () => {
    const wire = Object.keys(doc.components.schemas[schema]?.properties ?? {}).map(camel);
    assert.ok(wire.length > 0, `docs/openapi.json has no properties for ${schema}`);
    const have = fields(model);
    assert.deepEqual(wire.filter((f) => !have.has(f)).sort(), [], `${model} lacks fields of ${schema}`);
    const own = [...have].filter((f) => !wire.includes(f)).sort();
    assert.deepEqual(own, [...extras].sort(), `${model} has fields ${schema} does not (list deliberate ones here)`);
  });
}

test('every error code the API answers has its error class, and no class names a code it does not', () => {
  const codes = doc.components.schemas.ErrorDetail.properties.code.enum;
  assert.ok(Array.isArray(codes) && codes.length > 10, 'the error code enum of docs/openapi.json');
  const table = source.match(/const BY_CODE: Record<string, ErrorClass> = \{([\s\S]*?)\n\};/);
  assert.ok(table, 'BY_CODE in src/errors.ts');
  const mapped = [...table[1].matchAll(/^\s+([a-z_]+):/gm)].map((m) => m[1]);
  assert.deepEqual([...mapped].sort(), [...codes].sort());
});
