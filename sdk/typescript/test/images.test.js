// Images through the SDK: the list with `host`, importing a root file system (busybox) with its
// progress, a Dockerfile build over it with its log streamed to a callback, booting the result, the
// build cache, a failing build's line and output, a build FROM `host` refused, a pull with its
// progress from the suite's own loopback registry, pull's errors, delete.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';

import * as sandlot from '../dist/index.js';
import { Client, Sandbox } from '../dist/index.js';
import { Registry, Server, busyboxRootfs, tarOf, tempDir, unique } from '../test-support/harness.js';

let server, client, registry, tmp;

before(async () => {
  server = await Server.start();
  registry = await Registry.start(server.registryPort);
  client = new Client({ url: server.url, apiKey: await server.tenantKey('images') });
  tmp = tempDir();
  // The busybox root file system, imported as `bb` from a file on disk (streamed, with its length).
  const rootfs = path.join(tmp, 'rootfs.tar');
  fs.writeFileSync(rootfs, busyboxRootfs());
  const events = [];
  const images = await client.images.importArchive(rootfs, { name: 'bb', onProgress: (e) => events.push(e) });
  assert.deepEqual(images.map((i) => i.name), ['bb']);
  assert.equal(images[0].owner, 'tenant');
  assert.equal(events.at(-1).type, 'done');
  assert.ok(events.some((e) => e.type === 'unpacked'));
});

after(async () => {
  await registry?.close();
  await server?.stop();
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

test('the list holds host and the imported image', async () => {
  const byName = Object.fromEntries((await client.images.list()).map((i) => [i.name, i]));
  assert.equal(byName.host.owner, 'builtin');
  assert.equal(byName.bb.owner, 'tenant');
  assert.ok(byName.bb.sizeBytes > 0);
  assert.equal(byName.bb.layers.length, 1);
  assert.match(byName.bb.layers[0].digest, /^sha256:/);
  assert.equal((await client.images.get('bb')).id, byName.bb.id);
  // Another tenant does not see it.
  const other = new Client({ url: server.url, apiKey: await server.tenantKey('images-other') });
  assert.ok(!(await other.images.list()).some((i) => i.name === 'bb'));
  await assert.rejects(other.images.get('bb'), sandlot.NotFoundError);
});

test('build streams its log to a callback and the image boots', async () => {
  const ctx = path.join(tmp, 'ctx');
  fs.mkdirSync(ctx);
  fs.writeFileSync(
    path.join(ctx, 'Dockerfile'),
    'FROM bb\n' +
      'ENV GREETING=hello\n' +
      'COPY motd.txt /etc/motd\n' +
      'RUN echo "building as $(id -u)"; echo to-stderr >&2; echo built > /etc/built\n' +
      'WORKDIR /srv\n',
  );
  fs.writeFileSync(path.join(ctx, 'motd.txt'), 'from the context\n');
  const name = unique('app');
  const log = [];
  const events = [];
  const image = await client.images.build(ctx, name, {
    onLog: async (text) => {
      await new Promise((r) => setImmediate(r));
      log.push(text);
    },
    onEvent: (e) => events.push(e),
  });
  assert.equal(image.name, name);
  assert.equal(image.config.workingDir, '/srv');
  assert.ok(image.config.env.includes('GREETING=hello'));
  const text = log.join('');
  assert.ok(text.includes('Step 1 (line 1): FROM bb'), text);
  assert.ok(text.includes('Step 4 (line 4): RUN'), text);
  assert.ok(text.includes('building as 0\n') && text.includes('to-stderr\n'), text);
  assert.deepEqual(events.filter((e) => e.type === 'step').map((e) => e.fields.index), [0, 1, 2, 3, 4]);
  assert.equal(events.at(-1).type, 'done');
  {
    const sbx = await Sandbox.create({ image: name, client });
    try {
      assert.equal(sbx.info.image, name);
      const r = await sbx.commands.run('cat /etc/motd /etc/built; echo $GREETING; pwd');
      assert.equal(r.stdout, 'from the context\nbuilt\nhello\n/srv\n');
    } finally {
      await sbx.delete();
    }
  }
  // Unchanged, it rebuilds from the cache without running anything.
  const again = [];
  await client.images.build(ctx, name, { onEvent: (e) => again.push(e) });
  const steps = again.filter((e) => e.type === 'step');
  assert.ok(steps.length === 5 && steps.every((e) => e.fields.cached === true));
  await client.images.delete(name);
  await assert.rejects(client.images.get(name), sandlot.NotFoundError);
});

test('a failing RUN throws with its line and output', async () => {
  const ctx = tarOf({ Dockerfile: 'FROM bb\nRUN echo about to fail; exit 3\n' });
  const log = [];
  const name = unique('broken');
  const err = await client.images.build(ctx, name, { onLog: (t) => log.push(t) }).catch((e) => e);
  assert.ok(err instanceof sandlot.SandlotError, String(err));
  assert.equal(err.line, 2);
  assert.match(err.tail ?? '', /about to fail/);
  assert.match(err.message, /about to fail/);
  assert.ok(log.join('').includes('about to fail\n'));
  assert.ok(!(await client.images.list()).some((i) => i.name === name));
});

test('a build FROM the default image host is refused', async () => {
  const ctx = tarOf({ Dockerfile: 'FROM host\nRUN true\n' });
  const err = await client.images.build(new Blob([ctx]), unique('from-host')).catch((e) => e);
  assert.ok(err instanceof sandlot.InvalidRequestError, String(err));
  assert.equal(err.code, 'invalid_request');
  assert.match(err.message, /host/);
});

test('pull fetches from a registry with progress and the image boots', async () => {
  const events = [];
  const image = await client.images.pull(registry.ref, { name: 'pulled', onProgress: (e) => events.push(e) });
  assert.deepEqual([image.name, image.reference, image.digest], ['pulled', registry.ref, registry.manifestDigest]);
  assert.equal(image.platform, 'linux/amd64');
  assert.deepEqual(image.layers.map((l) => l.digest), [registry.layerDigest]);
  const kinds = events.map((e) => e.type);
  assert.equal(kinds[0], 'resolved');
  assert.equal(kinds.at(-1), 'done');
  assert.ok(kinds.includes('downloaded') && kinds.includes('unpacked'), kinds.join(','));
  assert.equal(events[0].fields.digest, registry.manifestDigest);
  assert.ok(registry.requests.some((p) => p.endsWith(registry.layerDigest)));
  const sbx = await Sandbox.create({ image: 'pulled', client });
  try {
    // the image's WorkingDir and Env apply
    assert.equal((await sbx.commands.run('pwd; echo $FROM_IMAGE')).stdout, '/etc\nyes\n');
  } finally {
    await sbx.delete();
  }
  // reported in the stream, after its 200
  const missing = await client.images.pull(registry.ref.replace(':1', ':missing')).catch((e) => e);
  assert.ok(missing instanceof sandlot.NotFoundError, String(missing));
  assert.equal(missing.code, 'not_found');
  assert.match(missing.message, /missing/);
});

test('pull refuses a malformed reference before fetching', async () => {
  const err = await client.images.pull('Not A Reference!!').catch((e) => e);
  assert.ok(err instanceof sandlot.InvalidRequestError, String(err));
  assert.equal(err.status, 400);
});
