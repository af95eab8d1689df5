// The web dashboard (/ui/) driven in headless Chromium (Debian's `chromium`, through puppeteer-core
// pinned in package-lock.json) against a real `sandlot serve` on loopback: sign in, a sandbox made
// through the API appearing live, its page, a file download checked byte for byte, an XSS canary
// in file names, command output, metadata and audit rows, the Content-Security-Policy, and the
// terminal (skipped, saying why, on a server without the PTY route).
// CHROMIUM names the browser (default /usr/bin/chromium); SCREENSHOTS=DIR saves the main pages as PNG.

import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { execFileSync } from 'node:child_process'
import puppeteer from 'puppeteer-core'
import { startServer, stopServer, apiClient } from './server.mjs'

const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium'
const CSP = "default-src 'none'; script-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
// Strings that would run if any page parsed data as HTML.
const XSS_NAME = '<img src=x onerror=window.__xss=1>'
const XSS_HTML = '<script>window.__xss=2</script><img src=x onerror=window.__xss=3>'

let server, key, api, browser, page, downloads
const sandboxes = []
const pageErrors = []

async function shot(name) {
  if (!process.env.SCREENSHOTS) return
  fs.mkdirSync(process.env.SCREENSHOTS, { recursive: true })
  await page.screenshot({ path: path.join(process.env.SCREENSHOTS, `${name}.png`), fullPage: name !== 'terminal' })
}

// Waits until fn (run in the page) returns something truthy; returns it.
async function until(fn, arg, what, timeout = 15_000) {
  try {
    const handle = await page.waitForFunction(fn, { timeout, polling: 100 }, arg)
    return await handle.jsonValue()
  } catch (e) {
    const text = await page.evaluate(() => document.body.innerText).catch(() => '?')
    throw new Error(`timed out waiting for ${what}; the page shows:\n${text.slice(0, 3000)}`)
  }
}

// The CSP violations and the canary, as the page saw them.
async function canary() {
  return page.evaluate(() => ({ xss: window.__xss, violations: window.__cspViolations || [], imgs: document.querySelectorAll('img').length }))
}

async function newSandbox(body = {}) {
  const sb = await api('POST', '/v1/sandboxes', { timeout_s: 600, ...body })
  sandboxes.push(sb.id)
  return sb
}

before(async () => {
  assert.ok(fs.existsSync(CHROMIUM), `no Chromium at ${CHROMIUM}: apt-get install chromium (scripts/deps.sh does), or set CHROMIUM`)
  server = await startServer()
  key = (await apiClient(server.url, server.admin)('POST', '/v1/keys', { tenant: 'ui-tests' })).key
  api = apiClient(server.url, key)
  downloads = fs.mkdtempSync(path.join(os.tmpdir(), 'sandlot-ui-downloads-'))
  browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    // Root in a container: Chromium's own sandbox needs user namespaces it may not get.
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run', '--disable-extensions'],
  })
  page = await browser.newPage()
  await page.setViewport({ width: 1280, height: 860 })
  page.on('pageerror', (e) => pageErrors.push(String(e)))
  // Runs before any page script: records every CSP violation the page reports.
  await page.evaluateOnNewDocument(() => {
    window.__cspViolations = []
    document.addEventListener('securitypolicyviolation', (e) =>
      window.__cspViolations.push({ directive: e.violatedDirective, blocked: e.blockedURI, source: e.sourceFile, sample: e.sample }))
  })
  const cdp = await page.createCDPSession()
  await cdp.send('Browser.setDownloadBehavior', { behavior: 'allow', downloadPath: downloads, eventsEnabled: true })
})

after(async () => {
  await browser?.close()
  if (api) for (const id of sandboxes) await api('DELETE', `/v1/sandboxes/${id}`).catch(() => {})
  await stopServer(server)
  if (downloads) fs.rmSync(downloads, { recursive: true, force: true })
})

test('every /ui answer has the CSP and security headers; /ui redirects; files revalidate by ETag', async () => {
  const r = await fetch(`${server.url}/ui`, { redirect: 'manual' })
  assert.equal(r.status, 308)
  assert.equal(r.headers.get('location'), '/ui/')
  for (const [p, type] of [['/ui/', 'text/html'], ['/ui/js/app.js', 'text/javascript'], ['/ui/style.css', 'text/css'], ['/ui/vendor/xterm/xterm.mjs', 'text/javascript']]) {
    const resp = await fetch(server.url + p)
    assert.equal(resp.status, 200, p)
    assert.ok(resp.headers.get('content-type').startsWith(type), `${p}: ${resp.headers.get('content-type')}`)
    assert.equal(resp.headers.get('content-security-policy'), CSP, p)
    assert.equal(resp.headers.get('x-content-type-options'), 'nosniff', p)
    assert.equal(resp.headers.get('referrer-policy'), 'no-referrer', p)
    const etag = resp.headers.get('etag')
    assert.match(etag, /^"[0-9a-f]{32}"$/)
    assert.equal((await fetch(server.url + p, { headers: { 'If-None-Match': etag } })).status, 304, p)
  }
  const term = await fetch(`${server.url}/ui/terminal.html`)
  assert.equal(term.headers.get('content-security-policy'), CSP.replace("style-src 'self'", "style-src 'self' 'unsafe-inline'"))
  const missing = await fetch(`${server.url}/ui/nope.js`)
  assert.equal(missing.status, 404)
  assert.equal(missing.headers.get('content-security-policy'), CSP)
  // The static files need no key; the data does.
  assert.equal((await fetch(`${server.url}/v1/sandboxes`)).status, 401)
})

test('sign in: a wrong key is refused with the reason, the right one is kept in sessionStorage only', async () => {
  await page.goto(`${server.url}/ui/`, { waitUntil: 'load' })
  await page.waitForSelector('form.signin #key')
  await shot('signin')
  await page.type('#key', 'sl_notakey')
  await page.click('form.signin button[type=submit]')
  const err = await until(() => document.getElementById('signin-error')?.textContent, null, 'the sign-in error')
  assert.match(err, /not accepted/)
  await page.$eval('#key', (el) => (el.value = ''))
  await page.type('#key', key)
  await page.click('form.signin button[type=submit]')
  await page.waitForSelector('#sandbox-rows')
  const stored = await page.evaluate(() => ({ session: sessionStorage.getItem('sandlot.key'), local: localStorage.length, cookie: document.cookie, url: location.href }))
  assert.equal(stored.session, key)
  assert.equal(stored.local, 0)
  assert.equal(stored.cookie, '')
  assert.ok(!stored.url.includes(key))
})

test('a sandbox created through the API appears in the open list, metadata shown as text', async () => {
  await until(() => document.querySelector('#sandbox-rows td.empty, #sandbox-rows tr[data-id]'), null, 'the list')
  const sb = await newSandbox({ metadata: { owner: 'ui-test', note: XSS_HTML } })
  const row = await until((id) => document.querySelector(`tr[data-id="${id}"]`)?.innerText, sb.id, 'the new sandbox in the list')
  assert.match(row, /running/)
  assert.ok(row.includes(`note=${XSS_HTML}`), row)
  // The state filter: running shows it, failed does not.
  await page.click('button.filter[data-state="failed"]')
  await until((id) => !document.querySelector(`tr[data-id="${id}"]`), sb.id, 'the failed filter to hide it')
  await page.click('button.filter[data-state="running"]')
  await until((id) => document.querySelector(`tr[data-id="${id}"]`), sb.id, 'the running filter to show it')
  const second = await newSandbox({ metadata: { owner: 'ui-test', job: 'second' } })
  await until(() => document.querySelectorAll('#sandbox-rows tr[data-id]').length >= 2, null, 'two rows')
  // Servers with lifecycle events show them under the list.
  const events = await fetch(`${server.url}/v1/events?since=0`, { headers: { Authorization: `Bearer ${key}` } })
  if (events.status !== 404) {
    assert.equal(events.status, 200)
    await until((id) => [...document.querySelectorAll('#event-rows li')].some((li) => li.innerText.includes(id) && li.innerText.includes('created')), second.id, 'the created event')
  } else {
    assert.equal(await page.$eval('#events', (el) => el.hidden), true)
  }
  await shot('sandboxes')
  if (process.env.SCREENSHOTS) {
    await page.emulateMediaFeatures([{ name: 'prefers-color-scheme', value: 'dark' }])
    await shot('sandboxes-dark')
    await page.setViewport({ width: 420, height: 860 })
    await shot('sandboxes-narrow')
    await page.setViewport({ width: 1280, height: 860 })
    await page.emulateMediaFeatures([])
  }
  const c = await canary()
  assert.equal(c.xss, undefined)
  assert.equal(c.imgs, 0)
})

test('the sandbox page: overview, command output and file names as text, file download byte for byte', async () => {
  const sb = await api('GET', '/v1/sandboxes').then((l) => l.sandboxes.find((s) => s.metadata.note === XSS_HTML))
  // A file named like markup, and one with every byte value to download.
  await api('PUT', `/v1/sandboxes/${sb.id}/files?path=${encodeURIComponent(XSS_NAME)}`, 'canary')
  const bytes = new Uint8Array(4096).map((_, i) => (i * 7 + (i >> 8)) & 255)
  await api('PUT', `/v1/sandboxes/${sb.id}/files?path=data.bin`, bytes, { 'Content-Type': 'application/octet-stream' })
  await api('PUT', `/v1/sandboxes/${sb.id}/files?path=notes/readme.txt`, 'hello from the sandbox\n')
  await api('PUT', `/v1/sandboxes/${sb.id}/files?path=notes/grows.txt`, 'small at first\n')
  // A name that reads as a PDF but saves as .exe, through a right-to-left override.
  const BIDI_NAME = 'invoice\u202Efdp.exe'
  await api('PUT', `/v1/sandboxes/${sb.id}/files?path=${encodeURIComponent(BIDI_NAME)}`, 'MZ')

  await page.click(`tr[data-id="${sb.id}"] a`)
  await until(() => document.querySelector('#overview dd'), null, 'the overview')
  const overview = await page.$eval('#overview', (el) => el.innerText)
  assert.match(overview, /host/)
  assert.match(overview, /512 MiB/)
  assert.ok(overview.includes(`note=${XSS_HTML}`), overview)
  assert.match(await page.$eval('#network', (el) => el.innerText), /deny/)

  // A command whose output is HTML.
  await page.type('#command', `printf '%s\\n' '${XSS_HTML}'`)
  await page.click('#run button[type=submit]')
  const out = await until(() => { const el = document.getElementById('command-output'); return !el.hidden && el.textContent }, null, 'the command output')
  assert.equal(out, XSS_HTML + '\n')
  assert.ok((await page.$eval('#run', (el) => el.innerText)).includes(XSS_HTML))
  await until(() => document.querySelector('#process-rows tr td.mono'), null, 'the process list')

  // A background process's output, streamed into the page as text.
  const { pid } = await api('POST', `/v1/sandboxes/${sb.id}/exec`, { shell: `for i in 1 2 3; do echo "<b>tick $i</b>"; sleep 0.2; done; echo '${XSS_HTML}' >&2`, background: true })
  await until((p) => document.querySelector(`#process-rows button[data-pid="${p}"]`), pid, 'the background process listed')
  await page.click(`#process-rows button[data-pid="${pid}"]`)
  const logs = await until(() => { const t = document.getElementById('process-logs').innerText; return /exited · exit 0/.test(t) && t }, null, 'the streamed output')
  assert.ok(logs.includes('<b>tick 1</b>\n<b>tick 2</b>\n<b>tick 3</b>'), logs)
  assert.ok(logs.includes(XSS_HTML), logs)

  // The files browser lists the home directory: the markup-named file shows as its name.
  const names = await until((n) => {
    const rows = [...document.querySelectorAll('#file-rows tr[data-name]')].map((r) => r.dataset.name)
    return rows.includes(n) && rows
  }, XSS_NAME, 'the files list')
  assert.ok(names.includes('data.bin') && names.includes('notes'), names.join(','))
  const shown = await page.$$eval('#file-rows td.mono', (tds) => tds.map((td) => td.innerText))
  assert.ok(shown.some((t) => t.includes(XSS_NAME)), shown.join('|'))

  // Download: fetch with the key, saved through a blob: link.
  await page.click('#file-rows tr[data-name="data.bin"] button.download')
  const saved = path.join(downloads, 'data.bin')
  const deadline = Date.now() + 15_000
  while (!fs.existsSync(saved)) {
    assert.ok(Date.now() < deadline, `no download at ${saved}: ${fs.readdirSync(downloads)}`)
    await new Promise((r) => setTimeout(r, 100))
  }
  await new Promise((r) => setTimeout(r, 200))
  assert.deepEqual(new Uint8Array(fs.readFileSync(saved)), bytes)

  // The override is not kept in the saved name.
  await page.$$eval('#file-rows tr[data-name]', (rows, n) => rows.find((r) => r.dataset.name === n).querySelector('button.download').click(), BIDI_NAME)
  const bidiSaved = path.join(downloads, 'invoice_fdp.exe')
  const bidiDeadline = Date.now() + 15_000
  while (!fs.existsSync(bidiSaved)) {
    assert.ok(Date.now() < bidiDeadline, `no download at ${bidiSaved}: ${fs.readdirSync(downloads)}`)
    await new Promise((r) => setTimeout(r, 100))
  }
  assert.ok(!fs.readdirSync(downloads).some((f) => f.includes('\u202E')), fs.readdirSync(downloads).join(','))

  // Into a directory and a text preview.
  await page.click('#file-rows tr[data-name="notes"] a')
  await until(() => document.querySelector('#file-rows tr[data-name="readme.txt"]'), null, 'the notes directory')
  await page.$$eval('#file-rows tr[data-name="readme.txt"] button', (b) => b.find((x) => x.textContent === 'View').click())
  assert.equal(await until(() => document.getElementById('file-preview')?.textContent, null, 'the preview'), 'hello from the sandbox\n')
  // A file that grew past the preview's cap after it was listed: the page reads only the cap.
  await api('PUT', `/v1/sandboxes/${sb.id}/files?path=notes/grows.txt`, 'y'.repeat(4 << 20))
  await page.$$eval('#file-rows tr[data-name="grows.txt"] button', (b) => b.find((x) => x.textContent === 'View').click())
  const grown = await until(() => { const t = document.getElementById('file-preview')?.textContent; return t && t.startsWith('y') && t }, null, 'the grown file preview')
  assert.ok(grown.length <= 256 * 1024 + 200, `the preview held ${grown.length} characters`)
  assert.match(grown, /grew past/)

  // Back up to the home directory.
  await page.$$eval('#file-rows a.dir', (a) => a.find((x) => x.textContent === '..').click())
  await until((n) => document.querySelector(`#file-rows tr[data-name="${n}"]`), 'data.bin', 'the home directory again')

  // Audit rows of this sandbox include the exec with its HTML argv, as text.
  await until(() => document.querySelector('#audit table') && document.querySelector('#metrics .chart, #metrics .notice'), null, 'the audit rows and metrics')
  const audit = await page.$eval('#audit', (el) => el.innerText)
  assert.match(audit, /file\.write/)
  assert.ok(audit.includes('<script>window.__xss=2</script>'), audit)
  await shot('sandbox')
  const c = await canary()
  assert.equal(c.xss, undefined, 'markup from the sandbox ran')
  assert.equal(c.imgs, 0, 'markup from the sandbox became elements')
  assert.deepEqual(c.violations, [])
})

test('metrics: charts from the metrics route, or a clear note when the server has none', async () => {
  const resp = await fetch(`${server.url}/v1/sandboxes/${sandboxes[0]}/metrics`, { headers: { Authorization: `Bearer ${key}` } })
  if (resp.status === 404 && /route not found/.test(await resp.text())) {
    assert.match(await page.$eval('#metrics', (el) => el.innerText), /not available on this server/)
  } else {
    assert.equal(resp.status, 200)
    // The sampler's first samples may take an interval to come.
    await until(() => document.querySelector('#metrics svg circle.dot'), null, 'a metrics sample in the chart', 30_000)
    const text = await page.$eval('#metrics', (el) => el.innerText)
    assert.match(text, /CPU/)
    assert.match(text, /Memory/)
  }
})

test('metrics charts draw a window of samples (the route answered by the browser, in its wire shape)', async () => {
  const id = sandboxes[0]
  const now = Date.now()
  const samples = Array.from({ length: 30 }, (_, i) => ({
    at_ms: now - (30 - i) * 2000, cpu_usage_usec: i * 1e5, cpu_used_pct: 20 + 15 * Math.sin(i / 3), cpu_periods_total: i * 20,
    cpu_throttled_periods_total: i, cpu_throttled_usec: i * 100, memory_bytes: (40 + i) * 1048576, memory_cache_bytes: 1048576,
    memory_peak_bytes: 80 * 1048576, oom_kills_total: 0, pids: 3 + (i % 4), disk_used_bytes: 1 << 20, net_bytes_out_total: i * 1000,
    net_bytes_in_total: i * 5000, net_connections: 1, net_connections_total: i,
  }))
  const body = { id, state: 'running', interval_ms: 2000, window_s: 600, limits: { cpu: 1, memory_bytes: 512 * 1048576, pids: 256, disk_bytes: null }, samples }
  const handler = (req) => {
    if (req.isInterceptResolutionHandled()) return
    const u = new URL(req.url())
    if (u.pathname === `/v1/sandboxes/${id}/metrics`) {
      // The first answer holds the window; later ones (since=) nothing new.
      const fresh = u.searchParams.has('since') ? [] : samples
      req.respond({ status: 200, contentType: 'application/json', body: JSON.stringify({ ...body, samples: fresh }) })
    } else req.continue()
  }
  await page.setRequestInterception(true)
  page.on('request', handler)
  try {
    await page.goto(`${server.url}/ui/#/sandboxes/${id}`)
    await page.reload()
    await until(() => document.querySelectorAll('#metrics svg path.line').length >= 3, null, 'three line charts')
    const text = await page.$eval('#metrics', (el) => el.innerText)
    assert.match(text, /30 samples over 58 s/)
    assert.match(text, /69 MiB/) // the last memory sample
    assert.match(text, /throttled in 29 of 580 CPU periods/)
    await shot('sandbox-metrics')
  } finally {
    page.off('request', handler)
    await page.setRequestInterception(false)
  }
})

test('audit search and images pages render rows as text', async () => {
  await page.click('#nav a[data-route=audit]')
  await until(() => document.querySelector('#audit-results table'), null, 'the audit table')
  await page.type('#audit-action', 'exec')
  await page.click('.filters-form button[type=submit]')
  const rows = await until(() => { const s = document.querySelector('[role=status]')?.textContent; return /^\d+ of/.test(s || '') && [...document.querySelectorAll('#audit-results tbody tr')].map((r) => r.innerText) }, null, 'the filtered rows')
  assert.ok(rows.length >= 1)
  assert.ok(rows.every((r) => /\bexec/.test(r)), rows.join('\n'))
  assert.ok(rows.some((r) => r.includes(XSS_HTML)), rows.join('\n'))
  await page.$eval('#audit-action', (el) => (el.value = ''))
  await page.click('.filters-form button[type=submit]')
  await until(() => document.querySelectorAll('#audit-results tbody tr').length > 3, null, 'all rows')
  await shot('audit')

  // A tenant image: a root filesystem of the static busybox (scripts/deps.sh installs it), imported.
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'sandlot-ui-rootfs-'))
  try {
    fs.mkdirSync(path.join(root, 'bin'))
    fs.copyFileSync('/bin/busybox', path.join(root, 'bin/busybox'))
    fs.chmodSync(path.join(root, 'bin/busybox'), 0o755)
    fs.symlinkSync('busybox', path.join(root, 'bin/sh'))
    const tar = execFileSync('tar', ['-C', root, '-c', '.'], { maxBuffer: 64 << 20 })
    await api('POST', '/v1/images/import?name=ui-busybox', new Uint8Array(tar), { 'Content-Type': 'application/x-tar' })
  } finally {
    fs.rmSync(root, { recursive: true, force: true })
  }
  await page.click('#nav a[data-route=images]')
  const images = await until(() => { const n = [...document.querySelectorAll('#image-rows tr')].map((r) => r.dataset.name); return n.length && n }, null, 'the images table')
  assert.deepEqual(images.sort(), ['host', 'ui-busybox'])
  assert.match(await page.$eval('#image-rows tr[data-name="ui-busybox"]', (el) => el.innerText), /tenant/)
  await shot('images')
  const c = await canary()
  assert.equal(c.xss, undefined)
  assert.deepEqual(c.violations, [])
})

test('lifecycle from the sandbox page: pause, resume, delete (confirmed), and the deleted page says so', async () => {
  const id = sandboxes[1]
  await page.goto(`${server.url}/ui/#/sandboxes/${id}`)
  await page.reload()
  const click = (label) => page.$$eval('.actions button', (bs, l) => bs.find((b) => b.textContent === l).click(), label)
  await until(() => document.querySelector('.actions button'), null, 'the actions')
  await click('Pause')
  await until(() => document.querySelector('.title-row .badge')?.textContent === 'paused', null, 'the paused state')
  assert.equal((await api('GET', `/v1/sandboxes/${id}`)).state, 'paused')
  await until(() => /The sandbox is paused/.test(document.getElementById('processes').innerText), null, 'the processes to say paused')
  await click('Resume')
  await until(() => document.querySelector('.title-row .badge')?.textContent === 'running', null, 'the running state')
  page.once('dialog', (d) => d.accept())
  await click('Delete')
  await until(() => document.querySelector('.title-row .badge')?.textContent === 'deleted', null, 'the deleted state')
  assert.equal(await page.$('.actions button'), null)
  assert.match(await page.$eval('#files', (el) => el.innerText), /while the sandbox runs/)
  assert.deepEqual(pageErrors, [])
})

test('the CSP is enforced: an injected inline script is refused and reported, our own assets report nothing', async () => {
  await page.goto(`${server.url}/ui/#/`)
  await until(() => document.querySelector('#sandbox-rows tr[data-id]'), null, 'the list')
  assert.deepEqual((await canary()).violations, [], 'our own pages caused CSP violations')
  // What an HTML injection would do, were there one: neither runs.
  await page.evaluate(() => {
    const s = document.createElement('script')
    s.textContent = 'window.__xss = 4'
    document.body.append(s)
    const d = document.createElement('div')
    d.innerHTML = '<img src=x onerror="window.__xss=5">'
    document.body.append(d)
  })
  const v = await until(() => window.__cspViolations.length >= 2 && window.__cspViolations, null, 'the violation reports')
  assert.equal(await page.evaluate(() => window.__xss), undefined)
  assert.ok(v.some((x) => x.directive.startsWith('script-src')), JSON.stringify(v))
  assert.ok(v.some((x) => x.directive.startsWith('img-src') || x.directive.startsWith('script-src-attr')), JSON.stringify(v))
})

test('the terminal page loads xterm.js under its CSP and sizes it to the window (the PTY probe answered by the browser)', async () => {
  const id = sandboxes[0]
  const handler = (req) => {
    if (req.isInterceptResolutionHandled()) return
    // A server with the route answers a GET without an upgrade with a 4xx that is not 404.
    if (new URL(req.url()).pathname === `/v1/sandboxes/${id}/pty`) req.respond({ status: 400, contentType: 'application/json', body: '{"error":{"code":"invalid_request","message":"upgrade to a WebSocket"}}' })
    else req.continue()
  }
  await page.setRequestInterception(true)
  page.on('request', handler)
  try {
    await page.goto(`${server.url}/ui/terminal.html#${id}`)
    await page.waitForSelector('.xterm-rows')
    // The WebSocket itself reaches the real server; without the route it closes at once.
    const size = await until(() => {
      const rows = document.querySelectorAll('.xterm-rows > div').length
      const s = document.getElementById('term-status').textContent
      return rows > 10 && !/connecting/.test(s) && { rows, status: s }
    }, null, 'xterm to draw its rows')
    assert.ok(size.rows >= 30, `only ${size.rows} rows in an 860 px window`)
    assert.deepEqual((await canary()).violations, [], 'xterm.js caused CSP violations')
    assert.equal(await page.$eval('#back', (a) => a.getAttribute('href')), `./#/sandboxes/${id}`)
  } finally {
    page.off('request', handler)
    await page.setRequestInterception(false)
    // Where the route exists this started a real shell: the next test starts its own.
    await page.evaluate((k) => sessionStorage.removeItem(k), `sandlot.pty.${id}`)
    await page.goto('about:blank')
  }
})

test('the terminal: type a command, read its output from the xterm buffer', async (t) => {
  const id = sandboxes[0]
  const probe = await fetch(`${server.url}/v1/sandboxes/${id}/pty`, { headers: { Authorization: `Bearer ${key}` } })
  const body = await probe.text()
  if (probe.status === 404 && /route not found/.test(body)) {
    // The page must say so, too.
    await page.goto(`${server.url}/ui/terminal.html#${id}`)
    const note = await until(() => { const n = document.getElementById('term-notice'); return !n.hidden && n.textContent }, null, 'the not-available note')
    assert.match(note, /not available on this server/)
    t.skip('this server has no GET /v1/sandboxes/{id}/pty route (404 "route not found"): the terminal test runs once the PTY route is merged')
    return
  }
  await page.goto(`${server.url}/ui/#/sandboxes/${id}`)
  await page.waitForSelector('#open-terminal')
  await page.click('#open-terminal')
  await until(() => /connected · pid \d+/.test(document.getElementById('term-status')?.textContent || ''), null, 'the terminal to connect')
  await page.waitForSelector('.xterm-rows')
  await page.keyboard.type('echo $((6*7))\n')
  const rows = await until(() => {
    const lines = [...document.querySelectorAll('.xterm-rows > div')].map((d) => d.textContent.trim())
    return lines.includes('42') && lines
  }, null, 'the 42 in the terminal')
  assert.ok(rows.some((l) => l.includes('echo $((6*7))')), rows.join('\n'))
  await shot('terminal')
  // xterm's own styles are allowed on this page; nothing else is reported.
  assert.deepEqual((await canary()).violations, [])
  await page.keyboard.type('exit\n')
  await until(() => /exited with code 0/.test(document.getElementById('term-status')?.textContent || ''), null, 'the exit')
})

test('sign out forgets the key', async () => {
  await page.goto(`${server.url}/ui/#/`)
  await page.waitForSelector('#signout')
  await page.click('#signout')
  await page.waitForSelector('form.signin #key')
  assert.equal(await page.evaluate(() => sessionStorage.getItem('sandlot.key')), null)
  assert.deepEqual(pageErrors, [])
})
