/**
 * Files inside a sandbox: `sbx.files.write/read/list/stat/mkdir/remove/move/uploadDir/downloadDir`.
 *
 * Paths are absolute, or relative to the user's home (`/home/user`, or `/root` with `user: "root"`).
 * Every operation runs inside the sandbox as that identity, so the kernel's permission checks apply.
 * Bodies stream both ways: a `Blob` (`fs.openAsBlob`), a web stream or an (async) iterable of chunks is
 * sent without being read whole, and `read(path, {format: "stream"})` answers a web `ReadableStream`
 * of chunks as they arrive. Directories travel as tar streams; what a sandbox sends back is untrusted,
 * so `downloadDir` refuses entries that would land outside the target.
 *
 * @module
 */

import { promises as fsp } from 'node:fs';

import { type BodyData, type Client, seg } from './client.js';
import { FileNotFoundError } from './errors.js';
import {
  type FileStat,
  type Json,
  type User,
  type WriteResult,
  fileStatFromJson,
  writeResultFromJson,
} from './models.js';
import { bodyChunks } from './streaming.js';
import { extractTar, fileChunks, tarDirectory } from './tar.js';

/** How {@link Files.read} answers: text (UTF-8), bytes, or a stream of chunks. */
export type ReadFormat = 'text' | 'bytes' | 'stream';

/** The identity an operation runs as. */
export interface UserOption {
  /** `user` (default) or `root`; relative paths are in that identity's home. */
  user?: User | undefined;
}

function octalMode(mode: number | string | undefined): string | undefined {
  if (mode === undefined || typeof mode === 'string') return mode;
  return mode.toString(8).padStart(4, '0');
}

/** A web stream of a response body's chunks; a broken connection errors it with {@link ProtocolError}. */
function chunkStream(response: Response, url: string): ReadableStream<Uint8Array> {
  const chunks = bodyChunks(response, url);
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const next = await chunks.next();
        if (next.done) controller.close();
        else controller.enqueue(next.value);
      } catch (e) {
        controller.error(e);
      }
    },
    async cancel() {
      await chunks.return(undefined);
    },
  });
}

/** `sbx.files`: the sandbox's file system, as `user` unless an operation says `user: "root"`. */
export class Files {
  private readonly client: Client;
  private readonly base: string;

  /**
   * @param client The client to talk through.
   * @param sandboxId The sandbox.
   */
  constructor(client: Client, sandboxId: string) {
    this.client = client;
    this.base = `/v1/sandboxes/${seg(sandboxId)}/files`;
  }

  /**
   * Writes `data` to `path` (parents made, an existing file replaced atomically).
   *
   * @param path Where, in the sandbox.
   * @param data Text (UTF-8), bytes, a `Blob` (sent with its length), a web `ReadableStream` or an
   *   (async) iterable of byte chunks (streamed).
   * @param options `mode`: permission bits (`0o755` or `"0755"`; default 0644); `user`.
   */
  async write(path: string, data: BodyData, options: UserOption & { mode?: number | string } = {}): Promise<WriteResult> {
    const d = await this.client.callObject('PUT', this.base, {
      query: { path, user: options.user, mode: octalMode(options.mode) },
      body: data,
      wait: true,
    });
    return writeResultFromJson(d);
  }

  /**
   * Copies local file `localPath` to `path` in the sandbox, streamed from disk with its length.
   *
   * @param localPath A file on this machine.
   * @param path Where, in the sandbox.
   * @param options `mode`, `user`.
   */
  async upload(localPath: string, path: string, options: UserOption & { mode?: number | string } = {}): Promise<WriteResult> {
    const { size } = await fsp.stat(localPath);
    const d = await this.client.callObject('PUT', this.base, {
      query: { path, user: options.user, mode: octalMode(options.mode) },
      body: fileChunks(localPath, size),
      // Known up front, so the server can refuse an upload over its limit before any byte is sent.
      headers: { 'Content-Length': String(size) },
      wait: true,
    });
    return writeResultFromJson(d);
  }

  /** Reads the file at `path` as UTF-8 text. */
  read(path: string, options?: UserOption & { format?: 'text' }): Promise<string>;
  /** Reads the file at `path` as bytes. */
  read(path: string, options: UserOption & { format: 'bytes' }): Promise<Uint8Array>;
  /**
   * Reads the file at `path` as a web stream of chunks as they arrive (the file is never held whole;
   * `for await (const chunk of stream)`; cancel it when done with it early).
   */
  read(path: string, options: UserOption & { format: 'stream' }): Promise<ReadableStream<Uint8Array>>;
  /**
   * Reads the file at `path`: as text (UTF-8), bytes, or a stream of chunks.
   *
   * @param path The file.
   * @param options `format` (`text`, `bytes`, `stream`), `user`.
   * @throws {FileNotFoundError} when it is missing; {@link WrongFileKindError} for a directory.
   */
  read(path: string, options?: UserOption & { format?: ReadFormat }): Promise<string | Uint8Array | ReadableStream<Uint8Array>>;
  async read(
    path: string,
    options: UserOption & { format?: ReadFormat } = {},
  ): Promise<string | Uint8Array | ReadableStream<Uint8Array>> {
    const response = await this.client.request('GET', this.base, { query: { path, user: options.user }, wait: true });
    if (options.format === 'stream') return chunkStream(response, this.client.url);
    const parts: Uint8Array[] = [];
    let n = 0;
    for await (const chunk of bodyChunks(response, this.client.url)) {
      parts.push(chunk);
      n += chunk.length;
    }
    const bytes = new Uint8Array(n);
    let at = 0;
    for (const p of parts) {
      bytes.set(p, at);
      at += p.length;
    }
    return options.format === 'bytes' ? bytes : new TextDecoder().decode(bytes);
  }

  /**
   * Copies `path` in the sandbox to local file `localPath`, streamed to disk. Answers the bytes written.
   *
   * @param path The file in the sandbox.
   * @param localPath Where on this machine (replaced if it exists).
   * @param options `user`.
   */
  async download(path: string, localPath: string, options: UserOption = {}): Promise<number> {
    const response = await this.client.request('GET', this.base, { query: { path, user: options.user }, wait: true });
    const fh = await fsp.open(localPath, 'w');
    let n = 0;
    try {
      // One chunk written before the next is read: the file is never held whole.
      for await (const chunk of bodyChunks(response, this.client.url)) {
        await fh.write(chunk);
        n += chunk.length;
      }
    } finally {
      await fh.close();
    }
    return n;
  }

  /**
   * Entries below directory `path` (not itself), `depth` levels down (1–16), sorted by path.
   *
   * @param path The directory.
   * @param options `depth` (default 1), `user`.
   */
  async list(path: string, options: UserOption & { depth?: number } = {}): Promise<FileStat[]> {
    const d = await this.client.callObject('GET', `${this.base}/list`, {
      query: { path, user: options.user, depth: options.depth ?? 1 },
    });
    return (d.entries as Json[]).map(fileStatFromJson);
  }

  /**
   * Metadata of `path` (a symlink is not followed).
   *
   * @throws {FileNotFoundError} when it is missing.
   */
  async stat(path: string, options: UserOption = {}): Promise<FileStat> {
    return fileStatFromJson(await this.client.callObject('GET', `${this.base}/stat`, { query: { path, user: options.user } }));
  }

  /** Whether `path` exists (as seen by `user`). */
  async exists(path: string, options: UserOption = {}): Promise<boolean> {
    try {
      await this.stat(path, options);
      return true;
    } catch (e) {
      if (e instanceof FileNotFoundError) return false;
      throw e;
    }
  }

  /**
   * Makes directory `path`; with `parents` (default) like `mkdir -p`.
   *
   * @throws {AlreadyExistsError} with `parents: false` when it exists.
   */
  async mkdir(path: string, options: UserOption & { parents?: boolean } = {}): Promise<FileStat> {
    const body: Json = { path, parents: options.parents ?? true };
    if (options.user !== undefined) body.user = options.user;
    return fileStatFromJson(await this.client.callObject('POST', `${this.base}/mkdir`, { json: body }));
  }

  /**
   * Removes a file, symlink or empty directory; `recursive: true` a directory with its contents.
   *
   * @throws {DirectoryNotEmptyError} for a non-empty directory without `recursive`.
   */
  async remove(path: string, options: UserOption & { recursive?: boolean } = {}): Promise<void> {
    await this.client.call('DELETE', this.base, {
      query: { path, user: options.user, recursive: options.recursive ? true : undefined },
    });
  }

  /**
   * Renames `src` to `dst` atomically (same file system). Answers the metadata of `dst`.
   *
   * @throws {AlreadyExistsError} when `dst` exists, unless `overwrite`.
   */
  async move(src: string, dst: string, options: UserOption & { overwrite?: boolean } = {}): Promise<FileStat> {
    const body: Json = { from: src, to: dst, overwrite: options.overwrite ?? false };
    if (options.user !== undefined) body.user = options.user;
    return fileStatFromJson(await this.client.callObject('POST', `${this.base}/move`, { json: body }));
  }

  /**
   * Copies the contents of local directory `localDir` into `remoteDir` (made if missing; existing files
   * overwritten), as one tar stream read from disk as it is sent.
   *
   * @param localDir A directory on this machine.
   * @param remoteDir Where, in the sandbox.
   * @param options `user`.
   */
  async uploadDir(localDir: string, remoteDir: string, options: UserOption = {}): Promise<WriteResult> {
    if (!(await fsp.stat(localDir)).isDirectory()) throw new TypeError(`${localDir} is not a directory`);
    const d = await this.client.callObject('PUT', `${this.base}/tar`, {
      query: { path: remoteDir, user: options.user },
      body: tarDirectory(localDir),
      wait: true,
    });
    return writeResultFromJson(d);
  }

  /**
   * Copies the contents of `remoteDir` into local directory `localDir` (made if missing), streamed;
   * answers the entry names written.
   *
   * @throws {ProtocolError} for an entry or link that would land outside `localDir`.
   */
  async downloadDir(remoteDir: string, localDir: string, options: UserOption = {}): Promise<string[]> {
    const response = await this.client.request('GET', `${this.base}/tar`, {
      query: { path: remoteDir, user: options.user },
      wait: true,
    });
    return extractTar(bodyChunks(response, this.client.url), localDir);
  }
}
