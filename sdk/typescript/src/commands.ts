/**
 * Running commands in a sandbox: `sbx.commands.run(...)`, background processes and their handles.
 *
 * A foreground command answers a {@link CommandResult} once it has ended; with `onStdout`/`onStderr`
 * its output is streamed to them as it comes (NDJSON). `background: true` answers a
 * {@link CommandHandle} at once: wait for it, kill it, write to its stdin, iterate its events (replayed
 * from its start, then live), from this client or from another one that reattaches by pid
 * (`sbx.commands.connect(pid)`).
 *
 * @module
 */

import { type Client, seg } from './client.js';
import { NotFoundError, ProtocolError, TimeoutError } from './errors.js';
import {
  type CommandResult,
  type ExecEvent,
  type ExitedEvent,
  type Json,
  type OutputEvent,
  type ProcessInfo,
  type User,
  commandResultFromJson,
  processInfoFromJson,
} from './models.js';
import { NDJSON, execEvent, ndjsonLines } from './streaming.js';

/** Receives each chunk of a stream's output as text; may return a promise, which is awaited. */
export type OutputCallback = (data: string) => void | Promise<void>;

/** Options of {@link Commands.run}. */
export interface RunOptions {
  /** Working directory (default: the user's home, or the image's `WorkingDir`). */
  cwd?: string;
  /** Variables over the sandbox's. */
  env?: Record<string, string>;
  /** `user` (uid 1000) or `root` (default: the image's user, else `user`). */
  user?: User;
  /** UTF-8 input; closed after it unless `stdinOpen` (background: open by default). */
  stdin?: string | Uint8Array;
  /** Seconds until the process group is killed (status `timeout`); foreground default 60, background none. */
  timeoutS?: number;
  /** Receives stdout chunks as they come (background: while `wait` runs). */
  onStdout?: OutputCallback;
  /** Receives stderr chunks likewise. */
  onStderr?: OutputCallback;
  /** Answer a {@link CommandHandle} at once instead of waiting. */
  background?: boolean;
  /** A label listed with the process (`commands.list({tag})`). */
  tag?: string;
  /** Per-stream cap (head and tail kept), default the server's 1 MiB. */
  maxOutputBytes?: number;
  /** Keep stdin open for {@link CommandHandle.sendStdin}, or close it at once. */
  stdinOpen?: boolean;
}

/** A command: a string runs under `/bin/sh -c`, an array runs as argv (looked up in `PATH`). */
export type Command = string | readonly string[];

/** The body of `POST …/exec`. @internal */
export function execBody(cmd: Command, o: RunOptions): Json {
  const body: Json = typeof cmd === 'string' ? { shell: cmd } : { argv: [...cmd] };
  // The API carries stdin as UTF-8 text.
  const stdin = o.stdin instanceof Uint8Array ? new TextDecoder().decode(o.stdin) : o.stdin;
  const fields: Array<[string, unknown]> = [
    ['cwd', o.cwd],
    ['user', o.user],
    ['stdin', stdin],
    ['timeout_s', o.timeoutS],
    ['tag', o.tag],
    ['max_output_bytes', o.maxOutputBytes],
    ['stdin_open', o.stdinOpen],
  ];
  for (const [k, v] of fields) if (v !== undefined) body[k] = v;
  if (o.env && Object.keys(o.env).length > 0) body.env = { ...o.env };
  if (o.background) body.background = true;
  return body;
}

/** Builds a {@link CommandResult} from a stream's events. */
class Collector {
  pid: number | undefined;
  private readonly out: string[] = [];
  private readonly err: string[] = [];
  exited: ExitedEvent | undefined;

  feed(ev: ExecEvent): void {
    if (ev.type === 'started') this.pid = ev.pid;
    else if (ev.type === 'stdout') this.out.push(ev.data);
    else if (ev.type === 'stderr') this.err.push(ev.data);
    else if (ev.type === 'exited') this.exited = ev;
  }

  /** A truncated stream lacks the server's omission marker; its `wait` answer has the exact text. */
  needsWait(): boolean {
    return this.exited !== undefined && this.exited.truncated && this.pid !== undefined;
  }

  result(): CommandResult {
    const ex = this.exited;
    if (!ex) throw new ProtocolError("the command's stream ended before its `exited` event");
    return {
      status: ex.status,
      exitCode: ex.exitCode,
      signal: ex.signal,
      stdout: this.out.join(''),
      stderr: this.err.join(''),
      stdoutBytes: ex.stdoutBytes,
      stderrBytes: ex.stderrBytes,
      truncated: ex.truncated,
      durationMs: ex.durationMs,
      pid: this.pid,
      ok: ex.status === 'exited' && ex.exitCode === 0,
    };
  }
}

async function dispatch(ev: ExecEvent, onStdout?: OutputCallback, onStderr?: OutputCallback): Promise<void> {
  const cb = ev.type === 'stdout' ? onStdout : ev.type === 'stderr' ? onStderr : undefined;
  if (cb && (ev.type === 'stdout' || ev.type === 'stderr')) await cb(ev.data);
}

function find(processes: ProcessInfo[], pid: number, sandboxId: string): ProcessInfo {
  const p = processes.find((x) => x.pid === pid);
  if (!p) throw new NotFoundError(`process ${pid} not found in sandbox ${sandboxId}`, { code: 'not_found', status: 404 });
  return p;
}

/**
 * A process started through the API, by its API `pid` (not the kernel's).
 *
 * `for await (const ev of handle)` yields its {@link ExecEvent}s from its start (replayed), then live
 * until it exits; any number of handles, in any client, may do so at once.
 */
export class CommandHandle implements AsyncIterable<ExecEvent> {
  /** The sandbox it runs in. */
  readonly sandboxId: string;
  /** The API process id; `sbx.commands.connect(pid)` finds it again. */
  readonly pid: number;
  private readonly client: Client;
  private readonly onStdout: OutputCallback | undefined;
  private readonly onStderr: OutputCallback | undefined;

  /**
   * @param client The client to talk through.
   * @param sandboxId The sandbox.
   * @param pid The API process id.
   * @param callbacks Default `onStdout`/`onStderr` of {@link CommandHandle.wait}.
   */
  constructor(
    client: Client,
    sandboxId: string,
    pid: number,
    callbacks: { onStdout?: OutputCallback | undefined; onStderr?: OutputCallback | undefined } = {},
  ) {
    this.client = client;
    this.sandboxId = sandboxId;
    this.pid = pid;
    this.onStdout = callbacks.onStdout;
    this.onStderr = callbacks.onStderr;
  }

  private path(what: string): string {
    return `/v1/sandboxes/${seg(this.sandboxId)}/processes/${this.pid}/${what}`;
  }

  /** The process's events from its start (replayed), then live until it exits. */
  async *events(): AsyncGenerator<ExecEvent> {
    const response = await this.client.request('GET', this.path('logs'), { wait: true, headers: { Accept: NDJSON } });
    for await (const d of ndjsonLines(response, this.client.url)) yield execEvent(d);
  }

  /** The same as {@link CommandHandle.events}. */
  [Symbol.asyncIterator](): AsyncIterator<ExecEvent> {
    return this.events();
  }

  /** Only the output chunks of {@link CommandHandle.events}, stdout and stderr in the order written. */
  async *output(): AsyncGenerator<OutputEvent> {
    for await (const ev of this.events()) if (ev.type === 'stdout' || ev.type === 'stderr') yield ev;
  }

  /**
   * Waits until the process ends and answers its result. The callbacks (or those given to `run`)
   * receive its output from its start while waiting.
   *
   * @param callbacks `onStdout`, `onStderr`.
   */
  async wait(callbacks: { onStdout?: OutputCallback; onStderr?: OutputCallback } = {}): Promise<CommandResult> {
    const onStdout = callbacks.onStdout ?? this.onStdout;
    const onStderr = callbacks.onStderr ?? this.onStderr;
    if (onStdout || onStderr) {
      for await (const ev of this.events()) await dispatch(ev, onStdout, onStderr);
    }
    for (;;) {
      try {
        const d = await this.client.callObject('POST', this.path('wait'), { wait: true });
        return commandResultFromJson(d, this.pid);
      } catch (e) {
        // fetch gives up on an answer's headers after 300 s; waiting is idempotent, so ask again.
        if (e instanceof TimeoutError && /HEADERS_TIMEOUT/.test(e.message)) continue;
        throw e;
      }
    }
  }

  /**
   * Sends `signal` (default 9, SIGKILL) to the process group; it then ends `signaled`.
   *
   * @throws {ConflictError} if it has already exited.
   */
  async kill(signal?: number): Promise<void> {
    await this.client.call('POST', this.path('kill'), signal === undefined ? {} : { json: { signal } });
  }

  /**
   * Writes UTF-8 `data` to the process's stdin; `eof: true` closes stdin after it.
   *
   * @throws {ConflictError} once it has exited or its stdin is closed.
   */
  async sendStdin(data: string | Uint8Array, options: { eof?: boolean } = {}): Promise<void> {
    const text = data instanceof Uint8Array ? new TextDecoder().decode(data) : data;
    await this.client.call('POST', this.path('stdin'), { json: { data: text, eof: options.eof ?? false } });
  }

  /** Closes the process's stdin (it reads end of file). */
  async closeStdin(): Promise<void> {
    await this.sendStdin('', { eof: true });
  }

  /** The process as the server lists it (running, status, exit code, argv, tag). */
  async info(): Promise<ProcessInfo> {
    const d = await this.client.callObject('GET', `/v1/sandboxes/${seg(this.sandboxId)}/processes`);
    return find((d.processes as Json[]).map(processInfoFromJson), this.pid, this.sandboxId);
  }
}

/** `sbx.commands`: run commands in the sandbox and find its processes. */
export class Commands {
  private readonly client: Client;
  private readonly sandboxId: string;

  /**
   * @param client The client to talk through.
   * @param sandboxId The sandbox.
   */
  constructor(client: Client, sandboxId: string) {
    this.client = client;
    this.sandboxId = sandboxId;
  }

  /**
   * Runs a command in the background and answers its handle at once.
   *
   * @param cmd A string runs under `/bin/sh -c`, an array as argv.
   * @param options See {@link RunOptions}; `background: true`.
   */
  run(cmd: Command, options: RunOptions & { background: true }): Promise<CommandHandle>;
  /**
   * Runs a command and answers its result once it has ended. With `onStdout`/`onStderr` its output
   * streams to them as it comes. A non-zero exit is not an error: read `exitCode` / `status`.
   *
   * @param cmd A string runs under `/bin/sh -c`, an array as argv (looked up in `PATH`).
   * @param options Working directory, environment, user, stdin, timeout, callbacks, cap.
   */
  run(cmd: Command, options?: RunOptions & { background?: false | undefined }): Promise<CommandResult>;
  /**
   * Runs a command: in the background (a {@link CommandHandle}) or to its end (a {@link CommandResult}).
   *
   * @param cmd A string runs under `/bin/sh -c`, an array as argv.
   * @param options See {@link RunOptions}.
   */
  run(cmd: Command, options?: RunOptions): Promise<CommandResult | CommandHandle>;
  async run(cmd: Command, options: RunOptions = {}): Promise<CommandResult | CommandHandle> {
    const body = execBody(cmd, options);
    const path = `/v1/sandboxes/${seg(this.sandboxId)}/exec`;
    const callbacks = { onStdout: options.onStdout, onStderr: options.onStderr };
    if (options.background) {
      const d = await this.client.callObject('POST', path, { json: body });
      return new CommandHandle(this.client, this.sandboxId, Number(d.pid), callbacks);
    }
    if (!options.onStdout && !options.onStderr) {
      return commandResultFromJson(await this.client.callObject('POST', path, { json: body, wait: true }));
    }
    const collected = new Collector();
    const response = await this.client.request('POST', path, { json: body, wait: true, headers: { Accept: NDJSON } });
    for await (const d of ndjsonLines(response, this.client.url)) {
      const ev = execEvent(d);
      collected.feed(ev);
      await dispatch(ev, options.onStdout, options.onStderr);
    }
    if (collected.needsWait()) {
      return new CommandHandle(this.client, this.sandboxId, collected.pid as number).wait();
    }
    return collected.result();
  }

  /**
   * Reattaches to process `pid` (running or ended), from this or any client of the same tenant.
   *
   * @param pid The API process id.
   * @param callbacks Default callbacks of the handle's `wait`.
   * @throws {NotFoundError} when the sandbox does not know it.
   */
  async connect(
    pid: number,
    callbacks: { onStdout?: OutputCallback; onStderr?: OutputCallback } = {},
  ): Promise<CommandHandle> {
    find(await this.list(), pid, this.sandboxId);
    return new CommandHandle(this.client, this.sandboxId, pid, callbacks);
  }

  /**
   * The processes the sandbox remembers, oldest first.
   *
   * @param options `tag`: only the processes started with it.
   */
  async list(options: { tag?: string } = {}): Promise<ProcessInfo[]> {
    const d = await this.client.callObject('GET', `/v1/sandboxes/${seg(this.sandboxId)}/processes`, {
      query: { tag: options.tag },
    });
    return (d.processes as Json[]).map(processInfoFromJson);
  }

  /**
   * Sends `signal` (default SIGKILL) to process `pid`'s group.
   *
   * @param pid The API process id.
   * @param signal 1–64.
   */
  async kill(pid: number, signal?: number): Promise<void> {
    await new CommandHandle(this.client, this.sandboxId, pid).kill(signal);
  }

  /**
   * Writes `data` to process `pid`'s stdin (`eof: true` closes it after).
   *
   * @param pid The API process id.
   * @param data UTF-8 text or bytes.
   * @param options `eof`.
   */
  async sendStdin(pid: number, data: string | Uint8Array, options: { eof?: boolean } = {}): Promise<void> {
    await new CommandHandle(this.client, this.sandboxId, pid).sendStdin(data, options);
  }
}
