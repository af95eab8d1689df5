// Small formatting helpers (all return plain strings).

export function bytes(n) {
  if (n === null || n === undefined) return '—'
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB']
  let i = 0
  let v = Number(n)
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024
    i++
  }
  return (i === 0 ? String(v) : v.toFixed(v < 10 ? 1 : 0)) + ' ' + units[i]
}

export function time(ms) {
  if (!ms) return '—'
  const d = new Date(ms)
  const pad = (x) => String(x).padStart(2, '0')
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`
}

// "3 min ago" / "in 4 min".
export function relative(ms, now = Date.now()) {
  if (!ms) return '—'
  const s = Math.round((ms - now) / 1000)
  const a = Math.abs(s)
  if (a < 3) return 'just now'
  const t = a < 60 ? `${a} s` : a < 3600 ? `${Math.round(a / 60)} min` : a < 86400 ? `${Math.round(a / 3600)} h` : `${Math.round(a / 86400)} d`
  return s >= 0 ? `in ${t}` : `${t} ago`
}

export function mode(m) {
  return '0' + (m & 0o7777).toString(8).padStart(3, '0')
}

export function cpu(c) {
  return `${Number(c).toFixed(c < 1 ? 2 : 1).replace(/\.0+$/, '')} CPU`
}
