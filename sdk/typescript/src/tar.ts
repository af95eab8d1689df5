/**
 * Directories as tar streams, both ways, without holding them in memory: {@link tarDirectory} writes a
 * local directory as an uncompressed tar (ustar, with PAX records for long names), and
 * {@link extractTar} unpacks an untrusted tar stream into a local directory, refusing every entry or
 * link that would land outside it.
 *
 * @module
 * @internal
 */

import { constants as C, promises as fsp } from 'node:fs';
import path from 'node:path';

import { ProtocolError } from './errors.js';

const BLOCK = 512;
const enc = new TextEncoder();
const dec = new TextDecoder();

function octal(value: number, width: number): string {
  return value.toString(8).padStart(width - 1, '0') + '\0';
}

function writeString(buf: Uint8Array, offset: number, width: number, value: string): void {
  const bytes = enc.encode(value);
  buf.set(bytes.subarray(0, width), offset);
}

/** One 512-byte ustar header. */
function header(name: string, o: { mode: number; size: number; mtime: number; type: string; link?: string }): Uint8Array {
  const h = new Uint8Array(BLOCK);
  writeString(h, 0, 100, name);
  writeString(h, 100, 8, octal(o.mode & 0o7777, 8));
  writeString(h, 108, 8, octal(0, 8));
  writeString(h, 116, 8, octal(0, 8));
  writeString(h, 124, 12, octal(o.size, 12));
  writeString(h, 136, 12, octal(Math.max(0, Math.floor(o.mtime)), 12));
  writeString(h, 148, 8, '        ');
  writeString(h, 156, 1, o.type);
  writeString(h, 157, 100, o.link ?? '');
  writeString(h, 257, 6, 'ustar\0');
  writeString(h, 263, 2, '00');
  let sum = 0;
  for (const b of h) sum += b;
  writeString(h, 148, 8, sum.toString(8).padStart(6, '0') + '\0 ');
  return h;
}

function padding(size: number): Uint8Array {
  const rest = size % BLOCK;
  return new Uint8Array(rest === 0 ? 0 : BLOCK - rest);
}

/** A PAX extended header carrying `path`/`linkpath` that do not fit ustar's 100 bytes. */
function paxRecord(records: Record<string, string>): Uint8Array[] {
  let text = '';
  for (const [k, v] of Object.entries(records)) {
    const body = ` ${k}=${v}\n`;
    const bodyLen = enc.encode(body).length;
    // A record's length counts its own digits.
    let len = bodyLen + String(bodyLen).length;
    while (bodyLen + String(len).length !== len) len = bodyLen + String(len).length;
    text += `${len}${body}`;
  }
  const data = enc.encode(text);
  return [header('././@PaxHeader', { mode: 0o644, size: data.length, mtime: 0, type: 'x' }), data, padding(data.length)];
}

function entryHeader(name: string, o: { mode: number; size: number; mtime: number; type: string; link?: string }): Uint8Array[] {
  const out: Uint8Array[] = [];
  const records: Record<string, string> = {};
  if (enc.encode(name).length > 100) records.path = name;
  if (o.link !== undefined && enc.encode(o.link).length > 100) records.linkpath = o.link;
  if (Object.keys(records).length > 0) out.push(...paxRecord(records));
  out.push(header(records.path ? name.slice(0, 99) : name, { ...o, link: records.linkpath ? '' : o.link }));
  return out;
}

/** Bytes read from disk per chunk. */
const CHUNK = 1 << 20;

/**
 * Exactly `size` bytes of local file `file`, a chunk at a time as the consumer pulls (zero-padded if
 * the file shrank meanwhile, cut if it grew).
 */
export async function* fileChunks(file: string, size: number): AsyncGenerator<Uint8Array> {
  const fh = await fsp.open(file, 'r');
  try {
    let at = 0;
    while (at < size) {
      const buf = new Uint8Array(Math.min(CHUNK, size - at));
      const { bytesRead } = await fh.read(buf, 0, buf.length, at);
      if (bytesRead === 0) {
        yield new Uint8Array(size - at);
        return;
      }
      at += bytesRead;
      yield bytesRead === buf.length ? buf : buf.subarray(0, bytesRead);
    }
  } finally {
    await fh.close();
  }
}

/**
 * `localDir`'s contents as an uncompressed tar, entry names relative to it, owners left to the server;
 * files are read a chunk at a time as the consumer pulls.
 */
export async function* tarDirectory(localDir: string): AsyncGenerator<Uint8Array> {
  const st = await fsp.stat(localDir);
  if (!st.isDirectory()) throw new TypeError(`${localDir} is not a directory`);
  const stack: string[] = [''];
  while (stack.length > 0) {
    const rel = stack.pop() as string;
    const names = (await fsp.readdir(path.join(localDir, rel))).sort();
    const dirs: string[] = [];
    for (const n of names) {
      const relName = rel ? `${rel}/${n}` : n;
      const full = path.join(localDir, relName);
      const s = await fsp.lstat(full);
      const mtime = s.mtimeMs / 1000;
      if (s.isDirectory()) {
        yield* entryHeader(`${relName}/`, { mode: s.mode, size: 0, mtime, type: '5' });
        dirs.push(relName);
      } else if (s.isSymbolicLink()) {
        const link = await fsp.readlink(full);
        yield* entryHeader(relName, { mode: 0o777, size: 0, mtime, type: '2', link });
      } else if (s.isFile()) {
        yield* entryHeader(relName, { mode: s.mode, size: s.size, mtime, type: '0' });
        yield* fileChunks(full, s.size);
        yield padding(s.size);
      }
      // Sockets, FIFOs and devices: nothing an upload needs.
    }
    // Depth first, in name order.
    for (let i = dirs.length - 1; i >= 0; i--) stack.push(dirs[i] as string);
  }
  yield new Uint8Array(BLOCK * 2);
}

/** Reads exact byte counts from an async iterator of chunks. */
class ByteReader {
  private buf: Uint8Array = new Uint8Array(0);
  private readonly it: AsyncIterator<Uint8Array>;
  private ended = false;

  constructor(chunks: AsyncIterable<Uint8Array>) {
    this.it = chunks[Symbol.asyncIterator]();
  }

  private async fill(n: number): Promise<boolean> {
    while (this.buf.length < n && !this.ended) {
      const next = await this.it.next();
      if (next.done) {
        this.ended = true;
        break;
      }
      const merged = new Uint8Array(this.buf.length + next.value.length);
      merged.set(this.buf, 0);
      merged.set(next.value, this.buf.length);
      this.buf = merged;
    }
    return this.buf.length >= n;
  }

  /** Exactly `n` bytes, or `undefined` at a clean end. */
  async read(n: number): Promise<Uint8Array | undefined> {
    if (!(await this.fill(n))) {
      if (this.buf.length === 0) return undefined;
      throw new ProtocolError('the tar stream ended in the middle of an entry');
    }
    const out = this.buf.slice(0, n);
    this.buf = this.buf.subarray(n);
    return out;
  }

  /** `n` bytes as chunks as they come (a file's data is never held whole). */
  async *chunks(n: number): AsyncGenerator<Uint8Array> {
    let left = n;
    while (left > 0) {
      if (this.buf.length === 0) {
        const next = this.ended ? { done: true as const, value: undefined } : await this.it.next();
        if (next.done) {
          this.ended = true;
          throw new ProtocolError('the tar stream ended in the middle of a file');
        }
        this.buf = next.value;
      }
      const take = Math.min(left, this.buf.length);
      yield this.buf.subarray(0, take);
      this.buf = this.buf.subarray(take);
      left -= take;
    }
  }

  async skip(n: number): Promise<void> {
    for await (const _ of this.chunks(n)) void _;
  }

  async close(): Promise<void> {
    await this.it.return?.();
  }
}

function cstring(b: Uint8Array, offset: number, width: number): string {
  const field = b.subarray(offset, offset + width);
  const end = field.indexOf(0);
  return dec.decode(end >= 0 ? field.subarray(0, end) : field);
}

function parseOctal(b: Uint8Array, offset: number, width: number): number {
  const field = b.subarray(offset, offset + width);
  if (field[0] !== undefined && (field[0] & 0x80) !== 0) {
    // GNU base-256 for large values.
    let v = 0;
    for (let i = 1; i < field.length; i++) v = v * 256 + (field[i] as number);
    return v;
  }
  const text = cstring(b, offset, width).trim();
  return text ? parseInt(text, 8) : 0;
}

function parsePax(data: Uint8Array): Record<string, string> {
  const out: Record<string, string> = {};
  const text = dec.decode(data);
  let i = 0;
  while (i < text.length) {
    const sp = text.indexOf(' ', i);
    if (sp < 0) break;
    const len = parseInt(text.slice(i, sp), 10);
    if (!(len > 0)) break;
    // Lengths count bytes; the records sandlot and common tools write are ASCII or short, so cut by bytes.
    const recordBytes = enc.encode(text.slice(i)).subarray(0, len);
    const record = dec.decode(recordBytes);
    const body = record.slice(record.indexOf(' ') + 1, record.endsWith('\n') ? -1 : undefined);
    const eq = body.indexOf('=');
    if (eq > 0) out[body.slice(0, eq)] = body.slice(eq + 1);
    i += record.length;
  }
  return out;
}

function inside(root: string, p: string): boolean {
  return p === root || p.startsWith(root + path.sep);
}

/** `p` with every existing prefix's symlinks resolved (the rest appended as it is). */
async function realpathLoose(p: string): Promise<string> {
  try {
    return await fsp.realpath(p);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    const parent = path.dirname(p);
    if (parent === p) return p;
    return path.join(await realpathLoose(parent), path.basename(p));
  }
}

async function removeNonDir(p: string): Promise<void> {
  try {
    const s = await fsp.lstat(p);
    if (!s.isDirectory()) await fsp.unlink(p);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
  }
}

/**
 * Extracts an untrusted tar stream into `dest` (made if missing): regular files, directories and links
 * only, every one inside `dest` (no absolute names, `..`, or links leading out), no set-id bits, owned
 * by the caller. Answers the extracted names.
 *
 * @throws {ProtocolError} for an entry that would land outside `dest`, or a broken archive.
 */
export async function extractTar(chunks: AsyncIterable<Uint8Array>, dest: string): Promise<string[]> {
  await fsp.mkdir(dest, { recursive: true });
  const root = await fsp.realpath(dest);
  const reader = new ByteReader(chunks);
  const names: string[] = [];
  const dirModes: Array<[string, number]> = [];
  let longName: string | undefined;
  let longLink: string | undefined;
  let pax: Record<string, string> = {};
  try {
    for (;;) {
      const h = await reader.read(BLOCK);
      if (!h || h.every((b) => b === 0)) break;
      const size = parseOctal(h, 124, 12);
      const type = String.fromCharCode(h[156] || 0x30);
      const padded = size + ((BLOCK - (size % BLOCK)) % BLOCK);
      if (type === 'L' || type === 'K' || type === 'x' || type === 'g') {
        const data = (await reader.read(padded)) ?? new Uint8Array(0);
        const body = data.subarray(0, size);
        if (type === 'L') longName = cstring(body, 0, body.length);
        else if (type === 'K') longLink = cstring(body, 0, body.length);
        else if (type === 'x') pax = { ...pax, ...parsePax(body) };
        continue;
      }
      const prefix = cstring(h, 345, 155);
      const rawName = pax.path ?? longName ?? (prefix ? `${prefix}/${cstring(h, 0, 100)}` : cstring(h, 0, 100));
      const linkName = pax.linkpath ?? longLink ?? cstring(h, 157, 100);
      const mode = parseOctal(h, 100, 8) & 0o777;
      longName = longLink = undefined;
      pax = {};
      const name = path.posix.normalize(rawName).replace(/\/+$/, '');
      const hasData = type === '0' || type === '\0' || type === '7';
      if (name === '.' || name === '') {
        await reader.skip(hasData ? padded : 0);
        continue;
      }
      if (name.startsWith('/') || name === '..' || name.startsWith('../')) {
        throw new ProtocolError(`refusing tar entry ${JSON.stringify(rawName)}: it would land outside ${root}`);
      }
      const target = path.join(root, ...name.split('/'));
      const resolvedParent = await realpathLoose(path.dirname(target));
      const resolved = path.join(resolvedParent, path.basename(target));
      if (!inside(root, resolved)) {
        throw new ProtocolError(`refusing tar entry ${JSON.stringify(rawName)}: it resolves outside ${root}`);
      }
      if (!hasData) await reader.skip(padded);
      if (type === '5') {
        await fsp.mkdir(resolved, { recursive: true, mode: 0o700 });
        dirModes.push([resolved, mode]);
      } else if (type === '2') {
        const linkTarget = path.resolve(path.dirname(resolved), linkName);
        if (path.isAbsolute(linkName) || !inside(root, await realpathLoose(linkTarget))) {
          throw new ProtocolError(
            `refusing symlink ${JSON.stringify(rawName)} -> ${JSON.stringify(linkName)}: it leads outside ${root}`,
          );
        }
        await fsp.mkdir(resolvedParent, { recursive: true });
        await removeNonDir(resolved);
        await fsp.symlink(linkName, resolved);
      } else if (type === '1') {
        const from = await realpathLoose(path.join(root, ...path.posix.normalize(linkName).split('/')));
        if (path.isAbsolute(linkName) || !inside(root, from)) {
          throw new ProtocolError(
            `refusing hard link ${JSON.stringify(rawName)} -> ${JSON.stringify(linkName)}: it leads outside ${root}`,
          );
        }
        await fsp.mkdir(resolvedParent, { recursive: true });
        await removeNonDir(resolved);
        await fsp.link(from, resolved);
      } else if (hasData) {
        await fsp.mkdir(resolvedParent, { recursive: true });
        await removeNonDir(resolved);
        // O_EXCL | O_NOFOLLOW: a name planted meanwhile is not followed.
        const fh = await fsp.open(resolved, C.O_WRONLY | C.O_CREAT | C.O_EXCL | C.O_NOFOLLOW, 0o600);
        try {
          for await (const chunk of reader.chunks(size)) await fh.write(chunk);
          await fh.chmod(mode);
        } finally {
          await fh.close();
        }
        await reader.skip(padded - size);
      } else {
        // Devices, FIFOs: nothing a download needs.
        continue;
      }
      names.push(name);
    }
  } finally {
    await reader.close();
  }
  // Directory modes last, so a read-only directory does not stop its own contents.
  for (const [dir, mode] of dirModes.reverse()) await fsp.chmod(dir, mode);
  return names;
}
