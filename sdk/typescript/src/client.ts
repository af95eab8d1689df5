/**
 * The connection to a sandlot server: {@link Client}. It reads `SANDLOT_URL` (default
 * `http://127.0.0.1:7423`) and `SANDLOT_API_KEY` unless given `url` and `apiKey`, sends
 * `Authorization: Bearer <key>` on every call over the platform's `fetch`, and throws the
 * {@link SandlotError} class of any error the server answers.
 *
 * @module
 */

import {
  ConfigError,
  ConnectError,
  ProtocolError,
  SandlotError,
  TimeoutError,
  errorFromResponse,
} from './errors.js';
import { Images } from './images.js';
import {
  type AuditEntry,
  type Health,
  type Json,
  type KeyCreated,
  type SandboxInfo,
  type SnapshotInfo,
  auditEntryFromJson,
  keyCreatedFromJson,
  sandboxInfoFromJson,
  snapshotInfoFromJson,
} from './models.js';

/** Where the CLI and the SDKs find the server unless told otherwise. */
export const DEFAULT_URL = 'http://127.0.0.1:7423';
/** Environment variable naming the server URL. */
export const ENV_URL = 'SANDLOT_URL';
/** Environment variable holding the API key. */
export const ENV_API_KEY = 'SANDLOT_API_KEY';
/** Milliseconds a plain call may take before {@link TimeoutError}. */
export const DEFAULT_TIMEOUT_MS = 60_000;

/** How to reach the server. Unset fields come from the environment. */
export interface ClientOptions {
  /** Server URL; default `SANDLOT_URL`, else `http://127.0.0.1:7423`. */
  url?: string | undefined;
  /** API key (`sl_…`); default `SANDLOT_API_KEY`. */
  apiKey?: string | undefined;
  /**
   * Milliseconds a plain call may take (default 60 000). Calls that last as long as the sandbox's
   * work (a command, a wait, a stream, a transfer, a build) have no such limit.
   */
  timeoutMs?: number | undefined;
}

/** Query parameters: `undefined` is left out, booleans are `true`/`false`, arrays repeat the key. */
export type Query = Record<string, string | number | boolean | undefined | Array<string | number>>;

/**
 * A request body: text (UTF-8), bytes, a `Blob` (e.g. `fs.openAsBlob(path)`: streamed from disk with
 * its length), a web `ReadableStream`, or an (async) iterable of byte chunks (streamed).
 */
export type BodyData =
  | string
  | Uint8Array
  | ArrayBuffer
  | Blob
  | ReadableStream<Uint8Array>
  | AsyncIterable<Uint8Array>
  | Iterable<Uint8Array>;

/** Options of {@link Client.request}. */
export interface RequestOptions {
  /** A JSON body (sent with `Content-Type: application/json`). */
  json?: unknown;
  /** Query parameters. */
  query?: Query | undefined;
  /** A raw body. */
  body?: BodyData | undefined;
  /** More headers. */
  headers?: Record<string, string> | undefined;
  /** Lift the client's timeout: the call lasts as long as the sandbox's work. */
  wait?: boolean | undefined;
}

/**
 * The server URL and API key: the arguments, else `SANDLOT_URL` / `SANDLOT_API_KEY`.
 *
 * @throws {ConfigError} without a key, or with a URL that is not `http(s)://`.
 */
export function resolveConfig(url?: string, apiKey?: string): { url: string; apiKey: string } {
  const env = typeof process !== 'undefined' ? process.env : {};
  const u = (url || env[ENV_URL] || DEFAULT_URL).replace(/\/+$/, '');
  if (!/^https?:\/\//.test(u)) {
    throw new ConfigError(`server URL ${JSON.stringify(u)} must start with http:// or https:// (e.g. ${DEFAULT_URL})`);
  }
  const key = apiKey || env[ENV_API_KEY];
  if (!key) {
    throw new ConfigError(
      `no API key: pass apiKey or set ${ENV_API_KEY} ` +
        '(the admin key is <state-dir>/admin.key; `sandlot keys create --tenant NAME` makes others)',
    );
  }
  return { url: u, apiKey: key };
}

const CONNECT_CODES = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EADDRNOTAVAIL',
  'UND_ERR_CONNECT_TIMEOUT',
]);

function errorCode(e: unknown): string | undefined {
  const seen = new Set<unknown>();
  let cur: unknown = e;
  while (cur && typeof cur === 'object' && !seen.has(cur)) {
    seen.add(cur);
    const c = (cur as { code?: unknown }).code;
    if (typeof c === 'string') return c;
    const errors = (cur as { errors?: unknown }).errors;
    if (Array.isArray(errors) && errors.length > 0) {
      const inner = errorCode(errors[0]);
      if (inner) return inner;
    }
    cur = (cur as { cause?: unknown }).cause;
  }
  return undefined;
}

/**
 * The SDK's error for a failure of `fetch` or of reading a body: {@link ConnectError} when nothing
 * answered, {@link TimeoutError} when a time limit passed, {@link ProtocolError} when the connection
 * broke. A {@link SandlotError} is answered as it is.
 *
 * @internal
 */
export function transportError(e: unknown, url: string): SandlotError {
  if (e instanceof SandlotError) return e;
  const name = (e as { name?: unknown } | null)?.name;
  const code = errorCode(e);
  const text = e instanceof Error ? e.message + (code ? ` (${code})` : '') : String(e);
  if (name === 'TimeoutError' || name === 'AbortError' || code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') {
    return new TimeoutError(`request to sandlot at ${url} timed out: ${text}`, { cause: e });
  }
  if (code && CONNECT_CODES.has(code)) {
    return new ConnectError(
      `cannot reach sandlot at ${url}: ${text}; start a server with \`sudo sandlot serve\` or set ${ENV_URL}`,
      { cause: e },
    );
  }
  return new ProtocolError(`the connection to sandlot at ${url} broke: ${text}`, { cause: e });
}

function isAsyncIterable(v: unknown): v is AsyncIterable<Uint8Array> {
  return v != null && typeof (v as AsyncIterable<Uint8Array>)[Symbol.asyncIterator] === 'function';
}

function isIterable(v: unknown): v is Iterable<Uint8Array> {
  return v != null && typeof (v as Iterable<Uint8Array>)[Symbol.iterator] === 'function';
}

/** The chunks of a web stream, read one at a time as the transport asks for them. */
async function* streamChunks(stream: ReadableStream<Uint8Array>): AsyncGenerator<Uint8Array> {
  const reader = stream.getReader();
  let done = false;
  try {
    for (;;) {
      const next = await reader.read();
      if (next.done) {
        done = true;
        return;
      }
      yield next.value;
    }
  } finally {
    if (!done) await reader.cancel().catch(() => undefined);
    reader.releaseLock();
  }
}

async function* syncChunks(chunks: Iterable<Uint8Array>): AsyncGenerator<Uint8Array> {
  yield* chunks;
}

type FetchBody = NonNullable<RequestInit['body']>;

/**
 * A body `fetch` sends, whether it is streamed (which needs `duplex: "half"`), and its length when
 * known up front. Streamed bodies go to `fetch` as async iterables: a `ReadableStream` body would be
 * kept whole by `fetch` until the request ends (for a redirect's replay), an iterable is sent and let go.
 *
 * @internal
 */
export function fetchBody(data: BodyData): { body: FetchBody; streamed: boolean; length?: number } {
  if (typeof data === 'string' || data instanceof Uint8Array || data instanceof ArrayBuffer) {
    return { body: data as FetchBody, streamed: false };
  }
  if (data instanceof Blob) {
    // Sent as it is read, with the length known up front (so the server can refuse an upload over
    // its limit at once).
    return { body: streamChunks(data.stream() as ReadableStream<Uint8Array>) as unknown as FetchBody, streamed: true, length: data.size };
  }
  if (data instanceof ReadableStream) return { body: streamChunks(data) as unknown as FetchBody, streamed: true };
  if (isAsyncIterable(data)) return { body: data as unknown as FetchBody, streamed: true };
  if (isIterable(data)) return { body: syncChunks(data) as unknown as FetchBody, streamed: true };
  throw new TypeError('a body must be a string, bytes, a Blob, a ReadableStream or an iterable of byte chunks');
}

function queryString(query: Query | undefined): string {
  if (!query) return '';
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) {
    if (v === undefined) continue;
    for (const item of Array.isArray(v) ? v : [v]) {
      params.append(k, typeof item === 'boolean' ? (item ? 'true' : 'false') : String(item));
    }
  }
  const s = params.toString();
  return s ? `?${s}` : '';
}

/** `/`-separated path segments, each percent-encoded (ids and image names in URLs). @internal */
export function seg(value: string): string {
  return value.split('/').map(encodeURIComponent).join('/');
}

/**
 * A connection to a sandlot server.
 *
 * ```ts
 * const client = new Client();                    // SANDLOT_URL, SANDLOT_API_KEY
 * const client2 = new Client({ url, apiKey });
 * ```
 *
 * It holds no connection of its own (the platform's `fetch` pools them), so there is nothing to close.
 * `client.images` manages images.
 */
export class Client {
  /** The server URL, without a trailing `/`. */
  readonly url: string;
  /** The API key. */
  readonly apiKey: string;
  /** Milliseconds a plain call may take. */
  readonly timeoutMs: number;
  /** Images: list, get, delete, pull, import, build. */
  readonly images: Images;

  /**
   * @param options URL, key and timeout; unset ones come from the environment.
   * @throws {ConfigError} without a key or with an unusable URL.
   */
  constructor(options: ClientOptions = {}) {
    const { url, apiKey } = resolveConfig(options.url, options.apiKey);
    this.url = url;
    this.apiKey = apiKey;
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.images = new Images(this);
  }

  /**
   * Sends one call and answers its response, its body not yet read; throws the SDK's error for an
   * error status (its body read) or a transport failure.
   *
   * @param method HTTP method.
   * @param path Path under the server URL (`/v1/sandboxes`).
   * @param options Body, query, headers, and `wait` to lift the timeout.
   */
  async request(method: string, path: string, options: RequestOptions = {}): Promise<Response> {
    const headers: Record<string, string> = { Authorization: `Bearer ${this.apiKey}`, ...options.headers };
    const init: RequestInit & { duplex?: 'half' } = { method, headers };
    if (options.json !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(options.json);
    } else if (options.body !== undefined) {
      const { body, streamed, length } = fetchBody(options.body);
      init.body = body;
      if (streamed) init.duplex = 'half';
      if (length !== undefined) headers['Content-Length'] = String(length);
    }
    if (!options.wait) init.signal = AbortSignal.timeout(this.timeoutMs);
    let response: Response;
    try {
      response = await fetch(this.url + path + queryString(options.query), init);
    } catch (e) {
      throw transportError(e, this.url);
    }
    if (response.status >= 400) {
      let text: string;
      try {
        text = await response.text();
      } catch (e) {
        throw transportError(e, this.url);
      }
      throw errorFromResponse(response.status, text);
    }
    return response;
  }

  /**
   * Like {@link Client.request}, answering the parsed JSON body (`undefined` when empty).
   *
   * @param method HTTP method.
   * @param path Path under the server URL.
   * @param options Body, query, headers, `wait`.
   */
  async call(method: string, path: string, options: RequestOptions = {}): Promise<unknown> {
    const response = await this.request(method, path, options);
    let text: string;
    try {
      text = await response.text();
    } catch (e) {
      throw transportError(e, this.url);
    }
    if (!text) return undefined;
    try {
      return JSON.parse(text) as unknown;
    } catch (e) {
      throw new ProtocolError(`unreadable answer from the server: ${JSON.stringify(text.slice(0, 200))}`, { cause: e });
    }
  }

  /** {@link Client.call} for an answer that must be a JSON object. @internal */
  async callObject(method: string, path: string, options: RequestOptions = {}): Promise<Json> {
    const d = await this.call(method, path, options);
    if (d === null || typeof d !== 'object' || Array.isArray(d)) {
      throw new ProtocolError(`expected a JSON object from ${method} ${path}, got ${JSON.stringify(d)?.slice(0, 200)}`);
    }
    return d as Json;
  }

  /** `GET /healthz`: the server answers, and which host features it runs without. */
  async health(): Promise<Health> {
    const d = await this.callObject('GET', '/healthz');
    return { status: String(d.status), degraded: Array.isArray(d.degraded) ? d.degraded.map(String) : [] };
  }

  /** The caller's tenant's sandboxes that are not deleted, newest first. */
  async listSandboxes(): Promise<SandboxInfo[]> {
    const d = await this.callObject('GET', '/v1/sandboxes');
    return (d.sandboxes as Json[]).map(sandboxInfoFromJson);
  }

  /** The caller's tenant's snapshots, newest first. */
  async listSnapshots(): Promise<SnapshotInfo[]> {
    const d = await this.callObject('GET', '/v1/snapshots');
    return (d.snapshots as Json[]).map(snapshotInfoFromJson);
  }

  /**
   * Deletes a snapshot (sandboxes made from it keep their files).
   *
   * @param snapshot Its id or name.
   */
  async deleteSnapshot(snapshot: string): Promise<void> {
    await this.call('DELETE', `/v1/snapshots/${seg(snapshot)}`);
  }

  /**
   * Makes an API key for `tenant` (created if new). Needs the admin key.
   *
   * @param tenant 1–64 of `A-Z a-z 0-9 - _ .`.
   * @param options `expiresInS`: the key stops working that many seconds from now.
   */
  async createKey(tenant: string, options: { expiresInS?: number } = {}): Promise<KeyCreated> {
    const body: Json = { tenant };
    if (options.expiresInS !== undefined) body.expires_in_s = options.expiresInS;
    return keyCreatedFromJson(await this.callObject('POST', '/v1/keys', { json: body }));
  }

  /**
   * Audit records, newest first (a tenant key sees its tenant's, the admin key everyone's).
   *
   * @param options `sandboxId` to filter by, `limit` (1–10 000, default 100).
   */
  async audit(options: { sandboxId?: string; limit?: number } = {}): Promise<AuditEntry[]> {
    const d = await this.callObject('GET', '/v1/audit', {
      query: { sandbox_id: options.sandboxId, limit: options.limit },
    });
    return (d.entries as Json[]).map(auditEntryFromJson);
  }
}
