// The API's errors as the SDK's classes: each code's class, HTTP status, the server's message and its
// retry hint; transport and configuration failures; 404 for an unknown id and for another tenant's.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import * as sandlot from '../dist/index.js';
import { Client, Sandbox } from '../dist/index.js';
import { Server, freePort } from '../test-support/harness.js';

let server, key, client, sbx;

before(async () => {
  server = await Server.start();
  key = await server.tenantKey('sdk-ts');
  client = new Client({ url: server.url, apiKey: key });
  sbx = await Sandbox.create({ client, timeoutS: 600 });
});

after(async () => {
  await sbx?.delete();
  await server?.stop();
});

const caught = (p) => p.then(
  (v) => assert.fail(`expected an error, got ${JSON.stringify(v)}`),
  (e) => e,
);

test('an unknown sandbox is NotFoundError', async () => {
  const e = await caught(Sandbox.connect('sb_doesnotexist00000000', { client }));
  assert.equal(e.constructor, sandlot.NotFoundError);
  assert.ok(e instanceof sandlot.SandlotError && e instanceof Error);
  assert.deepEqual([e.name, e.status, e.code, e.retryable], ['NotFoundError', 404, 'not_found', false]);
  assert.ok(e.message.includes('sb_doesnotexist00000000'));
});

test("another tenant's sandbox answers exactly like an unknown one", async () => {
  const other = new Client({ url: server.url, apiKey: await server.tenantKey('other-tenant') });
  const theirs = await caught(Sandbox.connect(sbx.id, { client: other }));
  assert.ok(theirs instanceof sandlot.NotFoundError);
  await assert.rejects(other.call('POST', `/v1/sandboxes/${sbx.id}/exec`, { json: { argv: ['true'] } }), sandlot.NotFoundError);
  await assert.rejects(new sandlot.Files(other, sbx.id).read('/etc/hostname'), sandlot.NotFoundError);
  await assert.rejects(new Sandbox(other, sbx.info).delete(), sandlot.NotFoundError);
  assert.ok(!(await other.listSandboxes()).some((s) => s.id === sbx.id));
  const unknown = await caught(Sandbox.connect('sb_zzzzzzzzzzzzzzzzzzzz', { client: other }));
  assert.deepEqual([theirs.status, theirs.code], [404, 'not_found']);
  assert.deepEqual([unknown.status, unknown.code], [404, 'not_found']);
  assert.equal(theirs.message, unknown.message.replace('sb_zzzzzzzzzzzzzzzzzzzz', sbx.id));
  assert.equal(await sbx.isRunning(), true);
});

test('a bad value is InvalidRequestError naming the field (400)', async () => {
  const e = await caught(Sandbox.create({ client, cpu: 1000 }));
  assert.ok(e instanceof sandlot.InvalidRequestError);
  assert.deepEqual([e.status, e.code, e.retryable], [400, 'invalid_request', false]);
  assert.match(e.message, /cpu/);
  const unknownField = await caught(client.call('POST', '/v1/sandboxes', { json: { memroy_mb: 5 } }));
  assert.ok(unknownField instanceof sandlot.InvalidRequestError);
  assert.match(unknownField.message, /memroy_mb/);
  const small = await caught(Sandbox.create({ client, memoryMb: 1 }));
  assert.ok(small instanceof sandlot.InvalidRequestError && /memory_mb/.test(small.message));
});

test('a 409 is ConflictError', async () => {
  const h = await sbx.commands.run(['true'], { background: true });
  await h.wait();
  const e = await caught(h.kill());
  assert.equal(e.constructor, sandlot.ConflictError);
  assert.deepEqual([e.status, e.code, e.retryable], [409, 'conflict', false]);
  assert.match(e.message, /exited/);
});

test('a bad key is AuthError (401); a tenant key is ForbiddenError on admin routes (403)', async () => {
  const bad = new Client({ url: server.url, apiKey: 'sl_not_a_real_key' });
  const e = await caught(bad.listSandboxes());
  assert.ok(e instanceof sandlot.AuthError);
  assert.deepEqual([e.status, e.code, e.retryable], [401, 'unauthenticated', false]);
  const f = await caught(client.createKey('someone'));
  assert.ok(f instanceof sandlot.ForbiddenError);
  assert.deepEqual([f.status, f.code], [403, 'forbidden']);
  const admin = new Client({ url: server.url, apiKey: server.adminKey });
  const made = await admin.createKey('made-by-sdk', { expiresInS: 3600 });
  assert.equal(made.tenant, 'made-by-sdk');
  assert.match(made.key, /^sl_/);
  assert.ok(made.id && made.expiresAtMs > Date.now());
  const fresh = new Client({ url: server.url, apiKey: made.key });
  assert.deepEqual(await fresh.listSandboxes(), []);
  const audit = await admin.audit({ limit: 5 });
  assert.ok(audit.length > 0 && audit.some((a) => a.action === 'key.create'));
  const mine = await client.audit({ sandboxId: sbx.id });
  assert.ok(mine.every((a) => a.sandboxId === sbx.id && a.tenant === 'sdk-ts'));
  assert.ok(mine.some((a) => a.action === 'sandbox.create'));
});

test('permission, file and kind errors have their classes', async () => {
  const p = await caught(sbx.files.write('/etc/x', 'x'));
  assert.ok(p instanceof sandlot.PermissionDeniedError);
  assert.deepEqual([p.status, p.code], [403, 'permission_denied']);
  const nf = await caught(sbx.files.read('nope/never.txt'));
  assert.ok(nf instanceof sandlot.FileNotFoundError && nf instanceof sandlot.NotFoundError);
  assert.deepEqual([nf.status, nf.code], [404, 'file_not_found']);
  const wk = await caught(sbx.files.read('/home/user'));
  assert.ok(wk instanceof sandlot.WrongFileKindError && wk instanceof sandlot.ConflictError);
  assert.deepEqual([wk.status, wk.code], [409, 'wrong_file_kind']);
});

test('no server is a retryable ConnectError', async () => {
  const port = await freePort(); // closed again: nothing listens there
  const c = new Client({ url: `http://127.0.0.1:${port}`, apiKey: key });
  const e = await caught(c.listSandboxes());
  assert.ok(e instanceof sandlot.ConnectError);
  assert.deepEqual([e.retryable, e.status, e.code], [true, undefined, undefined]);
  assert.ok(e.message.includes(String(port)));
});

test('configuration comes from the environment or is refused', async () => {
  const saved = { url: process.env.SANDLOT_URL, key: process.env.SANDLOT_API_KEY };
  try {
    delete process.env.SANDLOT_API_KEY;
    delete process.env.SANDLOT_URL;
    const e = (() => {
      try {
        new Client();
      } catch (err) {
        return err;
      }
    })();
    assert.ok(e instanceof sandlot.ConfigError);
    assert.match(e.message, /SANDLOT_API_KEY/);
    process.env.SANDLOT_API_KEY = key;
    assert.equal(new Client().url, sandlot.DEFAULT_URL); // the CLI's default when SANDLOT_URL is unset
    process.env.SANDLOT_URL = server.url + '/';
    const c = new Client();
    assert.equal(c.url, server.url);
    const health = await c.health();
    assert.equal(health.status, 'ok');
    assert.ok(Array.isArray(health.degraded));
    assert.throws(() => new Client({ url: '127.0.0.1:7423', apiKey: key }), sandlot.ConfigError);
  } finally {
    if (saved.url === undefined) delete process.env.SANDLOT_URL;
    else process.env.SANDLOT_URL = saved.url;
    if (saved.key === undefined) delete process.env.SANDLOT_API_KEY;
    else process.env.SANDLOT_API_KEY = saved.key;
  }
});

test("a client-side timeout is a retryable TimeoutError; waiting calls have none", async () => {
  const c = new Client({ url: server.url, apiKey: key, timeoutMs: 500 });
  const h = await sbx.commands.run(['sleep', '3'], { background: true });
  // A bounded call (not one of the waiting ones) that outlasts the client's timeout.
  const e = await caught(c.call('POST', `/v1/sandboxes/${sbx.id}/processes/${h.pid}/wait`));
  assert.ok(e instanceof sandlot.TimeoutError);
  assert.equal(e.retryable, true);
  // The handle's wait lasts as long as the process, whatever the client's timeout.
  const again = await new Sandbox(c, sbx.info).commands.connect(h.pid);
  assert.equal((await again.wait()).exitCode, 0);
});

test('error bodies map by code, else by status', () => {
  const e = sandlot.errorFromResponse(429, '{"error":{"code":"server_full","message":"full","retryable":true}}');
  assert.ok(e instanceof sandlot.ServerFullError && e instanceof sandlot.LimitReachedError);
  assert.deepEqual([e.status, e.code, e.retryable, e.message], [429, 'server_full', true, 'full']);
  const odd = sandlot.errorFromResponse(503, 'overloaded');
  assert.ok(odd instanceof sandlot.UnavailableError && odd.retryable);
  assert.equal(odd.message, 'HTTP 503: overloaded');
  const newer = sandlot.errorFromResponse(409, '{"error":{"code":"some_new_code","message":"m"}}');
  assert.equal(newer.constructor, sandlot.ConflictError);
  assert.equal(newer.code, 'some_new_code');
});
