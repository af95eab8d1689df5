// A files browser for one sandbox: list a directory, go into subdirectories, preview text, and
// download a file through fetch() with the key (a blob: link, never a URL holding the key).
import * as api from './api.js'
import { h, on, replace } from './dom.js'
import * as fmt from './format.js'

const PREVIEW_MAX = 256 * 1024

// '/home/user/./a/../b' → '/home/user/b' (the server answers paths as given).
function normalize(p) {
  const out = []
  for (const part of p.split('/')) {
    if (part === '' || part === '.') continue
    if (part === '..') out.pop()
    else out.push(part)
  }
  return '/' + out.join('/')
}

function parent(p) {
  if (p === '/') return null
  const i = p.replace(/\/+$/, '').lastIndexOf('/')
  return i <= 0 ? '/' : p.slice(0, i)
}

function join(dir, name) {
  return dir === '/' ? '/' + name : dir + '/' + name
}

// A sandbox-chosen file name made safe to save under: control characters and the bidirectional
// overrides and isolates (which can make `invoice\u202Efdp.exe` read as `invoice.pdf` while it
// saves as .exe) become `_`; an empty or dot-only name becomes `download`.
export function safeName(name) {
  const clean = String(name).replace(/[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g, '_')
  return /^[.\s]*$/.test(clean) ? 'download' : clean
}

// Reads at most `max` bytes of a response body, cancelling the rest: a file that grew after it was
// listed cannot make the page hold more than that.
async function readAtMost(resp, max) {
  const reader = resp.body.getReader()
  const parts = []
  let have = 0
  let cut = false
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    parts.push(value)
    have += value.length
    if (have > max) {
      cut = true
      await reader.cancel()
      break
    }
  }
  const buf = new Uint8Array(Math.min(have, max))
  let at = 0
  for (const p of parts) {
    const take = p.subarray(0, buf.length - at)
    buf.set(take, at)
    at += take.length
    if (at === buf.length) break
  }
  return { buf, cut }
}

// Saves bytes under a name through a blob: URL.
function save(blob, name) {
  const url = URL.createObjectURL(blob)
  const a = h('a', { href: url, download: safeName(name), hidden: true })
  document.body.append(a)
  a.click()
  a.remove()
  setTimeout(() => URL.revokeObjectURL(url), 60_000)
}

export function filesBrowser(base) {
  let cwd = null
  const crumbs = h('nav', { class: 'crumbs', 'aria-label': 'Path' })
  const pathInput = h('input', { type: 'text', class: 'mono', 'aria-label': 'Go to path', placeholder: '/path/to/dir', spellcheck: 'false' })
  const go = on(h('form', { class: 'goto' }, pathInput, h('button', { type: 'submit', class: 'ghost' }, 'Go')), 'submit', (e) => {
    e.preventDefault()
    if (pathInput.value.trim()) open(pathInput.value.trim())
  })
  const asRoot = h('input', { type: 'checkbox', id: 'files-root' })
  on(asRoot, 'change', () => open(cwd || ''))
  const body = h('tbody', { id: 'file-rows' })
  const status = h('p', { class: 'muted small', role: 'status' })
  const preview = h('div', { class: 'preview' })
  const el = h('div', { class: 'files' },
    h('div', { class: 'toolbar' }, crumbs, go, h('label', { class: 'check' }, asRoot, ' as root')),
    status,
    h('div', { class: 'table-wrap' }, h('table', { class: 'list' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th', {}, 'Size'), h('th', {}, 'Mode'), h('th', {}, 'Modified'), h('th', {}, ''))),
      body)),
    preview)

  const user = () => (asRoot.checked ? 'root' : undefined)

  function drawCrumbs() {
    const parts = cwd.split('/').filter(Boolean)
    const links = [on(h('a', { href: '#', class: 'crumb' }, '/'), 'click', (e) => (e.preventDefault(), open('/')))]
    let acc = ''
    for (const p of parts) {
      acc += '/' + p
      const target = acc
      links.push(on(h('a', { href: '#', class: 'crumb' }, p), 'click', (e) => (e.preventDefault(), open(target))), h('span', { class: 'sep' }, '/'))
    }
    replace(crumbs, links)
  }

  async function download(entry, button) {
    button.disabled = true
    replace(status, `Downloading ${entry.path}…`)
    try {
      const resp = await api.raw(`${base}/files${api.qs({ path: entry.path, user: user() })}`)
      const blob = await resp.blob()
      save(blob, entry.name)
      replace(status, `Downloaded ${entry.name} (${fmt.bytes(blob.size)}).`)
    } catch (err) {
      replace(status, h('span', { class: 'error' }, `Could not download ${entry.path}: ${err.message}`))
    } finally {
      button.disabled = false
    }
  }

  async function view(entry) {
    if (entry.size > PREVIEW_MAX) {
      replace(preview, h('p', { class: 'muted' }, `${entry.name} is ${fmt.bytes(entry.size)}: download it instead (previews stop at ${fmt.bytes(PREVIEW_MAX)}).`))
      return
    }
    try {
      const resp = await api.raw(`${base}/files${api.qs({ path: entry.path, user: user() })}`)
      const { buf, cut } = await readAtMost(resp, PREVIEW_MAX)
      const text = new TextDecoder('utf-8', { fatal: false }).decode(buf) +
        (cut ? `\n… (the file grew past ${fmt.bytes(PREVIEW_MAX)} since it was listed: download it to see the rest)` : '')
      const binary = buf.includes(0)
      replace(preview, h('div', { class: 'preview-head' }, h('strong', { class: 'mono' }, entry.path), ' ',
        on(h('button', { type: 'button', class: 'ghost small' }, 'Close'), 'click', () => replace(preview))),
      binary ? h('p', { class: 'muted' }, 'Binary file: download it to look inside.') : h('pre', { class: 'output', id: 'file-preview' }, text))
    } catch (err) {
      replace(preview, h('p', { class: 'error' }, `Could not read ${entry.path}: ${err.message}`))
    }
  }

  function row(e) {
    const isDir = e.kind === 'dir'
    const name = isDir
      ? on(h('a', { href: '#', class: 'entry dir' }, e.name + '/'), 'click', (ev) => (ev.preventDefault(), open(e.path)))
      : h('span', { class: `entry ${e.kind}` }, e.name)
    const tools = []
    if (e.kind === 'file') {
      const dl = h('button', { type: 'button', class: 'ghost small download', 'data-path': e.path }, 'Download')
      on(dl, 'click', () => download(e, dl))
      tools.push(on(h('button', { type: 'button', class: 'ghost small' }, 'View'), 'click', () => view(e)), dl)
    }
    return h('tr', { 'data-name': e.name },
      h('td', { class: 'mono' }, name, e.link_target ? h('span', { class: 'muted' }, ' → ', e.link_target) : null),
      h('td', { class: 'nowrap' }, isDir ? '' : fmt.bytes(e.size)),
      h('td', { class: 'mono' }, fmt.mode(e.mode)),
      h('td', { class: 'nowrap', title: fmt.time(e.mtime_ms) }, fmt.relative(e.mtime_ms)),
      h('td', { class: 'tools' }, tools))
  }

  // Opens a directory ('' = the user's home; null = nothing to show).
  async function open(path) {
    if (path === null) {
      cwd = null
      replace(body)
      replace(crumbs)
      replace(preview)
      replace(status, 'Files can be browsed while the sandbox runs.')
      return
    }
    replace(status, 'Loading…')
    try {
      const dir = normalize(path === '' ? (await api.get(`${base}/files/stat${api.qs({ path: '.', user: user() })}`)).path : path)
      const { entries } = await api.get(`${base}/files/list${api.qs({ path: dir, user: user() })}`)
      cwd = dir
      pathInput.value = dir
      drawCrumbs()
      const up = parent(dir)
      entries.sort((a, b) => (b.kind === 'dir') - (a.kind === 'dir') || a.name.localeCompare(b.name))
      replace(body,
        up ? h('tr', {}, h('td', { colspan: 5 }, on(h('a', { href: '#', class: 'entry dir' }, '..'), 'click', (ev) => (ev.preventDefault(), open(up))))) : null,
        entries.length ? entries.map(row) : h('tr', {}, h('td', { colspan: 5, class: 'empty' }, 'Empty directory.')))
      replace(status, `${entries.length} entries in ${dir}`)
    } catch (err) {
      replace(status, h('span', { class: 'error' }, `Could not list ${path || 'the home directory'}: ${err.message}`))
    }
  }

  return { el, open, join }
}
