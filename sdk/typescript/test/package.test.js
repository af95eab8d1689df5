// The package itself: `npm pack` (its `prepack` builds) gives a tarball of dist/, the README and
// package.json only, with no dependencies; it installs offline into an empty project and imports there;
// every export has TSDoc; and a TypeScript program using `await using` type-checks against the shipped
// .d.ts, runs on this Node against a real server, and leaves its sandbox deleted.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { SDK, Server, tempDir } from '../test-support/harness.js';

let work, tarball, project;

before(() => {
  work = tempDir('sandlot-sdk-ts-pack-');
  // Packed from a copy, so its prepack (clean + build) does not touch the dist/ other test files import.
  const copy = path.join(work, 'src-copy');
  fs.mkdirSync(copy);
  for (const f of ['package.json', 'package-lock.json', 'tsconfig.json', 'README.md', 'src']) {
    fs.cpSync(path.join(SDK, f), path.join(copy, f), { recursive: true });
  }
  fs.symlinkSync(path.join(SDK, 'node_modules'), path.join(copy, 'node_modules'));
  const out = path.join(work, 'out');
  fs.mkdirSync(out);
  const name = execFileSync('npm', ['pack', '--pack-destination', out, '--silent'], { cwd: copy, encoding: 'utf8' })
    .trim()
    .split('\n')
    .at(-1);
  tarball = path.join(out, name);
  project = path.join(work, 'project');
  fs.mkdirSync(project);
  fs.writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }));
  execFileSync('npm', ['install', '--offline', '--no-audit', '--no-fund', tarball], { cwd: project, stdio: 'pipe' });
});

after(() => {
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

test('the tarball holds dist, README and package.json, and no dependencies', () => {
  assert.match(path.basename(tarball), /^sandlot-\d+\.\d+\.\d+\.tgz$/);
  const files = execFileSync('tar', ['-tzf', tarball], { encoding: 'utf8' }).trim().split('\n').sort();
  assert.ok(files.includes('package/package.json') && files.includes('package/README.md'), files.join(' '));
  assert.ok(files.includes('package/dist/index.js') && files.includes('package/dist/index.d.ts'), files.join(' '));
  assert.deepEqual(files.filter((f) => !/^package\/(package\.json|README\.md|dist\/[a-z]+\.(js|d\.ts))$/.test(f)), []);
  const meta = JSON.parse(execFileSync('tar', ['-xzOf', tarball, 'package/package.json'], { encoding: 'utf8' }));
  assert.equal(meta.name, 'sandlot');
  assert.equal(meta.type, 'module');
  assert.deepEqual(meta.dependencies ?? {}, {});
  assert.equal(meta.engines.node, '>=20');
  assert.equal(meta.exports['.'].types, './dist/index.d.ts');
  const installed = fs.readdirSync(path.join(project, 'node_modules')).filter((n) => !n.startsWith('.'));
  assert.deepEqual(installed, ['sandlot']); // nothing else came with it
});

test('the installed package imports and exposes the SDK', () => {
  const script = `
    import * as s from 'sandlot';
    const want = ['Sandbox', 'Client', 'Commands', 'CommandHandle', 'Files', 'Images', 'SandlotError',
      'NotFoundError', 'ConflictError', 'LimitReachedError', 'TimeoutError', 'AuthError', 'VERSION'];
    const missing = want.filter((n) => !(n in s));
    const e = new s.ServerFullError('x', { code: 'server_full', status: 429 });
    console.log(JSON.stringify({ missing, version: s.VERSION, retryable: e.retryable, limit: e instanceof s.LimitReachedError }));
  `;
  const out = JSON.parse(execFileSync(process.execPath, ['--input-type=module', '-e', script], { cwd: project, encoding: 'utf8' }));
  const meta = JSON.parse(fs.readFileSync(path.join(project, 'node_modules/sandlot/package.json'), 'utf8'));
  assert.deepEqual(out, { missing: [], version: meta.version, retryable: true, limit: true });
});

test('every export of the declarations has TSDoc', () => {
  const dts = fs.readdirSync(path.join(project, 'node_modules/sandlot/dist')).filter((f) => f.endsWith('.d.ts'));
  const undocumented = [];
  for (const f of dts) {
    const lines = fs.readFileSync(path.join(project, 'node_modules/sandlot/dist', f), 'utf8').split('\n');
    let body = false; // inside a class or interface
    lines.forEach((line, i) => {
      if (/^export (declare )?(abstract )?(class|interface) /.test(line)) body = !line.trimEnd().endsWith('}');
      else if (line.startsWith('}')) body = false;
      // Top-level declarations, and the public members of classes and interfaces.
      const declaration = /^export (declare )?(abstract )?(class|function|const|interface|type) [A-Za-z]/.test(line);
      const member = /^    (static |readonly |get |set |async |\[)*[A-Za-z[][^:(]*[:(<?]/.test(line) && !/^    (private|protected) /.test(line) && body;
      if (!declaration && !member) return;
      if (!lines[i - 1]?.trim().endsWith('*/')) undocumented.push(`${f}:${i + 1}: ${line}`);
    });
  }
  assert.deepEqual(undocumented, []);
});

test('a TypeScript program with `await using` type-checks against the .d.ts and deletes its sandbox', async () => {
  fs.writeFileSync(
    path.join(project, 'main.ts'),
    `import { Sandbox, type CommandResult, NotFoundError } from 'sandlot';

let id = '';
{
  await using sbx = await Sandbox.create({ memoryMb: 128, metadata: { from: 'ts' } });
  id = sbx.id;
  const r: CommandResult = await sbx.commands.run(['echo', 'typed']);
  console.log(JSON.stringify({ id, stdout: r.stdout, ok: r.ok }));
}
try {
  await Sandbox.connect(id);
  console.log('still there');
} catch (e) {
  if (!(e instanceof NotFoundError)) throw e;
  console.log(JSON.stringify({ gone: e.status }));
}
`,
  );
  fs.writeFileSync(
    path.join(project, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        target: 'ES2022',
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        lib: ['ES2022', 'ESNext.Disposable'],
        types: ['node'],
        typeRoots: [path.join(SDK, 'node_modules/@types')],
        strict: true,
        skipLibCheck: false,
        outDir: 'out',
      },
      files: ['main.ts'],
    }),
  );
  execFileSync(process.execPath, [path.join(SDK, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.json'], {
    cwd: project,
    stdio: 'pipe',
  });
  const server = await Server.start();
  try {
    const key = await server.tenantKey('sdk-ts-package');
    const out = execFileSync(process.execPath, ['out/main.js'], {
      cwd: project,
      encoding: 'utf8',
      env: { ...process.env, SANDLOT_URL: server.url, SANDLOT_API_KEY: key },
    })
      .trim()
      .split('\n');
    const first = JSON.parse(out[0]);
    assert.deepEqual([first.stdout, first.ok], ['typed\n', true]);
    assert.deepEqual(JSON.parse(out[1]), { gone: 404 });
    const r = await fetch(`${server.url}/v1/sandboxes/${first.id}`, { headers: { Authorization: `Bearer ${key}` } });
    assert.equal((await r.json()).state, 'deleted');
  } finally {
    await server.stop();
  }
});
