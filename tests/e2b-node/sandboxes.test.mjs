// The `e2b` npm package (pinned in package.json / package-lock.json; `npm ci`) against a real
// `sandlot serve` on loopback: create, info, list, timeout, kill, and a command and a file through
// envd. The server is started by tests/support/sandlot-server.mjs, the Node suites' one launcher
// (SANDLOT_BIN names the binary; KEEP_LOG=FILE keeps its log).

import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'

import { SandlotServer } from '../support/sandlot-server.mjs'

let server
let Sandbox, NotFoundError

before(async () => {
  server = await SandlotServer.start({ name: 'e2b-node', keepLogs: 'E2B_NODE_KEEP_LOGS' })
  process.env.E2B_API_URL = `${server.url}/e2b`
  process.env.E2B_SANDBOX_URL = server.url
  process.env.E2B_API_KEY = 'e2b_' + Buffer.from(server.adminKey).toString('hex')
  ;({ Sandbox, NotFoundError } = await import('e2b'))
})

after(async () => {
  await server?.stop()
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
