// The `e2b` npm package (pinned in package.json / package-lock.json; `npm ci`) against a real
// `sandlot serve` on loopback: create, info, list, timeout, kill, and a command and a file through
// envd. SANDLOT_BIN names the binary (default: target/debug/sandlot of this checkout).

import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer()
    s.on('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address()
      s.close(() => resolve(port))
    })
  })
}

// On a pure cgroup v2 host the daemon needs a cgroup of its own (it refuses to share one).
function ownCgroup(port) {
  if (!fs.existsSync('/sys/fs/cgroup/cgroup.controllers')) return null
  const mounts = fs.readFileSync('/proc/self/mountinfo', 'utf8')
  if (mounts.split('\n').some((l) => l.includes(' - cgroup cgroup ') && l.includes('memory'))) return null
  const own = fs.readFileSync('/proc/self/cgroup', 'utf8').split('\n').find((l) => l.startsWith('0::')).slice(3)
  const dir = path.join('/sys/fs/cgroup', path.dirname(own), `sandlot-e2b-node-${process.pid}-${port}`)
  fs.mkdirSync(dir)
  return dir
}

let server
let Sandbox, NotFoundError

before(async () => {
  const binary = process.env.SANDLOT_BIN || path.join(REPO, 'target/debug/sandlot')
  assert.ok(fs.existsSync(binary), `no sandlot binary at ${binary}: run cargo build -p sandlot or set SANDLOT_BIN`)
  const port = await freePort()
  const state = fs.mkdtempSync(path.join(os.tmpdir(), 'sandlot-e2b-node-'))
  const cgroup = ownCgroup(port)
  const args = ['serve', '--listen', `127.0.0.1:${port}`, '--state-dir', state, '--layers-volume-gb', '16', '--test-loopback-only']
  const log = fs.openSync(`${state}.log`, 'w')
  // The shell moves itself into the cgroup, then becomes the daemon.
  const script = cgroup ? `echo $$ > ${cgroup}/cgroup.procs && exec "$0" "$@"` : 'exec "$0" "$@"'
  const proc = spawn('/bin/sh', ['-c', script, binary, ...args], { stdio: ['ignore', log, log] })
  const url = `http://127.0.0.1:${port}`
  const deadline = Date.now() + 60_000
  for (;;) {
    assert.equal(proc.exitCode, null, `sandlot serve exited:\n${fs.readFileSync(`${state}.log`, 'utf8').slice(-4000)}`)
    try {
      if ((await fetch(`${url}/healthz`)).ok) break
    } catch {}
    assert.ok(Date.now() < deadline, 'sandlot serve did not answer in 60 s')
    await new Promise((r) => setTimeout(r, 100))
  }
  const key = fs.readFileSync(path.join(state, 'admin.key'), 'utf8').trim()
  process.env.E2B_API_URL = `${url}/e2b`
  process.env.E2B_SANDBOX_URL = url
  process.env.E2B_API_KEY = 'e2b_' + Buffer.from(key).toString('hex')
  ;({ Sandbox, NotFoundError } = await import('e2b'))
  server = { proc, state, cgroup, url, key, log }
})

after(async () => {
  if (!server) return
  const exited = new Promise((r) => server.proc.once('exit', r))
  server.proc.kill('SIGTERM')
  let timer
  await Promise.race([exited, new Promise((r) => (timer = setTimeout(r, 60_000)))])
  // A pending timer would hold the test runner open until it fires.
  clearTimeout(timer)
  if (server.proc.exitCode === null) server.proc.kill('SIGKILL')
  fs.closeSync(server.log)
  fs.rmSync(server.state, { recursive: true, force: true })
  // KEEP_LOG=FILE keeps the daemon's log for a failed run.
  if (process.env.KEEP_LOG) fs.copyFileSync(`${server.state}.log`, process.env.KEEP_LOG)
  fs.rmSync(`${server.state}.log`, { force: true })
  if (server.cgroup) {
    for (let i = 0; i < 50; i++) {
      try {
        fs.rmdirSync(server.cgroup)
        break
      } catch {
        await new Promise((r) => setTimeout(r, 100))
      }
    }
  }
})

test('create, info, list by metadata, timeout, kill', async () => {
  const tag = Math.random().toString(16).slice(2)
  const sbx = await Sandbox.create({ metadata: { run: tag }, timeoutMs: 120_000 })
  try {
    const info = await Sandbox.getInfo(sbx.sandboxId)
    assert.equal(info.sandboxId, sbx.sandboxId)
    assert.deepEqual(info.metadata, { run: tag })
    assert.equal(info.state, 'running')
    const life = (info.endAt - info.startedAt) / 1000
    assert.ok(life > 115 && life <= 121, `lifetime ${life}`)

    const pages = Sandbox.list({ query: { metadata: { run: tag } } })
    const listed = await pages.nextItems()
    assert.deepEqual(listed.map((s) => s.sandboxId), [sbx.sandboxId])

    await sbx.setTimeout(30_000)
    const left = ((await Sandbox.getInfo(sbx.sandboxId)).endAt - Date.now()) / 1000
    assert.ok(left > 20 && left <= 31, `left ${left}`)
  } finally {
    assert.equal(await sbx.kill(), true)
  }
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId), NotFoundError)
  assert.equal(await Sandbox.kill(sbx.sandboxId), false)
})

test('an unknown template is not found, and says what to do', async () => {
  await assert.rejects(Sandbox.create('no-such-template-node'), (e) => /sandlot image build/.test(e.message))
})

test('a command runs and a file round-trips through envd', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 60_000 })
  try {
    const r = await sbx.commands.run('echo hi from node')
    assert.equal(r.stdout, 'hi from node\n')
    assert.equal(r.exitCode, 0)
    await sbx.files.write('/home/user/note.txt', 'written by node')
    assert.equal(await sbx.files.read('/home/user/note.txt'), 'written by node')
  } finally {
    await sbx.kill()
  }
})
