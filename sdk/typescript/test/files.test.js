// Files through the SDK: text, bytes and streams both ways, a 100 MiB file streamed from disk and back
// and sha256-checked without being held in memory, metadata, listings, mkdir/move/remove and their
// errors, and directories up and down as tar streams (a download refusing links that lead out).

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import v8 from 'node:v8';
import vm from 'node:vm';

import * as sandlot from '../dist/index.js';
import { Client, Sandbox } from '../dist/index.js';
import { MIB, Server, tempDir } from '../test-support/harness.js';

let server, client, sbx, tmp;

before(async () => {
  server = await Server.start();
  client = new Client({ url: server.url, apiKey: await server.tenantKey('sdk-ts') });
  sbx = await Sandbox.create({ client, timeoutS: 600, diskMb: 1024 });
  tmp = tempDir();
});

after(async () => {
  await sbx?.delete();
  await server?.stop();
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

test('text, bytes, chunks and streams round-trip', async () => {
  const w = await sbx.files.write('app/hello.py', "print('hi')\n");
  assert.deepEqual([w.path, w.bytes], ['/home/user/app/hello.py', 12]);
  assert.equal(await sbx.files.read('app/hello.py'), "print('hi')\n");
  const blob = new Uint8Array(256 * 64).map((_, i) => i % 256);
  await sbx.files.write('/tmp/blob.bin', blob);
  assert.deepEqual(await sbx.files.read('/tmp/blob.bin', { format: 'bytes' }), blob);
  const stream = await sbx.files.read('/tmp/blob.bin', { format: 'stream' });
  assert.ok(stream instanceof ReadableStream);
  const parts = [];
  for await (const chunk of stream) parts.push(...chunk);
  assert.deepEqual(new Uint8Array(parts), blob);
  const enc = new TextEncoder();
  await sbx.files.write('chunks.txt', [enc.encode('one '), enc.encode('two ')]);
  assert.equal(await sbx.files.read('chunks.txt'), 'one two ');
  await sbx.files.write(
    'async-chunks.txt',
    (async function* () {
      yield enc.encode('three ');
      yield enc.encode('four');
    })(),
  );
  assert.equal(await sbx.files.read('async-chunks.txt'), 'three four');
  await sbx.files.write('blob.txt', new Blob(['from a ', 'Blob']));
  assert.equal(await sbx.files.read('blob.txt'), 'from a Blob');
  assert.equal((await sbx.commands.run('python3 app/hello.py')).stdout, 'hi\n');
});

test('mode, stat, list and exists', async () => {
  await sbx.files.write('run.sh', '#!/bin/sh\necho ran\n', { mode: 0o755 });
  const st = await sbx.files.stat('run.sh');
  assert.deepEqual(
    [st.path, st.name, st.kind, st.size, st.mode, st.uid],
    ['/home/user/run.sh', 'run.sh', 'file', 19, 0o755, 1000],
  );
  assert.ok(st.isFile && !st.isDir && st.mtimeMs > 0);
  assert.equal((await sbx.commands.run('./run.sh')).stdout, 'ran\n');
  await sbx.files.write('tree/a/b.txt', 'b', { mode: '0600' });
  assert.equal((await sbx.files.stat('tree/a/b.txt')).mode, 0o600);
  await sbx.files.write('tree/c.txt', 'c');
  assert.deepEqual((await sbx.files.list('tree')).map((e) => e.name), ['a', 'c.txt']);
  const deep = await sbx.files.list('tree', { depth: 2 });
  assert.deepEqual(
    deep.map((e) => [e.path, e.kind]),
    [
      ['/home/user/tree/a', 'dir'],
      ['/home/user/tree/a/b.txt', 'file'],
      ['/home/user/tree/c.txt', 'file'],
    ],
  );
  const links = Object.fromEntries((await sbx.files.list('/')).filter((e) => e.kind === 'symlink').map((e) => [e.name, e.linkTarget]));
  assert.equal(links.bin, 'usr/bin');
  assert.equal(await sbx.files.exists('tree/c.txt'), true);
  assert.equal(await sbx.files.exists('tree/nope'), false);
});

test('mkdir, move, remove and their errors', async () => {
  const d = await sbx.files.mkdir('data/raw');
  assert.deepEqual([d.path, d.kind], ['/home/user/data/raw', 'dir']);
  assert.ok((await sbx.files.mkdir('data/raw')).isDir); // like mkdir -p
  await assert.rejects(sbx.files.mkdir('data/raw', { parents: false }), sandlot.AlreadyExistsError);
  await sbx.files.write('data/raw/x.csv', '1,2\n');
  await sbx.files.write('data/y.csv', '3,4\n');
  const moved = await sbx.files.move('data/raw/x.csv', 'data/x.csv');
  assert.equal(moved.path, '/home/user/data/x.csv');
  assert.equal(await sbx.files.exists('data/raw/x.csv'), false);
  const exists = await sbx.files.move('data/x.csv', 'data/y.csv').catch((e) => e);
  assert.ok(exists instanceof sandlot.AlreadyExistsError);
  assert.deepEqual([exists.status, exists.code], [409, 'already_exists']);
  assert.equal((await sbx.files.move('data/x.csv', 'data/y.csv', { overwrite: true })).size, 4);
  assert.equal(await sbx.files.read('data/y.csv'), '1,2\n');
  // docs/API.md says `already_exists`; the code answers `directory_not_empty`.
  const full = await sbx.files.remove('data').catch((e) => e);
  assert.ok(full instanceof sandlot.DirectoryNotEmptyError && full instanceof sandlot.ConflictError);
  assert.deepEqual([full.status, full.code], [409, 'directory_not_empty']);
  assert.match(full.message, /recursive/);
  await sbx.files.remove('data', { recursive: true });
  assert.equal(await sbx.files.exists('data'), false);
  await sbx.files.write('single.txt', 'x');
  await sbx.files.remove('single.txt');
  assert.equal(await sbx.files.exists('single.txt'), false);
  await assert.rejects(sbx.files.read('data/y.csv'), sandlot.FileNotFoundError);
  await assert.rejects(sbx.files.read('/home/user'), sandlot.WrongFileKindError);
});

test("the sandbox user meets the kernel's permissions; root is asked for", async () => {
  await assert.rejects(sbx.files.write('/etc/x', 'x'), sandlot.PermissionDeniedError);
  const w = await sbx.files.write('notes.txt', 'root only', { user: 'root' }); // relative: /root for root
  assert.equal(w.path, '/root/notes.txt');
  assert.equal(await sbx.files.read('/root/notes.txt', { user: 'root' }), 'root only');
  assert.equal((await sbx.files.stat('/root/notes.txt', { user: 'root' })).uid, 0);
  await assert.rejects(sbx.files.read('/root/notes.txt'), sandlot.PermissionDeniedError);
});

/** `size` bytes of a deterministic, incompressible-looking pattern, written to `file`; its sha256. */
function writePattern(file, size) {
  const seed = createHash('sha256').update('sandlot').digest();
  const block = Buffer.alloc(MIB);
  for (let i = 0; i < MIB / 32; i++) {
    const n = Buffer.alloc(4);
    n.writeUInt32BE(i);
    createHash('sha256').update(seed).update(n).digest().copy(block, i * 32);
  }
  const h = createHash('sha256');
  const fd = fs.openSync(file, 'w');
  try {
    for (let i = 0; i < size / MIB; i++) {
      const chunk = Buffer.concat([block.subarray(i % 97), block.subarray(0, i % 97)]);
      h.update(chunk);
      fs.writeSync(fd, chunk);
    }
  } finally {
    fs.closeSync(fd);
  }
  return h.digest('hex');
}

// gc() on demand, to tell chunks the SDK still holds from garbage (WeakRefs to them die once collected).
v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc');

/** Bytes of the chunks behind `refs` still alive after a full collection. */
function aliveBytes(refs) {
  gc();
  return refs.reduce((n, r) => n + (r.deref()?.byteLength ?? 0), 0);
}

test('a 100 MiB file streams up from disk and back, hashed, without being held', async () => {
  const size = 100 * MIB;
  const src = path.join(tmp, 'big.bin');
  const want = writePattern(src, size);
  const w = await sbx.files.upload(src, 'big.bin');
  assert.deepEqual([w.path, w.bytes], ['/home/user/big.bin', size]);
  const inside = await sbx.commands.run(['sha256sum', 'big.bin']);
  assert.equal(inside.stdout.split(' ')[0], want);
  const got = createHash('sha256');
  const refs = [];
  let n = 0;
  for await (const chunk of await sbx.files.read('big.bin', { format: 'stream' })) {
    got.update(chunk);
    n += chunk.length;
    refs.push(new WeakRef(chunk));
  }
  assert.equal(n, size);
  assert.equal(got.digest('hex'), want);
  assert.ok(refs.length > 10, `${refs.length} chunks`);
  const held = aliveBytes(refs);
  assert.ok(held < 16 * MIB, `the download still holds ${held} bytes of what it read`);
  const dst = path.join(tmp, 'big.down');
  assert.equal(await sbx.files.download('big.bin', dst), size);
  const onDisk = createHash('sha256');
  for await (const chunk of fs.createReadStream(dst, { highWaterMark: MIB })) onDisk.update(chunk);
  assert.equal(onDisk.digest('hex'), want);
  fs.rmSync(dst);
  await sbx.files.remove('big.bin');
});

test('a 100 MiB generator streams up in chunks of unknown total, pulled as sent', async () => {
  const size = 100 * MIB;
  const want = createHash('sha256');
  const refs = [];
  let heldAtEnd = -1;
  async function* chunks() {
    for (let i = 0; i < 100; i++) {
      const block = createHash('sha256').update(String(i)).digest();
      const chunk = new Uint8Array(Buffer.concat(Array(MIB / 32).fill(block)));
      want.update(chunk);
      refs.push(new WeakRef(chunk));
      yield chunk;
    }
    // The last chunk is asked for only once the ones before it went out: they are garbage now.
    heldAtEnd = aliveBytes(refs);
  }
  assert.equal((await sbx.files.write('gen.bin', chunks())).bytes, size);
  assert.ok(heldAtEnd >= 0 && heldAtEnd < 16 * MIB, `the upload held ${heldAtEnd} bytes of what it was given`);
  const inside = await sbx.commands.run(['sha256sum', 'gen.bin']);
  assert.equal(inside.stdout.split(' ')[0], want.digest('hex'));
  await sbx.files.remove('gen.bin');
});

function walk(dir, rel = '') {
  const out = [];
  for (const name of fs.readdirSync(path.join(dir, rel)).sort()) {
    const r = rel ? `${rel}/${name}` : name;
    out.push(r);
    if (fs.lstatSync(path.join(dir, r)).isDirectory()) out.push(...walk(dir, r));
  }
  return out;
}

test('a directory goes up and comes back down', async () => {
  const up = path.join(tmp, 'up');
  fs.mkdirSync(path.join(up, 'src/pkg'), { recursive: true });
  fs.writeFileSync(path.join(up, 'Cargo.toml'), '[package]\n');
  fs.writeFileSync(path.join(up, 'src/main.rs'), 'fn main() {}\n');
  fs.writeFileSync(path.join(up, 'src/pkg/data.bin'), new Uint8Array(256).map((_, i) => i));
  fs.writeFileSync(path.join(up, 'run.sh'), '#!/bin/sh\necho ok\n', { mode: 0o755 });
  fs.symlinkSync('src/main.rs', path.join(up, 'link'));
  const long = 'd'.repeat(60) + '/' + 'f'.repeat(80) + '.txt'; // over ustar's 100 bytes: a PAX record
  fs.mkdirSync(path.join(up, 'd'.repeat(60)));
  fs.writeFileSync(path.join(up, long), 'long name\n');
  const w = await sbx.files.uploadDir(up, 'proj');
  assert.equal(w.path, '/home/user/proj');
  assert.ok(w.entries >= 8, `entries ${w.entries}`);
  assert.deepEqual(await sbx.files.read('proj/src/pkg/data.bin', { format: 'bytes' }), new Uint8Array(256).map((_, i) => i));
  assert.equal((await sbx.files.stat('proj/run.sh')).mode, 0o755);
  assert.equal((await sbx.files.stat('proj/link')).linkTarget, 'src/main.rs');
  assert.equal(await sbx.files.read(`proj/${long}`), 'long name\n');
  assert.equal((await sbx.commands.run('./run.sh', { cwd: '/home/user/proj' })).stdout, 'ok\n');
  await sbx.files.write('proj/made-inside.txt', 'new\n');
  await sbx.files.write(`proj/${'n'.repeat(120)}.txt`, 'long inside\n');
  const down = path.join(tmp, 'down');
  const names = await sbx.files.downloadDir('proj', down);
  assert.ok(names.includes('made-inside.txt') && names.includes('src/pkg/data.bin'), names.join(','));
  assert.equal(fs.readFileSync(path.join(down, 'made-inside.txt'), 'utf8'), 'new\n');
  assert.equal(fs.readFileSync(path.join(down, `${'n'.repeat(120)}.txt`), 'utf8'), 'long inside\n');
  assert.deepEqual(fs.readFileSync(path.join(down, 'src/pkg/data.bin')), fs.readFileSync(path.join(up, 'src/pkg/data.bin')));
  assert.equal(fs.readlinkSync(path.join(down, 'link')), 'src/main.rs');
  assert.equal(fs.statSync(path.join(down, 'run.sh')).mode & 0o777, 0o755);
  assert.deepEqual(walk(down), [...walk(up), 'made-inside.txt', `${'n'.repeat(120)}.txt`].sort());
});

test('a download refuses links that lead out', async () => {
  await sbx.files.mkdir('evil');
  await sbx.commands.run('ln -s /etc/passwd evil/passwd; ln -s ../../outside evil/up');
  const e = await sbx.files.downloadDir('evil', path.join(tmp, 'evil-down')).catch((err) => err);
  assert.ok(e instanceof sandlot.ProtocolError, String(e));
  assert.match(e.message, /outside/);
  assert.equal(fs.existsSync(path.join(tmp, 'outside')), false);
  await assert.rejects(sbx.files.downloadDir('/etc/hostname', path.join(tmp, 'x')), sandlot.WrongFileKindError);
});
