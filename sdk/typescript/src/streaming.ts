/**
 * NDJSON streams of the API (`Accept: application/x-ndjson`): exec and logs events, and the progress
 * lines of pulls, imports and builds, read as async iterators. An `error` line becomes the matching
 * {@link SandlotError}.
 *
 * @module
 */

import { type ErrorDetail, ProtocolError, type SandlotError, errorFromDetail } from './errors.js';
import { transportError } from './client.js';
import type { ExecEvent, ExitStatus, Json } from './models.js';

/** The media type that switches exec, pull, import and build answers to NDJSON. */
export const NDJSON = 'application/x-ndjson';

/** The byte chunks of a response body as they come; a broken connection is a {@link ProtocolError}. @internal */
export async function* bodyChunks(response: Response, url: string): AsyncGenerator<Uint8Array> {
  const body = response.body;
  if (!body) return;
  const reader = body.getReader();
  let done = false;
  try {
    for (;;) {
      const next = await reader.read().catch((e: unknown) => {
        throw transportError(e, url);
      });
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

/** One NDJSON line as an object, `undefined` for a blank line. @internal */
export function parseLine(line: string): Json | undefined {
  const text = line.trim();
  if (!text) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new ProtocolError(`unreadable stream line from the server: ${JSON.stringify(text.slice(0, 200))}`, { cause: e });
  }
  if (value === null || typeof value !== 'object' || typeof (value as Json).type !== 'string') {
    throw new ProtocolError(`stream line without a type: ${JSON.stringify(text.slice(0, 200))}`);
  }
  return value as Json;
}

/**
 * The objects of a streamed NDJSON answer, as they come. Leaving the loop early closes the stream.
 * @internal
 */
export async function* ndjsonLines(response: Response, url: string): AsyncGenerator<Json> {
  const decoder = new TextDecoder();
  let pending = '';
  for await (const chunk of bodyChunks(response, url)) {
    pending += decoder.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = pending.indexOf('\n')) >= 0) {
      const d = parseLine(pending.slice(0, nl));
      pending = pending.slice(nl + 1);
      if (d) yield d;
    }
  }
  pending += decoder.decode();
  const last = parseLine(pending);
  if (last) yield last;
}

/** The typed event of an exec or logs line; an `error` line is thrown. @internal */
export function execEvent(d: Json): ExecEvent {
  switch (d.type) {
    case 'started':
      return { type: 'started', pid: Number(d.pid) };
    case 'stdout':
    case 'stderr':
      return { type: d.type, data: typeof d.data === 'string' ? d.data : '' };
    case 'truncated':
      return { type: 'truncated', stream: typeof d.stream === 'string' ? d.stream : '' };
    case 'exited':
      return {
        type: 'exited',
        status: String(d.status) as ExitStatus,
        exitCode: Number(d.exit_code),
        signal: typeof d.signal === 'number' ? d.signal : undefined,
        stdoutBytes: Number(d.stdout_bytes ?? 0),
        stderrBytes: Number(d.stderr_bytes ?? 0),
        truncated: d.truncated === true,
        durationMs: Number(d.duration_ms ?? 0),
      };
    case 'error':
      // A server-side break mid-stream: the process state is unknown.
      throw errorFromDetail(d as ErrorDetail);
    default:
      throw new ProtocolError(`unknown exec event type ${JSON.stringify(d.type)}`);
  }
}

/** The error of a pull, import or build `error` line (`{"error": {...}, "line"?, "tail"?}`). @internal */
export function progressError(d: Json): SandlotError {
  let detail = d.error as ErrorDetail | undefined;
  if (!detail || typeof detail !== 'object') detail = { code: 'internal', message: String(detail) };
  const line = typeof d.line === 'number' ? d.line : undefined;
  const tail = typeof d.tail === 'string' ? d.tail : undefined;
  let err = errorFromDetail(detail, undefined, { line, tail });
  if (tail) {
    // The failed RUN's output is what says why; keep it in the text a stack trace shows.
    const Cls = err.constructor as new (m: string, o: object) => SandlotError;
    err = new Cls(`${err.message}\n--- last output ---\n${tail}`, {
      code: err.code,
      status: err.status,
      retryable: err.retryable,
      line,
      tail,
    });
  }
  return err;
}
