/**
 * Sandboxes: `Sandbox.create(...)` boots one and answers a handle; `Sandbox.connect(id)` and
 * `Sandbox.getOrCreate(name)` find one again. `await using sbx = await Sandbox.create()` deletes it
 * when the block ends. `sbx.commands` runs commands, `sbx.files` moves files; the lifecycle calls
 * (pause, resume, stop, snapshot, fork, setTimeout, setNetwork, expose) are methods.
 *
 * @module
 */

import { Client, type ClientOptions, seg } from './client.js';
import { Commands } from './commands.js';
import { NotFoundError } from './errors.js';
import { Files } from './files.js';
import {
  type Json,
  type NetworkInfo,
  type NetworkPolicy,
  type PortInfo,
  type SandboxInfo,
  type SnapshotInfo,
  type TimeoutAction,
  networkPolicyToJson,
  portInfoFromJson,
  sandboxInfoFromJson,
  snapshotInfoFromJson,
} from './models.js';

// Node 20 before 20.4 has no Symbol.asyncDispose; TypeScript's `await using` looks it up by this name.
if (typeof (Symbol as { asyncDispose?: symbol }).asyncDispose !== 'symbol') {
  Object.defineProperty(Symbol, 'asyncDispose', { value: Symbol.for('Symbol.asyncDispose') });
}

/** Which client a static call uses: `client`, else one made from `url`/`apiKey` or the environment. */
export interface ConnectionOptions extends ClientOptions {
  /** The client to use (shared between sandboxes). */
  client?: Client | undefined;
}

/** Options of {@link Sandbox.create}. */
export interface CreateOptions extends ConnectionOptions {
  /** Image to boot (default: the server's `--default-image`, normally `host`). */
  image?: string;
  /** CPU limit in cores (fractional allowed). */
  cpu?: number;
  /** Memory limit in MiB (no swap). */
  memoryMb?: number;
  /** Most processes and threads at once. */
  pids?: number;
  /** Writable-layer cap in MiB. */
  diskMb?: number;
  /** Lifetime in seconds (default 300); then `onTimeout` applies. */
  timeoutS?: number;
  /** Environment of every command. */
  env?: Record<string, string>;
  /** Labels, returned as given. */
  metadata?: Record<string, string>;
  /** Egress policy (default: deny, loopback only). */
  network?: NetworkPolicy;
  /** A name unique among the tenant's live sandboxes. */
  name?: string;
  /** Keep it (files and all) across stop, expiry and server restarts. */
  persistent?: boolean;
  /** Commands and file operations resume it when stopped or paused. */
  autoResume?: boolean;
  /** Expire after this many seconds without API calls or process output. */
  idleTimeoutS?: number;
  /** `delete`, `stop` or `pause` at expiry. */
  onTimeout?: TimeoutAction;
  /** Seconds an expiry-paused sandbox waits before it is stopped. */
  stopAfterS?: number;
  /** Start from this snapshot's files (id or name). */
  snapshot?: string;
}

function clientFor(o: ConnectionOptions): Client {
  return o.client ?? new Client({ url: o.url, apiKey: o.apiKey, timeoutMs: o.timeoutMs });
}

function createBody(o: CreateOptions, getOrCreate: boolean): Json {
  const fields: Array<[string, unknown]> = [
    ['image', o.image],
    ['cpu', o.cpu],
    ['memory_mb', o.memoryMb],
    ['pids', o.pids],
    ['disk_mb', o.diskMb],
    ['timeout_s', o.timeoutS],
    ['name', o.name],
    ['persistent', o.persistent],
    ['auto_resume', o.autoResume],
    ['idle_timeout_s', o.idleTimeoutS],
    ['on_timeout', o.onTimeout],
    ['stop_after_s', o.stopAfterS],
    ['snapshot', o.snapshot],
  ];
  const body: Json = {};
  for (const [k, v] of fields) if (v !== undefined) body[k] = v;
  if (o.env && Object.keys(o.env).length > 0) body.env = { ...o.env };
  if (o.metadata && Object.keys(o.metadata).length > 0) body.metadata = { ...o.metadata };
  if (o.network !== undefined) body.network = networkPolicyToJson(o.network);
  if (getOrCreate) body.get_or_create = true;
  return body;
}

/**
 * A handle to one sandbox. Made by {@link Sandbox.create}, {@link Sandbox.connect} or
 * {@link Sandbox.getOrCreate}.
 *
 * ```ts
 * await using sbx = await Sandbox.create();   // deleted when the block ends
 * console.log((await sbx.commands.run('echo hello')).stdout);
 * ```
 */
export class Sandbox implements AsyncDisposable {
  /** The sandbox id (`sb_…`). */
  readonly id: string;
  /** The client this sandbox talks through. */
  readonly client: Client;
  /** Runs commands and reaches processes. */
  readonly commands: Commands;
  /** The sandbox's file system. */
  readonly files: Files;
  /** The sandbox as last reported (refresh with {@link Sandbox.getInfo}). */
  info: SandboxInfo;

  /**
   * @param client The client to talk through.
   * @param info The sandbox as the server reported it.
   */
  constructor(client: Client, info: SandboxInfo) {
    this.client = client;
    this.info = info;
    this.id = info.id;
    this.commands = new Commands(client, info.id);
    this.files = new Files(client, info.id);
  }

  /**
   * Creates a sandbox and answers it once it runs (`POST /v1/sandboxes`).
   *
   * @param options Image, limits, lifetime, environment, network, name, persistence, snapshot, and
   *   which server (`client`, or `url`/`apiKey`, else `SANDLOT_URL`/`SANDLOT_API_KEY`).
   */
  static async create(options: CreateOptions = {}): Promise<Sandbox> {
    const client = clientFor(options);
    const d = await client.callObject('POST', '/v1/sandboxes', { json: createBody(options, false), wait: true });
    return new Sandbox(client, sandboxInfoFromJson(d));
  }

  /**
   * The tenant's live sandbox named `name` (resumed if stopped or paused), or a new one made with the
   * other options (as {@link Sandbox.create} takes them).
   *
   * @param name The sandbox's name.
   * @param options As for {@link Sandbox.create}.
   */
  static async getOrCreate(name: string, options: Omit<CreateOptions, 'name'> = {}): Promise<Sandbox> {
    const client = clientFor(options);
    const body = createBody({ ...options, name }, true);
    const d = await client.callObject('POST', '/v1/sandboxes', { json: body, wait: true });
    return new Sandbox(client, sandboxInfoFromJson(d));
  }

  /**
   * A handle to existing sandbox `sandboxId`; a paused or stopped one is resumed unless `resume: false`.
   *
   * @param sandboxId The id (`sb_…`).
   * @param options `resume` (default true) and which server.
   * @throws {NotFoundError} for an unknown id, another tenant's, or a deleted one.
   */
  static async connect(sandboxId: string, options: ConnectionOptions & { resume?: boolean } = {}): Promise<Sandbox> {
    const client = clientFor(options);
    let info = sandboxInfoFromJson(await client.callObject('GET', `/v1/sandboxes/${seg(sandboxId)}`));
    if (info.state === 'deleted') {
      // A deleted sandbox's record still answers GET (for the audit trail); nothing is left to reach.
      const reason = info.reason ? ` (${info.reason})` : '';
      throw new NotFoundError(`sandbox ${info.id} was deleted${reason}`, { code: 'not_found', status: 404 });
    }
    if ((options.resume ?? true) && (info.state === 'paused' || info.state === 'stopped')) {
      info = sandboxInfoFromJson(
        await client.callObject('POST', `/v1/sandboxes/${seg(sandboxId)}/resume`, { wait: true }),
      );
    }
    return new Sandbox(client, info);
  }

  /**
   * The tenant's sandboxes that are not deleted, newest first.
   *
   * @param options Which server.
   */
  static async list(options: ConnectionOptions = {}): Promise<SandboxInfo[]> {
    return clientFor(options).listSandboxes();
  }

  private path(what = ''): string {
    return `/v1/sandboxes/${seg(this.id)}${what ? `/${what}` : ''}`;
  }

  private async transition(what: string, body?: Json): Promise<SandboxInfo> {
    const d = await this.client.callObject('POST', this.path(what), { json: body, wait: true });
    this.info = sandboxInfoFromJson(d);
    return this.info;
  }

  /** The sandbox as the server reports it now (state, limits, network, expiry). */
  async getInfo(): Promise<SandboxInfo> {
    this.info = sandboxInfoFromJson(await this.client.callObject('GET', this.path()));
    return this.info;
  }

  /** Whether the sandbox is `running` now. */
  async isRunning(): Promise<boolean> {
    return (await this.getInfo()).state === 'running';
  }

  /** Deletes the sandbox: every process killed, its files removed. */
  async delete(): Promise<void> {
    await this.client.call('DELETE', this.path(), { wait: true });
  }

  /** Deletes the sandbox (E2B's name for {@link Sandbox.delete}). */
  async kill(): Promise<void> {
    await this.delete();
  }

  /** Freezes every process in memory (no CPU) until {@link Sandbox.resume}; the lifetime keeps running. */
  async pause(): Promise<SandboxInfo> {
    return this.transition('pause');
  }

  /** Thaws a paused sandbox, or boots a stopped one again on its files. */
  async resume(): Promise<SandboxInfo> {
    return this.transition('resume');
  }

  /** Ends every process and keeps the files (synced first); {@link Sandbox.resume} boots it again. */
  async stop(): Promise<SandboxInfo> {
    return this.transition('stop');
  }

  /**
   * Ends the sandbox's lifetime `seconds` from now.
   *
   * @param seconds The new lifetime, from now.
   */
  async setTimeout(seconds: number): Promise<SandboxInfo> {
    return this.transition('timeout', { timeout_s: seconds });
  }

  /**
   * A read-only copy-on-write snapshot of the files; `Sandbox.create({snapshot})` starts from it.
   *
   * @param name An optional name, unique among the tenant's snapshots.
   */
  async snapshot(name?: string): Promise<SnapshotInfo> {
    const body = name === undefined ? undefined : { name };
    return snapshotInfoFromJson(await this.client.callObject('POST', this.path('snapshot'), { json: body, wait: true }));
  }

  /**
   * `count` (1–32) running copies, each with a copy-on-write copy of the files, on the same client.
   *
   * @param count How many.
   */
  async fork(count = 1): Promise<Sandbox[]> {
    const d = await this.client.callObject('POST', this.path('fork'), { json: { count }, wait: true });
    return (d.sandboxes as Json[]).map((s) => new Sandbox(this.client, sandboxInfoFromJson(s)));
  }

  /**
   * Replaces the egress policy (for new connections, without a restart). Answers the policy as the
   * server now holds it (header values redacted).
   *
   * @param policy The new policy (`{}` is deny).
   */
  async setNetwork(policy: NetworkPolicy): Promise<NetworkInfo> {
    const d = await this.client.callObject('PATCH', this.path('network'), { json: networkPolicyToJson(policy) });
    this.info = sandboxInfoFromJson(d);
    return this.info.network;
  }

  /**
   * Exposes sandbox port `port`: a preview URL on an origin of its own (with its token).
   *
   * @param port The port a server inside listens on (on `127.0.0.1`).
   */
  async expose(port: number): Promise<PortInfo> {
    return portInfoFromJson(await this.client.callObject('POST', this.path('ports'), { json: { port } }));
  }

  /** Deletes the sandbox when an `await using` block ends (already gone is fine). */
  async [Symbol.asyncDispose](): Promise<void> {
    try {
      await this.delete();
    } catch (e) {
      if (!(e instanceof NotFoundError)) throw e;
    }
  }
}
