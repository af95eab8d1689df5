// The audit log: newest first, by sandbox (server-side), then by action and free text (in the page).
import * as api from './api.js'
import { h, on, replace } from './dom.js'
import * as fmt from './format.js'

// A table of audit rows; `detail` is shown as its JSON text.
export function auditTable(entries, { sandboxColumn = true } = {}) {
  if (!entries.length) return h('p', { class: 'muted empty' }, 'No audit rows.')
  return h('div', { class: 'table-wrap' }, h('table', { class: 'list audit' },
    h('thead', {}, h('tr', {}, h('th', {}, 'Time'), h('th', {}, 'Tenant'), sandboxColumn ? h('th', {}, 'Sandbox') : null, h('th', {}, 'Action'), h('th', {}, 'Detail'))),
    h('tbody', {}, entries.map((e) => h('tr', { 'data-seq': String(e.seq) },
      h('td', { class: 'nowrap', title: `#${e.seq}` }, fmt.time(e.at_ms)),
      h('td', {}, e.tenant),
      sandboxColumn ? h('td', { class: 'mono nowrap' }, e.sandbox_id ? h('a', { href: `#/sandboxes/${encodeURIComponent(e.sandbox_id)}` }, e.sandbox_id) : '—') : null,
      h('td', {}, h('span', { class: `action ${String(e.action).split('.')[0]}` }, e.action)),
      h('td', { class: 'detail' }, h('code', {}, JSON.stringify(e.detail))))))))
}

export function render(main, { query }) {
  let stopped = false
  const sandbox = h('input', { type: 'text', id: 'audit-sandbox', class: 'mono', placeholder: 'sb_…', value: query.get('sandbox_id') || '', spellcheck: 'false' })
  const action = h('input', { type: 'text', id: 'audit-action', placeholder: 'exec, file., sandbox.create', value: query.get('action') || '', spellcheck: 'false' })
  const text = h('input', { type: 'search', id: 'audit-text', placeholder: 'any text in the row', value: query.get('q') || '' })
  const limit = h('select', { id: 'audit-limit' }, ['100', '500', '2000'].map((n) => h('option', { value: n, selected: n === (query.get('limit') || '100') }, n)))
  const status = h('p', { class: 'muted small', role: 'status' })
  const results = h('div', { id: 'audit-results' })
  const form = h('form', { class: 'filters-form card' },
    h('label', {}, 'Sandbox', sandbox),
    h('label', {}, 'Action', action),
    h('label', {}, 'Text', text),
    h('label', {}, 'Rows', limit),
    h('button', { type: 'submit', class: 'primary' }, 'Search'))
  on(form, 'submit', (e) => {
    e.preventDefault()
    const q = api.qs({ sandbox_id: sandbox.value.trim(), action: action.value.trim(), q: text.value.trim(), limit: limit.value === '100' ? '' : limit.value })
    history.replaceState(null, '', '#/audit' + q)
    load()
  })

  replace(main, h('div', { class: 'page-head' }, h('h1', {}, 'Audit log')),
    h('p', { class: 'muted' }, 'Every change, command, file operation and network decision, newest first. The admin key sees every tenant.'),
    form, status, results)

  async function load() {
    replace(status, 'Loading…')
    try {
      const { entries } = await api.get(`/v1/audit${api.qs({ sandbox_id: sandbox.value.trim(), limit: limit.value })}`)
      if (stopped) return
      const a = action.value.trim().toLowerCase()
      const t = text.value.trim().toLowerCase()
      const shown = entries.filter((e) => (!a || String(e.action).toLowerCase().includes(a)) &&
        (!t || JSON.stringify(e).toLowerCase().includes(t)))
      replace(status, `${shown.length} of the ${entries.length} newest rows${sandbox.value.trim() ? ' of ' + sandbox.value.trim() : ''}`)
      replace(results, auditTable(shown))
    } catch (err) {
      if (!stopped) replace(status, h('span', { class: 'error' }, 'Could not read the audit log: ' + err.message))
    }
  }
  load()
  return () => {
    stopped = true
  }
}
