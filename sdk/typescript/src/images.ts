/**
 * Images: `client.images.list/get/delete/pull/importArchive/build`.
 *
 * An image is what a sandbox boots (`Sandbox.create({image: NAME})`): `host` (the host's `/usr`), an OCI
 * image pulled from a registry or imported from an archive, or one built from a Dockerfile. Pulls,
 * imports and builds stream their progress (NDJSON); `onProgress` / `onEvent` receive every line as a
 * {@link ProgressEvent}, and a build's `onLog` receives its steps and its `RUN` output as text. A failed
 * pull, import or build throws the error it reported (a build's carries the Dockerfile `line` and the
 * failed step's output `tail`).
 *
 * @module
 */

import { promises as fsp } from 'node:fs';

import { type BodyData, type Client, type Query, seg } from './client.js';
import { ProtocolError } from './errors.js';
import { type ImageInfo, type Json, type ProgressEvent, imageInfoFromJson } from './models.js';
import { NDJSON, ndjsonLines, progressError } from './streaming.js';
import { fileChunks, tarDirectory } from './tar.js';

/** Receives each progress line of a pull, import or build; may return a promise, which is awaited. */
export type ProgressCallback = (event: ProgressEvent) => void | Promise<void>;
/** Receives a build's log as text: one line per step, then its `RUN` output as it comes. */
export type LogCallback = (text: string) => void | Promise<void>;

/**
 * An archive or build context: a local path (a directory is sent as a tar, a file as it is), or the
 * archive itself as any {@link BodyData}.
 */
export type Archive = string | Exclude<BodyData, string>;

/** Options of {@link Images.pull}. */
export interface PullOptions {
  /** What to store it as (default: the reference). */
  name?: string;
  /** `os/arch` (default `linux/amd64`). */
  platform?: string;
  /** Credentials for this pull only. */
  auth?: { username: string; password: string };
  /** Publish it to every tenant (admin key). */
  public?: boolean;
  /** Receives every progress line (`resolved`, `download`, `downloaded`, `unpacking`, `unpacked`, `done`). */
  onProgress?: ProgressCallback;
}

/** Options of {@link Images.importArchive}. */
export interface ImportOptions {
  /** Name to store it as; needed when the archive names no image. */
  name?: string;
  /** Publish it to every tenant (admin key). */
  public?: boolean;
  /** Receives every progress line. */
  onProgress?: ProgressCallback;
}

/** Options of {@link Images.build}. */
export interface BuildOptions {
  /** Path of the Dockerfile in the context (default `Dockerfile`). */
  dockerfile?: string;
  /** Run every step again. */
  noCache?: boolean;
  /** Hosts (names, `*.suffix`, CIDRs) `RUN` steps may reach; none by default. */
  allow?: string[];
  /** `ARG` values. */
  buildArgs?: Record<string, string>;
  /** Memory of each `RUN` step's build sandbox, MiB. */
  memoryMb?: number;
  /** CPU of each `RUN` step's build sandbox, cores. */
  cpu?: number;
  /** Seconds each `RUN` step may take. */
  timeoutS?: number;
  /** Receives `Step N (line L): INSTRUCTION` lines and `RUN` output as text. */
  onLog?: LogCallback;
  /** Receives every event (`step`, `output`, `unpacking`, `unpacked`, `done`). */
  onEvent?: ProgressCallback;
}

/** The human log line of a build event (steps and output), `undefined` for the others. */
function logText(ev: ProgressEvent): string | undefined {
  const f = ev.fields;
  if (ev.type === 'step') {
    const cached = f.cached ? ' (cached)' : '';
    return `Step ${Number(f.index) + 1} (line ${String(f.line)}): ${String(f.instruction)}${cached}\n`;
  }
  if (ev.type === 'output') return typeof f.data === 'string' ? f.data : '';
  return undefined;
}

/** The body of an archive, and its length when known up front. */
async function archiveBody(archive: Archive): Promise<{ body: BodyData; headers: Record<string, string> }> {
  if (typeof archive !== 'string') return { body: archive, headers: {} };
  const st = await fsp.stat(archive);
  if (st.isDirectory()) return { body: tarDirectory(archive), headers: {} };
  return { body: fileChunks(archive, st.size), headers: { 'Content-Length': String(st.size) } };
}

/** `client.images`: the images the caller's tenant can boot. */
export class Images {
  private readonly client: Client;

  /** @param client The client to talk through. */
  constructor(client: Client) {
    this.client = client;
  }

  /** `host`, the tenant's images and the public ones, by name. */
  async list(): Promise<ImageInfo[]> {
    const d = await this.client.callObject('GET', '/v1/images');
    return (d.images as Json[]).map(imageInfoFromJson);
  }

  /**
   * One image by name (names may hold `/` and `:`).
   *
   * @throws {NotFoundError} when the tenant has no such image.
   */
  async get(name: string): Promise<ImageInfo> {
    return imageInfoFromJson(await this.client.callObject('GET', `/v1/images/${seg(name)}`));
  }

  /** Deletes the tenant's image `name`; its sandboxes and snapshots keep working. */
  async delete(name: string): Promise<void> {
    await this.client.call('DELETE', `/v1/images/${seg(name)}`);
  }

  private async progress(
    method: string,
    path: string,
    init: { json?: unknown; body?: BodyData; query?: Query; headers?: Record<string, string> },
    onEvent?: ProgressCallback,
    onLog?: LogCallback,
  ): Promise<ImageInfo[]> {
    const headers = { ...init.headers, Accept: NDJSON };
    const response = await this.client.request(method, path, { ...init, wait: true, headers });
    const images: ImageInfo[] = [];
    for await (const d of ndjsonLines(response, this.client.url)) {
      if (d.type === 'error') throw progressError(d);
      if (d.type === 'done') images.push(imageInfoFromJson(d.image as Json));
      const { type, ...fields } = d;
      const ev: ProgressEvent = { type: String(type), fields };
      if (onEvent) await onEvent(ev);
      const text = onLog ? logText(ev) : undefined;
      if (onLog && text !== undefined) await onLog(text);
    }
    if (images.length === 0) throw new ProtocolError('the image stream ended without `done` or `error`');
    return images;
  }

  /**
   * Pulls `ref` (`python:3.12-slim`, `registry:5000/app@sha256:…`) from its registry.
   *
   * @param ref The image reference.
   * @param options Name, platform, credentials, `public`, progress callback.
   */
  async pull(ref: string, options: PullOptions = {}): Promise<ImageInfo> {
    const body: Json = { ref };
    if (options.name !== undefined) body.name = options.name;
    if (options.platform !== undefined) body.platform = options.platform;
    if (options.auth !== undefined) body.auth = { username: options.auth.username, password: options.auth.password };
    if (options.public) body.public = true;
    const images = await this.progress('POST', '/v1/images/pull', { json: body }, options.onProgress);
    return images[0] as ImageInfo;
  }

  /**
   * Imports a `docker save` tarball, an OCI layout tar or a root file system tar (gzip, zstd or plain),
   * streamed from a local path or given as bytes, a Blob or a stream. Answers the images stored.
   *
   * @param archive A local file path, or the archive.
   * @param options Name, `public`, progress callback.
   */
  async importArchive(archive: Archive, options: ImportOptions = {}): Promise<ImageInfo[]> {
    return this.progress(
      'POST',
      '/v1/images/import',
      { ...(await archiveBody(archive)), query: { name: options.name, public: options.public ? true : undefined } },
      options.onProgress,
    );
  }

  /**
   * Builds a Dockerfile into image `name`. `FROM` must name an OCI image the tenant can boot, or
   * `scratch` (not `host`).
   *
   * @param context A local directory (sent as a tar), or a tar of one.
   * @param name Name to store the image under.
   * @param options Dockerfile path, cache, network, build args, step limits, log and event callbacks.
   */
  async build(context: Archive, name: string, options: BuildOptions = {}): Promise<ImageInfo> {
    const query: Query = {
      name,
      file: options.dockerfile,
      no_cache: options.noCache ? true : undefined,
      memory_mb: options.memoryMb,
      cpu: options.cpu,
      timeout_s: options.timeoutS,
      allow: options.allow ?? [],
      build_arg: Object.entries(options.buildArgs ?? {}).map(([k, v]) => `${k}=${v}`),
    };
    const images = await this.progress(
      'POST',
      '/v1/images/build',
      { ...(await archiveBody(context)), query },
      options.onEvent,
      options.onLog,
    );
    return images[0] as ImageInfo;
  }
}
