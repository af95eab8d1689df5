// A real `sandlot serve` on loopback for the dashboard tests, as tests/e2b-node starts one: its own
// state directory and (on a pure cgroup v2 host) its own cgroup; stopped with SIGTERM after.
// SANDLOT_BIN names the binary (default: target/debug/sandlot of this checkout).

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
  const dir = path.join('/sys/fs/cgroup', path.dirname(own), `sandlot-ui-${process.pid}-${port}`)
  fs.mkdirSync(dir)
  return dir
}

export async function startServer() {
  const binary = process.env.SANDLOT_BIN || path.join(REPO, 'target/debug/sandlot')
  assert.ok(fs.existsSync(binary), `no sandlot binary at ${binary}: run cargo build -p sandlot or set SANDLOT_BIN`)
  const port = await freePort()
  const state = fs.mkdtempSync(path.join(os.tmpdir(), 'sandlot-ui-'))
  const cgroup = ownCgroup(port)
  const args = ['serve', '--listen', `127.0.0.1:${port}`, '--state-dir', state, '--layers-volume-gb', '16', '--test-loopback-only']
  const log = fs.openSync(`${state}.log`, 'w')
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
  const admin = fs.readFileSync(path.join(state, 'admin.key'), 'utf8').trim()
  return { proc, state, cgroup, url, admin, log }
}

export async function stopServer(server) {
  if (!server) return
  const exited = new Promise((r) => server.proc.once('exit', r))
  server.proc.kill('SIGTERM')
  let timer
  await Promise.race([exited, new Promise((r) => (timer = setTimeout(r, 60_000)))])
  clearTimeout(timer)
  if (server.proc.exitCode === null && server.proc.signalCode === null) server.proc.kill('SIGKILL')
  fs.closeSync(server.log)
  if (process.env.KEEP_LOG) fs.copyFileSync(`${server.state}.log`, process.env.KEEP_LOG)
  fs.rmSync(server.state, { recursive: true, force: true })
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
}

// The API with a key: JSON in and out; throws on a non-2xx answer.
export function apiClient(url, key) {
  return async function api(method, p, body, headers = {}) {
    const h = { Authorization: `Bearer ${key}`, ...headers }
    let payload = body
    if (body !== undefined && !(body instanceof Uint8Array) && typeof body !== 'string') {
      h['Content-Type'] = 'application/json'
      payload = JSON.stringify(body)
    }
    const resp = await fetch(url + p, { method, headers: h, body: payload })
    const text = await resp.text()
    if (!resp.ok) throw new Error(`${method} ${p}: ${resp.status} ${text}`)
    return text ? JSON.parse(text) : null
  }
}
