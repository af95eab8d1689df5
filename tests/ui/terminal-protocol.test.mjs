// The terminal page's side of the PTY WebSocket protocol (docs/API.md, "Dashboard"), against a
// scripted peer: the dashboard's own files served from crates/sandlot/ui with the terminal's CSP,
// and a WebSocket at /v1/sandboxes/sb_fake/pty that plays the server's part. It checks what the page
// sends (subprotocols with the key, size in the query, resize messages, keystrokes as binary frames,
// `pid=` to reattach) and what it does with the answers (bytes drawn, exit shown, reconnect offered).
// The real route is exercised end to end by dashboard.test.mjs once the server has it.

import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import puppeteer from 'puppeteer-core'
import { WebSocketServer } from 'ws'

const UI = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../crates/sandlot/ui')
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium'
const CSP_TERMINAL = "default-src 'none'; script-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.mjs': 'text/javascript', '.css': 'text/css', '.svg': 'image/svg+xml' }
const KEY = 'sl_fakekey123'

let server, url, browser, page
const conns = [] // {url, protocol, offered, control: [], bytes: '' , ws}
let onConn = null

before(async () => {
  server = http.createServer((req, res) => {
    const u = new URL(req.url, 'http://x')
    if (u.pathname.startsWith('/v1/')) {
      res.writeHead(400, { 'Content-Type': 'application/json' })
      res.end('{"error":{"code":"invalid_request","message":"upgrade to a WebSocket"}}')
      return
    }
    const rel = u.pathname === '/ui/' ? 'index.html' : u.pathname.replace(/^\/ui\//, '')
    const file = path.join(UI, rel)
    if (!file.startsWith(UI + '/') || !fs.existsSync(file)) {
      res.writeHead(404)
      res.end()
      return
    }
    res.writeHead(200, { 'Content-Type': TYPES[path.extname(file)] || 'text/plain', 'Content-Security-Policy': CSP_TERMINAL })
    res.end(fs.readFileSync(file))
  })
  const wss = new WebSocketServer({
    server,
    path: '/v1/sandboxes/sb_fake/pty',
    handleProtocols: (protocols) => (protocols.has('sandlot.v1') ? 'sandlot.v1' : false),
  })
  wss.on('connection', (ws, req) => {
    const c = { url: req.url, offered: req.headers['sec-websocket-protocol'], protocol: ws.protocol, control: [], bytes: '', ws }
    conns.push(c)
    ws.on('message', (data, isBinary) => {
      if (!isBinary) return c.control.push(JSON.parse(data.toString()))
      const s = data.toString()
      c.bytes += s
      ws.send(Buffer.from(s.replace(/\r/g, '\r\n')), { binary: true }) // the terminal's echo
      const line = c.bytes.split('\r').slice(-2, -1)[0]
      if (s.includes('\r') && line === 'exit 3') {
        ws.send(JSON.stringify({ type: 'exit', status: 'exited', exit_code: 3 }))
        ws.close(1000)
      } else if (s.includes('\r') && line === 'drop') {
        ws.terminate()
      }
    })
    const reattach = new URL(req.url, 'http://x').searchParams.get('pid')
    ws.send(JSON.stringify({ type: 'started', pid: 7 }))
    ws.send(Buffer.from(reattach ? 'replayed scrollback\r\nfake$ ' : 'fake$ '), { binary: true })
    if (onConn) onConn(c)
  })
  await new Promise((r) => server.listen(0, '127.0.0.1', r))
  url = `http://127.0.0.1:${server.address().port}`
  browser = await puppeteer.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] })
  page = await browser.newPage()
  await page.setViewport({ width: 1000, height: 700 })
  await page.evaluateOnNewDocument(() => {
    window.__cspViolations = []
    document.addEventListener('securitypolicyviolation', (e) => window.__cspViolations.push(e.violatedDirective))
  })
})

after(async () => {
  await browser?.close()
  server?.close()
})

async function rows() {
  return page.$$eval('.xterm-rows > div', (ds) => ds.map((d) => d.textContent.trimEnd()))
}

async function until(fn, what, timeout = 10_000) {
  const deadline = Date.now() + timeout
  for (;;) {
    const v = await fn()
    if (v) return v
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

const status = () => page.$eval('#term-status', (e) => e.textContent)

test('the page offers the key as a subprotocol, sizes the terminal, sends keys as bytes, draws answers, reattaches by pid, shows the exit', async () => {
  await page.goto(`${url}/ui/`)
  await page.evaluate((k) => sessionStorage.setItem('sandlot.key', k), KEY)
  await page.goto(`${url}/ui/terminal.html#sb_fake`)
  const c = await until(() => conns[0], 'a WebSocket connection')
  // The key travels only as a subprotocol; the server picks sandlot.v1.
  assert.equal(c.offered, `sandlot.v1, sandlot.bearer.${KEY}`)
  assert.equal(c.protocol, 'sandlot.v1')
  assert.ok(!c.url.includes(KEY))
  const q = new URL(c.url, 'http://x').searchParams
  const size = { rows: Number(q.get('rows')), cols: Number(q.get('cols')) }
  assert.ok(size.rows >= 20 && size.cols >= 80, JSON.stringify(size))
  await until(async () => /connected · pid 7/.test(await status()), 'the started message')
  assert.deepEqual(c.control[0], { type: 'resize', ...size })

  await page.keyboard.type('hello\r')
  await until(() => c.bytes === 'hello\r', 'the keystrokes as binary frames')
  await until(async () => (await rows()).includes('fake$ hello'), 'the echo drawn')

  // A 100 KiB paste reaches the server whole, in frames of at most 64 KiB (the route's limit).
  const before = c.bytes.length
  const sizes = []
  c.ws.on('message', (d, bin) => bin && sizes.push(d.length))
  await page.evaluate(() => {
    const ta = document.querySelector('.xterm-helper-textarea')
    const dt = new DataTransfer()
    dt.setData('text/plain', 'x'.repeat(100 * 1024))
    ta.dispatchEvent(new ClipboardEvent('paste', { clipboardData: dt, bubbles: true, cancelable: true }))
  })
  await until(() => c.bytes.length - before >= 100 * 1024, 'the paste')
  assert.ok(sizes.length >= 2 && sizes.every((n) => n <= 64 * 1024), JSON.stringify(sizes))
  c.ws.send(Buffer.from('\x1bc'), { binary: true }) // the terminal's reset: clear the paste
  c.bytes = ''

  // A narrower window: the fit addon resizes, and the server is told.
  await page.setViewport({ width: 700, height: 500 })
  const resized = await until(() => c.control.find((m) => m.cols < size.cols), 'a resize message')
  assert.equal(resized.type, 'resize')
  assert.ok(resized.rows < size.rows)

  // The connection drops: the shell lives on; Reconnect reattaches by pid and shows the replay.
  await page.keyboard.type('drop\r')
  await until(async () => /disconnected/.test(await status()), 'the disconnect')
  assert.equal(await page.$eval('#reconnect', (b) => b.hidden), false)
  await page.click('#reconnect')
  const c2 = await until(() => conns[1], 'the second connection')
  const q2 = new URL(c2.url, 'http://x').searchParams
  assert.equal(q2.get('pid'), '7')
  assert.ok(Number(q2.get('rows')) > 0 && Number(q2.get('cols')) > 0, c2.url)
  await until(async () => (await rows()).some((r) => r.includes('replayed scrollback')), 'the replayed output')

  // Exit: the code is shown, New shell offered, and it starts afresh (no pid).
  await page.keyboard.type('exit 3\r')
  await until(async () => /exited with code 3/.test(await status()), 'the exit')
  assert.equal(await page.$eval('#new-shell', (b) => b.hidden), false)
  assert.equal(await page.evaluate(() => sessionStorage.getItem('sandlot.pty.sb_fake')), null)
  await page.click('#new-shell')
  const c3 = await until(() => conns[2], 'a new shell')
  assert.equal(new URL(c3.url, 'http://x').searchParams.get('pid'), null)
  assert.deepEqual(await page.evaluate(() => window.__cspViolations), [])
})
