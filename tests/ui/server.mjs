// A real `sandlot serve` on loopback for the dashboard tests, started by tests/support/sandlot-server.mjs,
// the Node suites' one launcher (SANDLOT_BIN names the binary; KEEP_LOG=FILE keeps its log).

import { SandlotServer } from '../support/sandlot-server.mjs'

export async function startServer() {
  const server = await SandlotServer.start({ name: 'ui', keepLogs: 'UI_KEEP_LOGS' })
  server.admin = server.adminKey
  return server
}

export async function stopServer(server) {
  await server?.stop()
}

// The API with a key: JSON in and out; throws on a non-2xx answer.
export function apiClient(url, key) {
  return async function api(method, p, body, headers = {}) {
    const h = { Authorization: `Bearer ${key}`, ...headers }
    let payload = body
    if (body !== undefined && !(body instanceof Uint8Array) && typeof body !== 'string') {
      h['Content-Type'] = 'application/json'
      payload = JSON.stringify(body)
    }
    const resp = await fetch(url + p, { method, headers: h, body: payload })
    const text = await resp.text()
    if (!resp.ok) throw new Error(`${method} ${p}: ${resp.status} ${text}`)
    return text ? JSON.parse(text) : null
  }
}
