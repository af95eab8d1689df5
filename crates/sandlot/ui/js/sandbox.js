// One sandbox: state, limits, image, network policy, metrics, a command box, processes, files,
// recent audit rows, and a link to its terminal. Polled while open.
import * as api from './api.js'
import { h, on, replace } from './dom.js'
import * as fmt from './format.js'
import { chart } from './chart.js'
import { stateBadge, metadataChips } from './list.js'
import { auditTable } from './audit.js'
import { filesBrowser } from './files.js'

const POLL_MS = 2000
const MAX_POINTS = 300

function kv(rows) {
  return h('dl', { class: 'kv' }, rows.filter(Boolean).map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]))
}

function list(items) {
  return items && items.length ? h('span', { class: 'chips' }, items.map((x) => h('span', { class: 'chip' }, x))) : h('span', { class: 'muted' }, 'none')
}

function section(title, id, ...body) {
  return h('section', { class: 'card', id }, h('h2', {}, title), ...body)
}

// A sample's value from the first of several field paths that holds a number (the metrics route's
// field names, and the older one-sample shape).
function pick(s, ...paths) {
  for (const p of paths) {
    const v = p.split('.').reduce((o, k) => (o && typeof o === 'object' ? o[k] : undefined), s)
    if (typeof v === 'number') return v
  }
  return undefined
}

// The samples of a metrics answer ({limits, samples: [...]}, oldest first), each reduced to the
// figures charted; older one-sample shapes (a bare sample) are read too.
export function samplesOf(body) {
  const arr = Array.isArray(body) ? body : body && (body.samples || (body.at_ms ? [body] : []))
  return (arr || []).map((s) => ({
    t: pick(s, 'at_ms'),
    cpu: pick(s, 'cpu_used_pct'),
    mem: pick(s, 'memory_bytes', 'memory_used_bytes'),
    pids: pick(s, 'pids'),
    disk: pick(s, 'disk_used_bytes'),
    oom: pick(s, 'oom_kills_total'),
    throttled: pick(s, 'cpu_throttled_periods_total'),
    periods: pick(s, 'cpu_periods_total'),
    conns: pick(s, 'net_connections'),
    out: pick(s, 'net_bytes_out_total'),
    in: pick(s, 'net_bytes_in_total'),
  })).filter((s) => typeof s.t === 'number')
}

export function render(main, { id }) {
  const base = `/v1/sandboxes/${api.enc(id)}`
  let stopped = false
  const timers = []
  let info = null
  let samples = []
  let limits = null
  let metricsState = 'loading' // 'loading' | 'ok' | 'missing' | message

  const title = h('h1', { class: 'mono' }, id)
  const badge = h('span')
  const actions = h('div', { class: 'actions' })
  const errorBox = h('p', { class: 'error', role: 'alert' })
  const overview = h('div')
  const network = h('div')
  const metrics = h('div')
  const procBody = h('tbody', { id: 'process-rows' })
  const auditBox = h('div')
  const cmdInput = h('input', { type: 'text', id: 'command', placeholder: 'echo hello; ls -la', autocomplete: 'off', spellcheck: 'false', 'aria-label': 'Command' })
  const cmdUser = h('select', { id: 'command-user', 'aria-label': 'User' }, h('option', { value: '' }, 'default user'), h('option', { value: 'root' }, 'root'))
  const cmdButton = h('button', { type: 'submit', class: 'primary' }, 'Run')
  const cmdStatus = h('div', { class: 'muted small', id: 'command-status' })
  const cmdOut = h('pre', { class: 'output', id: 'command-output', hidden: true })
  const cmdErr = h('pre', { class: 'output stderr', id: 'command-stderr', hidden: true })
  const files = filesBrowser(base)
  const logsPanel = h('div', { class: 'logs', id: 'process-logs' })
  let logsAbort = null

  const cmdForm = on(h('form', { class: 'command-form' }, cmdInput, cmdUser, cmdButton), 'submit', async (e) => {
    e.preventDefault()
    const shell = cmdInput.value
    if (!shell.trim()) return
    cmdButton.disabled = true
    replace(cmdStatus, 'running…')
    try {
      const r = await api.post(`${base}/exec`, { shell, user: cmdUser.value || undefined, timeout_s: 60 })
      replace(cmdStatus, `${r.status} · exit ${r.exit_code} · ${r.duration_ms} ms${r.truncated ? ' · output truncated' : ''}`)
      replace(cmdOut, r.stdout)
      cmdOut.hidden = !r.stdout
      replace(cmdErr, r.stderr)
      cmdErr.hidden = !r.stderr
      refreshProcesses()
      refreshAudit()
    } catch (err) {
      replace(cmdStatus, h('span', { class: 'error' }, 'Could not run: ' + err.message))
    } finally {
      cmdButton.disabled = false
    }
  })

  replace(main,
    h('div', { class: 'page-head' },
      h('a', { href: '#/', class: 'back' }, '← Sandboxes'),
      h('div', { class: 'title-row' }, title, badge),
      actions),
    errorBox,
    h('div', { class: 'grid two' },
      section('Overview', 'overview', overview),
      section('Network', 'network', network)),
    section('Metrics', 'metrics', metrics),
    section('Run a command', 'run', cmdForm, cmdStatus, cmdOut, cmdErr),
    section('Processes', 'processes', h('div', { class: 'table-wrap' }, h('table', { class: 'list' },
      h('thead', {}, h('tr', {}, h('th', {}, 'pid'), h('th', {}, 'Command'), h('th', {}, 'State'), h('th', {}, 'Started'), h('th', {}, 'Tag'), h('th', {}, ''))),
      procBody)), logsPanel),
    section('Files', 'files', files.el),
    section('Recent audit', 'audit', auditBox, h('p', {}, h('a', { href: `#/audit?sandbox_id=${encodeURIComponent(id)}` }, 'All audit rows of this sandbox →'))))

  function action(label, path, opts = {}) {
    return on(h('button', { type: 'button', class: opts.danger ? 'danger' : 'ghost' }, label), 'click', async (e) => {
      if (opts.confirm && !window.confirm(opts.confirm)) return
      e.target.disabled = true
      try {
        await api.raw(path, { method: opts.method || 'POST' })
        await refreshInfo()
        refreshProcesses()
        refreshAudit()
      } catch (err) {
        replace(errorBox, `${label} failed: ${err.message}`)
      } finally {
        e.target.disabled = false
      }
    })
  }

  function drawInfo() {
    const s = info
    document.title = `${s.name || s.id} · sandlot`
    replace(badge, stateBadge(s.state))
    replace(title, s.name ? [s.name, ' ', h('span', { class: 'muted small' }, s.id)] : s.id)
    const running = s.state === 'running'
    replace(actions,
      running ? h('a', { href: `/ui/terminal.html#${encodeURIComponent(s.id)}`, class: 'button primary', id: 'open-terminal' }, 'Open terminal') : null,
      running ? action('Pause', `${base}/pause`) : null,
      s.state === 'paused' || s.state === 'stopped' ? action('Resume', `${base}/resume`) : null,
      running || s.state === 'paused' ? action('Stop', `${base}/stop`) : null,
      s.state !== 'deleted' ? action('Delete', base, { method: 'DELETE', danger: true, confirm: `Delete sandbox ${s.id}? Its processes are killed and its files removed.` }) : null)
    const now = Date.now()
    replace(overview, kv([
      ['State', [stateBadge(s.state), s.reason ? h('div', { class: 'muted small' }, s.reason) : null]],
      ['Image', h('span', { class: 'mono' }, s.image)],
      ['CPU', fmt.cpu(s.limits.cpu)],
      ['Memory', `${s.limits.memory_mb} MiB`],
      ['Processes (pids)', String(s.limits.pids)],
      ['Lifetime', `${s.limits.timeout_s} s${s.persistent ? ' · persistent' : ''}${s.auto_resume ? ' · auto-resume' : ''}${s.idle_timeout_s ? ` · idle ${s.idle_timeout_s} s` : ''}`],
      ['Created', h('span', { title: fmt.time(s.created_at_ms) }, fmt.relative(s.created_at_ms, now))],
      ['Expires', h('span', { title: fmt.time(s.expires_at_ms) }, `${fmt.relative(s.expires_at_ms, now)} (then ${s.on_timeout || 'delete'})`)],
      ['Last active', h('span', { title: fmt.time(s.last_active_at_ms) }, fmt.relative(s.last_active_at_ms, now))],
      s.snapshot ? ['From snapshot', h('span', { class: 'mono' }, s.snapshot)] : null,
      ['Metadata', metadataChips(s.metadata)],
    ]))
    const n = s.network || {}
    replace(network, kv([
      ['Mode', h('span', { class: `badge net-${n.mode}` }, n.mode || '—')],
      ['Allow', list(n.allow)],
      ['Deny', list(n.deny)],
      ['Brokered headers', Object.keys(n.rules || {}).length ? h('span', { class: 'chips' }, Object.entries(n.rules).map(([host, names]) => h('span', { class: 'chip' }, `${host}: ${names.join(', ')}`))) : h('span', { class: 'muted' }, 'none')],
      ['Traffic', `${fmt.bytes(n.bytes_out || 0)} out · ${fmt.bytes(n.bytes_in || 0)} in`],
    ]))
  }

  function drawMetrics() {
    if (metricsState === 'missing') {
      replace(metrics, h('p', { class: 'notice', id: 'metrics-missing' }, 'Metrics are not available on this server: it has no /v1/sandboxes/{id}/metrics route.'))
      return
    }
    if (metricsState !== 'ok' && !samples.length) {
      replace(metrics, h('p', { class: 'muted' }, metricsState === 'loading' ? 'Loading…' : metricsState))
      return
    }
    const pts = (k) => samples.filter((s) => typeof s[k] === 'number').map((s) => ({ t: s.t, v: s[k] }))
    const memLimit = (limits && limits.memory_bytes) || (info ? info.limits.memory_mb * 1048576 : 0)
    const pidLimit = (limits && limits.pids) || (info ? info.limits.pids : 0)
    const last = samples.length ? samples[samples.length - 1] : {}
    const facts = [
      typeof last.oom === 'number' ? `OOM kills ${last.oom}` : null,
      typeof last.periods === 'number' ? `throttled in ${last.throttled || 0} of ${last.periods} CPU periods` : null,
      typeof last.conns === 'number' ? `${last.conns} connection${last.conns === 1 ? '' : 's'} open` : null,
      typeof last.out === 'number' ? `network ${fmt.bytes(last.out)} out · ${fmt.bytes(last.in || 0)} in` : null,
    ].filter(Boolean)
    replace(metrics,
      h('div', { class: 'charts' },
        chart({ title: 'CPU (% of limit)', points: pts('cpu'), max: 100, format: (v) => `${v.toFixed(1)} %` }),
        chart({ title: 'Memory', points: pts('mem'), max: memLimit, format: fmt.bytes }),
        chart({ title: 'Processes', points: pts('pids'), max: pidLimit, format: (v) => String(v) }),
        pts('disk').length ? chart({ title: 'Disk', points: pts('disk'), max: limits && limits.disk_bytes, format: fmt.bytes }) : null),
      facts.length ? h('p', { class: 'muted small facts' }, facts.join(' · ')) : null)
  }

  async function refreshInfo() {
    try {
      const was = info && info.state
      info = await api.get(base)
      if (stopped) return
      replace(errorBox)
      drawInfo()
      // The files browser follows the state: shown while running, emptied otherwise.
      if (was && was !== info.state && (was === 'running' || info.state === 'running')) files.open(info.state === 'running' ? '' : null)
    } catch (err) {
      if (stopped) return
      replace(errorBox, err.status === 404 ? `Sandbox ${id} not found (it may have been deleted, or belong to another tenant).` : 'Could not load the sandbox: ' + err.message)
    }
  }

  async function refreshMetrics() {
    if (metricsState === 'missing' || !info || info.state !== 'running') {
      if (info && info.state !== 'running' && metricsState === 'loading') {
        metricsState = `No metrics while the sandbox is ${info.state}.`
        drawMetrics()
      }
      return
    }
    const last = samples.length ? samples[samples.length - 1].t : null
    try {
      const body = await api.get(`${base}/metrics${api.qs({ since: last })}`)
      if (stopped) return
      if (body && body.limits) limits = body.limits
      const fresh = samplesOf(body).filter((s) => last === null || s.t > last)
      samples = samples.concat(fresh).slice(-MAX_POINTS)
      metricsState = 'ok'
    } catch (err) {
      if (stopped) return
      metricsState = err.routeMissing ? 'missing' : 'Could not read metrics: ' + err.message
    }
    drawMetrics()
  }

  async function refreshProcesses() {
    if (!info || info.state !== 'running') {
      replace(procBody, h('tr', {}, h('td', { colspan: 6, class: 'empty' }, info ? `The sandbox is ${info.state}.` : 'Loading…')))
      return
    }
    try {
      const { processes } = await api.get(`${base}/processes`)
      if (stopped) return
      if (!processes.length) {
        replace(procBody, h('tr', {}, h('td', { colspan: 6, class: 'empty' }, 'No processes yet.')))
        return
      }
      const now = Date.now()
      replace(procBody, processes.slice().reverse().map((p) => h('tr', {},
        h('td', { class: 'mono' }, String(p.pid)),
        h('td', { class: 'mono clip wide', title: p.argv.join(' ') }, p.argv.join(' '), p.pty ? h('span', { class: 'chip' }, 'pty') : null),
        h('td', {}, p.running ? h('span', { class: 'badge state-running' }, 'running') : h('span', { class: 'badge state-stopped' }, `${p.status} ${p.exit_code}`)),
        h('td', { class: 'nowrap', title: fmt.time(p.started_at_ms) }, fmt.relative(p.started_at_ms, now)),
        h('td', { class: 'clip' }, p.tag || ''),
        h('td', { class: 'tools' }, on(h('button', { type: 'button', class: 'ghost small', 'data-pid': String(p.pid) }, 'Output'), 'click', () => showLogs(p))))))
    } catch (err) {
      if (!stopped) replace(procBody, h('tr', {}, h('td', { colspan: 6, class: 'error' }, 'Could not list processes: ' + err.message)))
    }
  }

  // Streams a process's output (replayed from its start, then live) into a panel, as text.
  async function showLogs(p) {
    if (logsAbort) logsAbort.abort()
    const abort = new AbortController()
    logsAbort = abort
    const out = h('pre', { class: 'output', id: 'logs-output' })
    const state = h('span', { class: 'muted small' }, 'streaming…')
    const close = on(h('button', { type: 'button', class: 'ghost small' }, 'Close'), 'click', () => {
      abort.abort()
      replace(logsPanel)
    })
    replace(logsPanel, h('div', { class: 'preview-head' }, h('strong', { class: 'mono' }, `pid ${p.pid}: ${p.argv.join(' ')}`), ' ', state, close), out)
    let shown = 0
    const LIMIT = 2 << 20
    const add = (text, cls) => {
      if (shown >= LIMIT) return
      const t = text.slice(0, LIMIT - shown)
      shown += t.length
      out.append(cls ? h('span', { class: cls }, t) : document.createTextNode(t))
      if (shown >= LIMIT) out.append(h('span', { class: 'muted' }, '\n[the page shows the first 2 MiB; download the output with the API]'))
      out.scrollTop = out.scrollHeight
    }
    try {
      const resp = await api.raw(`${base}/processes/${p.pid}/logs`, { signal: abort.signal })
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader()
      let buf = ''
      for (;;) {
        const { value, done } = await reader.read()
        if (done) break
        buf += value
        let nl
        while ((nl = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, nl)
          buf = buf.slice(nl + 1)
          if (!line.trim()) continue
          const ev = JSON.parse(line)
          if (ev.type === 'stdout') add(ev.data)
          else if (ev.type === 'stderr') add(ev.data, 'stderr')
          else if (ev.type === 'truncated') add(`\n[${ev.stream}: output cut here by its limit]\n`, 'muted')
          else if (ev.type === 'exited') replace(state, `${ev.status} · exit ${ev.exit_code} · ${ev.duration_ms} ms`)
          else if (ev.type === 'error') replace(state, h('span', { class: 'error' }, ev.message))
        }
      }
    } catch (err) {
      if (!abort.signal.aborted) replace(state, h('span', { class: 'error' }, 'Could not read the output: ' + err.message))
    }
  }

  async function refreshAudit() {
    try {
      const { entries } = await api.get(`/v1/audit${api.qs({ sandbox_id: id, limit: 15 })}`)
      if (!stopped) replace(auditBox, auditTable(entries, { sandboxColumn: false }))
    } catch (err) {
      if (!stopped) replace(auditBox, h('p', { class: 'error' }, 'Could not read the audit log: ' + err.message))
    }
  }

  // Runs fn now and then ms after each run ends, until the page is left.
  function every(ms, fn) {
    const slot = timers.length
    timers.push(null)
    const tick = async () => {
      await fn()
      if (!stopped) timers[slot] = setTimeout(tick, ms)
    }
    tick()
  }

  every(POLL_MS, async () => {
    await refreshInfo()
    await Promise.all([refreshMetrics(), refreshProcesses()])
  })
  every(10_000, refreshAudit)
  refreshInfo().then(() => files.open(info && info.state === 'running' ? '' : null))

  return () => {
    stopped = true
    if (logsAbort) logsAbort.abort()
    timers.forEach(clearTimeout)
  }
}
