// The /v1 API from the page: the key lives in this tab's sessionStorage (gone when the tab closes),
// goes out only as an Authorization header on same-origin requests, and never into a URL.

const KEY = 'sandlot.key'

export function key() {
  return sessionStorage.getItem(KEY)
}

export function setKey(k) {
  sessionStorage.setItem(KEY, k)
}

export function signOut() {
  sessionStorage.removeItem(KEY)
}

// An API error: HTTP status, the API's code and message.
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message)
    this.status = status
    this.code = code
  }
  // The route itself is absent (an older server, or a feature this server was built without).
  get routeMissing() {
    return this.status === 404 && /route not found/.test(this.message)
  }
}

async function errorOf(resp, notify) {
  let code = 'http_' + resp.status
  let message = `${resp.status} ${resp.statusText}`
  try {
    const body = await resp.json()
    if (body && body.error) {
      code = body.error.code || code
      message = body.error.message || message
    }
  } catch {}
  if (resp.status === 401 && notify) window.dispatchEvent(new CustomEvent('sandlot:unauthenticated', { detail: message }))
  return new ApiError(resp.status, code, message)
}

// fetch() of an API path with the key; throws ApiError on a non-2xx answer.
export async function raw(path, opts = {}) {
  const headers = new Headers(opts.headers || {})
  const k = opts.key ?? key()
  if (k) headers.set('Authorization', 'Bearer ' + k)
  let body = opts.body
  if (opts.json !== undefined) {
    headers.set('Content-Type', 'application/json')
    body = JSON.stringify(opts.json)
  }
  const resp = await fetch(path, { method: opts.method || 'GET', headers, body, signal: opts.signal, cache: 'no-store' })
  if (!resp.ok) throw await errorOf(resp, opts.key === undefined)
  return resp
}

// The JSON answer of an API path (null for 204).
export async function get(path, opts = {}) {
  const resp = await raw(path, opts)
  if (resp.status === 204) return null
  return resp.json()
}

export function post(path, json, opts = {}) {
  return get(path, { ...opts, method: 'POST', json })
}

// A query string from an object (values encoded; empty ones left out).
export function qs(params) {
  const p = new URLSearchParams()
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') p.set(k, String(v))
  const s = p.toString()
  return s ? '?' + s : ''
}

export const enc = encodeURIComponent
