// A small SVG line chart of one series: [{t: ms, v: number}], drawn with presentation attributes
// only (no inline style), so the page's CSP holds.
import { h, svg } from './dom.js'

const W = 320
const H = 96
const PAD = { l: 4, r: 4, t: 8, b: 4 }

// chart({title, points, max, format}) → element. `max` fixes the top of the scale (a limit);
// otherwise the scale fits the data. One point is shown as its value with a dot.
export function chart({ title, points, max, format }) {
  const last = points.length ? points[points.length - 1].v : null
  const head = h('div', { class: 'chart-head' },
    h('span', { class: 'chart-title' }, title),
    h('span', { class: 'chart-value' }, last === null || last === undefined ? '—' : format(last)))
  const box = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart-svg', role: 'img', 'aria-label': title })
  for (const f of [0.25, 0.5, 0.75]) {
    const y = PAD.t + (H - PAD.t - PAD.b) * f
    box.append(svg('line', { x1: PAD.l, x2: W - PAD.r, y1: y, y2: y, class: 'grid' }))
  }
  const vals = points.filter((p) => typeof p.v === 'number' && isFinite(p.v))
  if (vals.length) {
    const top = Math.max(max || 0, ...vals.map((p) => p.v)) || 1
    const t0 = vals[0].t
    const t1 = vals[vals.length - 1].t
    const x = (t) => (t1 === t0 ? W - PAD.r : PAD.l + ((t - t0) / (t1 - t0)) * (W - PAD.l - PAD.r))
    const y = (v) => H - PAD.b - (v / top) * (H - PAD.t - PAD.b)
    if (vals.length > 1) {
      const line = vals.map((p, i) => `${i ? 'L' : 'M'}${x(p.t).toFixed(1)},${y(p.v).toFixed(1)}`).join('')
      box.append(svg('path', { d: `${line}L${x(t1).toFixed(1)},${H - PAD.b}L${x(t0).toFixed(1)},${H - PAD.b}Z`, class: 'area' }))
      box.append(svg('path', { d: line, class: 'line' }))
    }
    const p = vals[vals.length - 1]
    box.append(svg('circle', { cx: x(p.t), cy: y(p.v), r: 3, class: 'dot' }))
  }
  const foot = h('div', { class: 'chart-foot muted small' },
    vals.length > 1 ? `${vals.length} samples over ${Math.round((vals[vals.length - 1].t - vals[0].t) / 1000)} s` : vals.length ? 'one sample (no history yet)' : 'no samples',
    max ? ` · limit ${format(max)}` : '')
  return h('figure', { class: 'chart' }, head, box, foot)
}
