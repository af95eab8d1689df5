// Commands through the SDK: results, streaming callbacks, stdin, timeouts, truncation, and background
// processes (wait, kill, stdin, their event streams as async iterators, reattaching from a new client).

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import * as sandlot from '../dist/index.js';
import { Client, CommandHandle, Sandbox } from '../dist/index.js';
import { Server } from '../test-support/harness.js';

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

test('a shell line answers its exit code and both streams', async () => {
  const r = await sbx.commands.run('id -un; echo oops >&2; exit 3');
  assert.deepEqual([r.status, r.exitCode, r.ok, r.signal], ['exited', 3, false, undefined]);
  assert.deepEqual([r.stdout, r.stderr], ['user\n', 'oops\n']);
  assert.deepEqual([r.stdoutBytes, r.stderrBytes, r.truncated], [5, 5, false]);
  assert.ok(r.durationMs >= 0);
});

test('argv, cwd, env, user and stdin', async () => {
  await sbx.files.mkdir('/tmp/work');
  const r = await sbx.commands.run(['sh', '-c', 'pwd; echo "$A$B"; id -u'], {
    cwd: '/tmp/work',
    env: { A: 'x', B: 'y' },
    user: 'root',
  });
  assert.ok(r.ok);
  assert.equal(r.stdout, '/tmp/work\nxy\n0\n');
  assert.equal((await sbx.commands.run(['wc', '-c'], { stdin: 'hello world\n' })).stdout.trim(), '12');
  assert.equal((await sbx.commands.run(['cat'], { stdin: new TextEncoder().encode('bytes in\n') })).stdout, 'bytes in\n');
  const missing = await sbx.commands.run(['nosuchprog']);
  assert.deepEqual([missing.status, missing.exitCode], ['exited', 127]);
  assert.match(missing.stderr, /command not found/);
});

test('a timeout ends the command as timeout', async () => {
  const r = await sbx.commands.run(['sleep', '30'], { timeoutS: 0.5 });
  assert.deepEqual([r.status, r.exitCode, r.signal], ['timeout', 124, 9]);
  assert.ok(r.durationMs < 10_000);
});

test('output over the cap keeps head and tail, streamed or not', async () => {
  const cmd = "head -c 5000 /dev/zero | tr '\\0' a; echo; seq 1 3 >&2";
  const r = await sbx.commands.run(cmd, { maxOutputBytes: 1024 });
  assert.ok(r.truncated);
  assert.equal(r.stdoutBytes, 5001);
  assert.equal(r.stderr, '1\n2\n3\n');
  assert.ok(r.stdout.includes('[sandlot: 3977 bytes omitted]'));
  assert.ok(r.stdout.startsWith('a'.repeat(512)) && r.stdout.endsWith('a'.repeat(511) + '\n'));
  // Streamed, the callbacks see head and tail; the result is the server's, marker included.
  const seen = [];
  const streamed = await sbx.commands.run(cmd, { maxOutputBytes: 1024, onStdout: (d) => seen.push(d) });
  assert.equal(streamed.stdout, r.stdout);
  assert.ok(streamed.truncated && streamed.pid !== undefined);
  assert.equal(seen.join(''), 'a'.repeat(512) + 'a'.repeat(511) + '\n');
});

test('streaming callbacks receive output as it comes, sync and async', async () => {
  const events = [];
  const r = await sbx.commands.run('echo one; sleep 1; echo two >&2; sleep 0.2; echo three', {
    onStdout: (d) => events.push(['out', d, Date.now()]),
    onStderr: async (d) => {
      await new Promise((res) => setTimeout(res, 10));
      events.push(['err', d, Date.now()]);
    },
  });
  const done = Date.now();
  assert.deepEqual(
    events.map(([k, d]) => [k, d]),
    [['out', 'one\n'], ['err', 'two\n'], ['out', 'three\n']],
  );
  assert.ok(done - events[0][2] >= 1000, 'the first chunk came while the command still ran');
  assert.deepEqual([r.stdout, r.stderr, r.exitCode], ['one\nthree\n', 'two\n', 0]);
  assert.ok(r.pid >= 1);
});

test('background: stdin, then wait', async () => {
  const h = await sbx.commands.run('while read l; do echo got $l; done; echo bye', { background: true });
  assert.ok(h instanceof CommandHandle);
  assert.ok(h.pid >= 1);
  assert.equal(h.sandboxId, sbx.id);
  await h.sendStdin('a\n');
  await h.sendStdin(new TextEncoder().encode('b\n'), { eof: true });
  const r = await h.wait();
  assert.deepEqual([r.status, r.exitCode, r.stdout, r.pid], ['exited', 0, 'got a\ngot b\nbye\n', h.pid]);
  await assert.rejects(h.sendStdin('too late'), sandlot.ConflictError);
  const c = await sbx.commands.run('cat', { background: true });
  await sbx.commands.sendStdin(c.pid, 'by pid\n');
  await c.closeStdin();
  assert.equal((await c.wait()).stdout, 'by pid\n');
});

test("background wait feeds the callbacks given to run, or to wait", async () => {
  const out = [];
  const h = await sbx.commands.run('echo first; sleep 0.3; echo second', { background: true, onStdout: (d) => out.push(d) });
  const r = await h.wait();
  assert.equal(out.join(''), 'first\nsecond\n');
  assert.equal(r.stdout, 'first\nsecond\n');
  const err = [];
  const h2 = await sbx.commands.run('echo x; echo y >&2', { background: true });
  assert.equal((await h2.wait({ onStderr: (d) => err.push(d) })).stdout, 'x\n');
  assert.deepEqual(err, ['y\n']);
});

test('what a finished command leaves is listed with leftBy, and killable', async () => {
  const r = await sbx.commands.run('sleep 1000 & echo started', { timeoutS: 5 });
  assert.equal(r.stdout, 'started\n');
  const command = (await sbx.commands.list()).filter((p) => p.argv.at(-1) === 'sleep 1000 & echo started').at(-1);
  let left = [];
  for (let i = 0; i < 100 && left.length === 0; i++) {
    left = (await sbx.commands.list()).filter((p) => p.leftBy === command.pid);
    if (left.length === 0) await new Promise((done) => setTimeout(done, 50));
  }
  assert.equal(left.length, 1);
  assert.deepEqual([left[0].running, left[0].argv], [true, ['sleep', '1000']]);
  await sbx.commands.kill(left[0].pid, 15);
  assert.equal((await (await sbx.commands.connect(left[0].pid)).wait()).signal, 15);
});

test('kill signals the process, and a second kill conflicts', async () => {
  const h = await sbx.commands.run(['sleep', '1000'], { background: true, tag: 'sleeper' });
  assert.deepEqual((await sbx.commands.list({ tag: 'sleeper' })).map((p) => p.pid), [h.pid]);
  const info = await h.info();
  assert.equal(info.running, true);
  assert.deepEqual([info.tag, info.argv], ['sleeper', ['sleep', '1000']]);
  await h.kill(15);
  const r = await h.wait();
  assert.deepEqual([r.status, r.signal, r.exitCode], ['signaled', 15, 143]);
  const ended = await h.info();
  assert.deepEqual([ended.running, ended.status, ended.exitCode], [false, 'signaled', 143]);
  const err = await h.kill().catch((e) => e);
  assert.ok(err instanceof sandlot.ConflictError);
  assert.equal(err.status, 409);
  const h2 = await sbx.commands.run(['sleep', '1000'], { background: true });
  await sbx.commands.kill(h2.pid); // SIGKILL by default
  assert.equal((await h2.wait()).signal, 9);
});

test('iterating a handle replays, then follows', async () => {
  const h = await sbx.commands.run('for i in 1 2 3; do echo tick $i; sleep 0.2; done', { background: true });
  const events = [];
  for await (const ev of h) events.push(ev);
  assert.deepEqual(events[0], { type: 'started', pid: h.pid });
  const text = events.filter((e) => e.type === 'stdout').map((e) => e.data).join('');
  assert.equal(text, 'tick 1\ntick 2\ntick 3\n');
  const last = events.at(-1);
  assert.equal(last.type, 'exited');
  assert.deepEqual([last.exitCode, last.stdoutBytes, last.status], [0, 21, 'exited']);
  // Once ended, the whole stream replays.
  const replay = [];
  for await (const o of h.output()) replay.push(o.data);
  assert.deepEqual(replay, events.filter((e) => e.type === 'stdout').map((e) => e.data));
  // Leaving a live stream early closes it; the process runs on.
  const long = await sbx.commands.run('echo start; sleep 600', { background: true });
  for await (const ev of long.events()) {
    if (ev.type === 'stdout') break;
  }
  assert.equal((await long.info()).running, true);
  await long.kill();
});

test('a new client reattaches by pid and sees the output', async () => {
  const h = await sbx.commands.run('echo before; read x; echo after $x', { background: true, tag: 'reattach' });
  await new Promise((r) => setTimeout(r, 300));
  const other = new Client({ url: server.url, apiKey: key });
  const again = await (await Sandbox.connect(sbx.id, { client: other })).commands.connect(h.pid);
  assert.equal(again.pid, h.pid);
  assert.equal((await again.info()).tag, 'reattach');
  await again.sendStdin('now\n', { eof: true });
  const chunks = [];
  for await (const o of again.output()) chunks.push(o.data);
  assert.equal(chunks.join(''), 'before\nafter now\n');
  assert.equal((await again.wait()).stdout, 'before\nafter now\n');
  const missing = await (await Sandbox.connect(sbx.id, { client: other })).commands.connect(9999).catch((e) => e);
  assert.ok(missing instanceof sandlot.NotFoundError);
  assert.equal(missing.status, 404);
});

test("another tenant cannot reach the process", async () => {
  const h = await sbx.commands.run(['sleep', '30'], { background: true });
  const other = new Client({ url: server.url, apiKey: await server.tenantKey('intruder') });
  await assert.rejects(other.call('POST', `/v1/sandboxes/${sbx.id}/processes/${h.pid}/kill`), sandlot.NotFoundError);
  assert.equal((await h.info()).running, true);
  await h.kill();
});
