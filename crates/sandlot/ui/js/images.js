// The images the tenant may boot: its own, the public ones, and `host`.
import * as api from './api.js'
import { h, replace } from './dom.js'
import * as fmt from './format.js'

export function render(main) {
  let stopped = false
  const status = h('p', { class: 'muted small', role: 'status' }, 'Loading…')
  const body = h('tbody', { id: 'image-rows' })
  replace(main, h('div', { class: 'page-head' }, h('h1', {}, 'Images')),
    h('p', { class: 'muted' }, 'Pull with ', h('code', {}, 'sandlot image pull REF'), ', import with ', h('code', {}, 'sandlot image import FILE'), ', build with ', h('code', {}, 'sandlot image build'), '.'),
    status,
    h('div', { class: 'table-wrap' }, h('table', { class: 'list' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th', {}, 'Owner'), h('th', {}, 'Size'), h('th', {}, 'Layers'), h('th', {}, 'Platform'), h('th', {}, 'Created'), h('th', {}, 'Digest'))),
      body)))
  ;(async () => {
    try {
      const { images } = await api.get('/v1/images')
      if (stopped) return
      replace(status, `${images.length} images`)
      replace(body, images.map((i) => h('tr', { 'data-name': i.name },
        h('td', {}, h('strong', { class: 'mono' }, i.name), i.reference && i.reference !== i.name ? h('div', { class: 'muted small mono clip', title: i.reference }, i.reference) : null,
          i.config && i.config.cmd ? h('div', { class: 'muted small mono clip' }, 'cmd: ', i.config.cmd.join(' ')) : null),
        h('td', {}, h('span', { class: `badge owner-${i.owner}` }, i.owner)),
        h('td', { class: 'nowrap' }, i.owner === 'builtin' ? '—' : fmt.bytes(i.size_bytes)),
        h('td', {}, String((i.layers || []).length)),
        h('td', {}, i.platform || '—'),
        h('td', { class: 'nowrap', title: fmt.time(i.created_at_ms) }, i.created_at_ms ? fmt.relative(i.created_at_ms) : '—'),
        h('td', { class: 'mono small clip', title: i.digest || '' }, i.digest ? i.digest.slice(0, 19) + '…' : '—'))))
    } catch (err) {
      if (!stopped) replace(status, h('span', { class: 'error' }, 'Could not list images: ' + err.message))
    }
  })()
  return () => {
    stopped = true
  }
}
