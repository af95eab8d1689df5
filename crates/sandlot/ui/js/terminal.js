// A live terminal in a sandbox: xterm.js over the PTY WebSocket (GET /v1/sandboxes/{id}/pty).
// Binary frames carry terminal bytes both ways; text frames carry JSON control messages:
// {"type":"resize","rows","cols"} from here, {"type":"started","pid"} and {"type":"exit","exit_code"}
// from the server. The key goes as a WebSocket subprotocol (`sandlot.bearer.<KEY>`, beside
// `sandlot.v1`): a browser cannot set headers on a WebSocket, and a URL would leak it into logs.
// The shell outlives a dropped connection: Reconnect reattaches to it by pid.
import { Terminal } from '../vendor/xterm/xterm.mjs'
import { FitAddon } from '../vendor/addon-fit/addon-fit.mjs'
import * as api from './api.js'
import { replace } from './dom.js'

const id = decodeURIComponent(location.hash.slice(1))
const base = `/v1/sandboxes/${api.enc(id)}`
const status = document.getElementById('term-status')
const notice = document.getElementById('term-notice')
const reconnect = document.getElementById('reconnect')
const newShell = document.getElementById('new-shell')
const PID_KEY = `sandlot.pty.${id}`

document.getElementById('back').setAttribute('href', `./#/sandboxes/${encodeURIComponent(id)}`)
replace(document.getElementById('sandbox'), id)
document.title = `Terminal · ${id} · sandlot`

function showNotice(text) {
  replace(notice, text)
  notice.hidden = false
}

const term = new Terminal({
  cursorBlink: true,
  fontFamily: 'ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace',
  fontSize: 14,
  scrollback: 5000,
  theme: { background: '#0f1419', foreground: '#e6e1cf' },
})
const fit = new FitAddon()
term.loadAddon(fit)

let ws = null
let pid = Number(sessionStorage.getItem(PID_KEY)) || null
let exited = false
const encoder = new TextEncoder()

// The server takes frames of at most 64 KiB: a large paste goes in pieces.
const FRAME = 32 << 10

function send(data) {
  if (!ws || ws.readyState !== WebSocket.OPEN) return
  if (typeof data === 'string') return ws.send(data)
  for (let i = 0; i < data.length; i += FRAME) ws.send(data.subarray(i, i + FRAME))
}

term.onData((s) => send(encoder.encode(s)))
term.onBinary((s) => send(Uint8Array.from(s, (c) => c.charCodeAt(0))))
term.onResize(({ rows, cols }) => send(JSON.stringify({ type: 'resize', rows, cols })))
window.addEventListener('resize', () => fit.fit())

function connect(attach) {
  exited = false
  reconnect.hidden = true
  newShell.hidden = true
  const proto = location.protocol === 'https:' ? 'wss:' : 'ws:'
  const q = api.qs({ pid: attach || undefined, rows: term.rows, cols: term.cols })
  replace(status, attach ? `reattaching to pid ${attach}…` : 'connecting…')
  ws = new WebSocket(`${proto}//${location.host}${base}/pty${q}`, ['sandlot.v1', 'sandlot.bearer.' + api.key()])
  ws.binaryType = 'arraybuffer'
  let started = false
  let opened = false
  ws.onopen = () => {
    opened = true
    if (attach) {
      // Reattached: the server checked the pid before the upgrade.
      started = true
      replace(status, `connected · pid ${attach}`)
    }
    send(JSON.stringify({ type: 'resize', rows: term.rows, cols: term.cols }))
    term.focus()
  }
  ws.onmessage = (ev) => {
    if (typeof ev.data !== 'string') {
      term.write(new Uint8Array(ev.data))
      return
    }
    let msg
    try {
      msg = JSON.parse(ev.data)
    } catch {
      return
    }
    if (msg.type === 'started') {
      started = true
      pid = msg.pid
      sessionStorage.setItem(PID_KEY, String(pid))
      replace(status, `connected · pid ${pid}`)
    } else if (msg.type === 'exit') {
      exited = true
      sessionStorage.removeItem(PID_KEY)
      pid = null
      const how = msg.status && msg.status !== 'exited' ? ` (${msg.status}${msg.signal ? ', signal ' + msg.signal : ''})` : ''
      replace(status, `exited with code ${msg.exit_code}${how}`)
      newShell.hidden = false
    } else if (msg.type === 'error') {
      showNotice(`The terminal failed: ${msg.message || msg.code || 'unknown error'}`)
    }
  }
  ws.onclose = (ev) => {
    ws = null
    if (exited) return
    if (attach && !started) {
      // The process we meant to reattach to is gone: start afresh on request.
      sessionStorage.removeItem(PID_KEY)
      pid = null
      replace(status, `could not reattach${ev.reason ? ': ' + ev.reason : ''}`)
      newShell.hidden = false
      return
    }
    replace(status, opened ? `disconnected${ev.reason ? ': ' + ev.reason : ''}` : `could not connect (WebSocket closed, code ${ev.code})`)
    if (pid) reconnect.hidden = false
    newShell.hidden = false
  }
}

reconnect.addEventListener('click', () => connect(pid))
newShell.addEventListener('click', () => {
  sessionStorage.removeItem(PID_KEY)
  pid = null
  term.reset()
  connect(null)
})

async function start() {
  if (!api.key()) {
    showNotice('Sign in first: open the dashboard, sign in with an API key, then open the terminal from a sandbox.')
    return
  }
  if (!/^sb_[A-Za-z0-9]+$/.test(id)) {
    showNotice('No sandbox named in this address: open the terminal from a sandbox page.')
    return
  }
  // Is there a PTY route on this server? A plain GET (no upgrade) answers 404 "route not found"
  // on a server without one, and a 4xx about the missing upgrade where it exists.
  try {
    await api.raw(`${base}/pty`)
  } catch (err) {
    if (err.routeMissing) {
      showNotice('The terminal is not available on this server: it has no /v1/sandboxes/{id}/pty route (a newer sandlot serve has it).')
      replace(status, 'not available')
      document.body.classList.add('no-pty')
      return
    }
    if (err.status === 401 || err.status === 409 || (err.status === 404 && /sandbox/.test(err.message))) {
      showNotice(err.message)
      return
    }
  }
  term.open(document.getElementById('terminal'))
  fit.fit()
  connect(pid)
}

start()
