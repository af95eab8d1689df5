// The sandboxes of the signed-in tenant: filter by state, search, live (polled every 2 s).
import * as api from './api.js'
import { h, on, replace } from './dom.js'
import * as fmt from './format.js'

const STATES = ['all', 'running', 'paused', 'stopped', 'creating', 'failed']
const POLL_MS = 2000

export function stateBadge(state) {
  return h('span', { class: `badge state-${state}` }, state)
}

export function metadataChips(md) {
  const entries = Object.entries(md || {})
  if (!entries.length) return h('span', { class: 'muted' }, '—')
  return h('span', { class: 'chips' }, entries.map(([k, v]) => h('span', { class: 'chip', title: `${k}=${v}` }, `${k}=${v}`)))
}

export function render(main, { query }) {
  let state = STATES.includes(query.get('state')) ? query.get('state') : 'all'
  let search = ''
  let sandboxes = null
  let timer = null
  let stopped = false
  let polls = 0

  const filters = h('div', { class: 'filters', role: 'tablist' })
  const searchBox = h('input', { type: 'search', placeholder: 'Filter by id, name, image or metadata', class: 'search', 'aria-label': 'Filter' })
  const status = h('span', { class: 'muted live', 'aria-live': 'polite' })
  const body = h('tbody', { id: 'sandbox-rows' })
  const usage = h('div', { class: 'usage muted' })
  const errorBox = h('p', { class: 'error', role: 'alert' })
  // Lifecycle events (GET /v1/events), on servers that have the route.
  const eventRows = h('ul', { class: 'events', id: 'event-rows' })
  const eventsCard = h('section', { class: 'card', id: 'events', hidden: true }, h('h2', {}, 'Recent lifecycle events'), eventRows)
  let cursor = 0
  let eventsMissing = false
  let recent = []
  const table = h('table', { class: 'list' },
    h('thead', {}, h('tr', {}, h('th', {}, 'Sandbox'), h('th', {}, 'State'), h('th', {}, 'Image'), h('th', {}, 'Limits'), h('th', {}, 'Created'), h('th', {}, 'Expires'), h('th', {}, 'Metadata'))),
    body)
  on(searchBox, 'input', () => {
    search = searchBox.value.trim().toLowerCase()
    draw()
  })

  replace(main,
    h('div', { class: 'page-head' }, h('h1', {}, 'Sandboxes'), status),
    usage,
    h('div', { class: 'toolbar' }, filters, searchBox),
    errorBox,
    h('div', { class: 'table-wrap' }, table),
    eventsCard)

  function matches(s) {
    if (state !== 'all' && s.state !== state) return false
    if (!search) return true
    const hay = [s.id, s.name || '', s.image, ...Object.entries(s.metadata || {}).map(([k, v]) => `${k}=${v}`)].join('\n').toLowerCase()
    return hay.includes(search)
  }

  function draw() {
    const counts = Object.fromEntries(STATES.map((s) => [s, 0]))
    for (const s of sandboxes || []) {
      counts.all++
      if (s.state in counts) counts[s.state]++
    }
    replace(filters, STATES.map((s) => {
      const b = h('button', { type: 'button', class: 'filter' + (s === state ? ' active' : ''), 'data-state': s, role: 'tab', 'aria-selected': String(s === state) },
        s, ' ', h('span', { class: 'count' }, String(counts[s])))
      return on(b, 'click', () => {
        state = s
        history.replaceState(null, '', s === 'all' ? '#/' : `#/?state=${s}`)
        draw()
      })
    }))
    if (sandboxes === null) {
      replace(body, h('tr', {}, h('td', { colspan: 7, class: 'empty' }, 'Loading…')))
      return
    }
    const rows = sandboxes.filter(matches)
    if (!rows.length) {
      const why = sandboxes.length ? 'No sandbox matches the filter.' : 'No sandboxes yet. Create one with `sandlot run` or POST /v1/sandboxes.'
      replace(body, h('tr', {}, h('td', { colspan: 7, class: 'empty' }, why)))
      return
    }
    const now = Date.now()
    replace(body, rows.map((s) => h('tr', { 'data-id': s.id },
      h('td', {}, h('a', { href: `#/sandboxes/${encodeURIComponent(s.id)}`, class: 'mono' }, s.id), s.name ? h('div', { class: 'muted small' }, s.name) : null),
      h('td', {}, stateBadge(s.state), s.reason ? h('div', { class: 'muted small clip', title: s.reason }, s.reason) : null),
      h('td', { class: 'clip', title: s.image }, s.image),
      h('td', { class: 'nowrap' }, `${fmt.cpu(s.limits.cpu)} · ${s.limits.memory_mb} MiB`),
      h('td', { class: 'nowrap', title: fmt.time(s.created_at_ms) }, fmt.relative(s.created_at_ms, now)),
      h('td', { class: 'nowrap', title: fmt.time(s.expires_at_ms) }, s.persistent ? 'persistent' : fmt.relative(s.expires_at_ms, now)),
      h('td', {}, metadataChips(s.metadata)))))
  }

  async function pollEvents() {
    if (eventsMissing) return
    try {
      const body = await api.get(`/v1/events${api.qs({ since: cursor, limit: 1000 })}`)
      if (stopped) return
      cursor = body.next
      if (!body.events.length && !eventsCard.hidden) return
      recent = recent.concat(body.events).slice(-10)
      eventsCard.hidden = false
      replace(eventRows, recent.length ? recent.slice().reverse().map((e) => h('li', {},
        h('span', { class: 'muted nowrap' }, fmt.time(e.at_ms).slice(11)), ' ',
        h('span', { class: `badge event-${e.kind}` }, e.kind), ' ',
        h('a', { href: `#/sandboxes/${encodeURIComponent(e.sandbox_id)}`, class: 'mono' }, e.sandbox_id), ' ',
        e.detail && Object.keys(e.detail).length ? h('code', { class: 'muted small' }, JSON.stringify(e.detail)) : null))
        : h('li', { class: 'muted' }, 'No events yet.'))
    } catch (e) {
      if (e.routeMissing) eventsMissing = true
    }
  }

  async function poll() {
    await pollEvents()
    try {
      const list = await api.get('/v1/sandboxes')
      if (stopped) return
      sandboxes = list.sandboxes
      replace(errorBox)
      replace(status, `live · updated ${fmt.time(Date.now()).slice(11)}`)
      draw()
      drawUsage()
    } catch (e) {
      if (stopped) return
      replace(errorBox, 'Could not list sandboxes: ' + e.message)
    }
    if (!stopped) timer = setTimeout(poll, POLL_MS)
    if (++polls % 5 === 1) showUsage()
  }

  let usageText = ''
  function drawUsage() {
    const n = sandboxes ? sandboxes.length : null
    replace(usage, [n === null ? null : `${n} sandbox${n === 1 ? '' : 'es'}`, usageText || null].filter(Boolean).join(' · '))
  }

  async function showUsage() {
    try {
      const u = await api.get('/v1/usage')
      usageText = `${u.snapshots} snapshots (${fmt.bytes(u.snapshot_bytes)}) · ${u.images} images (${fmt.bytes(u.image_bytes)})`
      drawUsage()
    } catch {}
  }

  draw()
  poll()
  return () => {
    stopped = true
    clearTimeout(timer)
  }
}
