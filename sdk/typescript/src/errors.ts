/**
 * Errors of the SDK, one class per error code of the sandlot API (docs/API.md, "Errors").
 *
 * Every error the server answers is a {@link SandlotError} subclass chosen by its stable `code`; the
 * HTTP `status`, the server's `message` and its `retryable` hint are kept. Codes that share a meaning
 * share a base class, so `instanceof NotFoundError` also holds for a {@link FileNotFoundError}, and
 * `instanceof ConflictError` for {@link AlreadyExistsError}, {@link WrongFileKindError} and
 * {@link DirectoryNotEmptyError}. A code this SDK does not know yet maps by its HTTP status. Transport
 * failures have classes of their own ({@link ConnectError}, {@link TimeoutError}), so "no server" reads
 * differently from "the server said no".
 *
 * @module
 */

/** What an error carries besides its message. */
export interface SandlotErrorOptions {
  /** The server's stable error code (`not_found`, `conflict`, …). */
  code?: string | undefined;
  /** The HTTP status of the answer. */
  status?: number | undefined;
  /** The server's retry hint; the class's default when absent. */
  retryable?: boolean | undefined;
  /** For a failed image build: the Dockerfile line of the failed step. */
  line?: number | undefined;
  /** For a failed image build: the last output of the failed `RUN`. */
  tail?: string | undefined;
  /** The lower error that caused this one. */
  cause?: unknown;
}

/**
 * Base of every error the SDK throws.
 *
 * `message` is what went wrong and what to do (the server's own words when it answered); `code` the
 * server's error code (`undefined` for local failures); `status` the HTTP status (`undefined` when there
 * was none: a transport failure, or an error reported inside a stream after its `200`); `retryable`
 * whether the same request may succeed later unchanged (decided by the server).
 */
export class SandlotError extends Error {
  /** Whether errors of this class may be retried when the server gave no hint. */
  static readonly defaultRetryable: boolean = false;
  /** The server's stable error code, `undefined` for failures found by the SDK itself. */
  readonly code: string | undefined;
  /** The HTTP status of the answer, `undefined` when there was none. */
  readonly status: number | undefined;
  /** Whether the same request may succeed later unchanged. */
  readonly retryable: boolean;
  /** For a failed image build: the Dockerfile line of the failed step. */
  readonly line: number | undefined;
  /** For a failed image build: the last output of the failed `RUN`. */
  readonly tail: string | undefined;

  /**
   * @param message What went wrong and what to do.
   * @param options Code, status, retry hint and build details.
   */
  constructor(message: string, options: SandlotErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = options.code;
    this.status = options.status;
    this.retryable = options.retryable ?? (new.target as unknown as typeof SandlotError).defaultRetryable;
    this.line = options.line;
    this.tail = options.tail;
  }
}

/** 400 `invalid_request`: a malformed request or a value out of range; the message names the field. */
export class InvalidRequestError extends SandlotError {}

/** 401 `unauthenticated`: the API key is missing, unknown, expired or revoked. */
export class AuthError extends SandlotError {}

/** 403 `forbidden`: a valid key that may not do this (admin-only routes). */
export class ForbiddenError extends SandlotError {}

/** 403 `permission_denied`: the sandbox user may not access the path (use `user: "root"`). */
export class PermissionDeniedError extends SandlotError {}

/** 403 `registry_denied`: an image registry refused the pull's credentials. */
export class RegistryDeniedError extends SandlotError {}

/** 404 `not_found`: no such sandbox (for this tenant), snapshot, key, process or image. */
export class NotFoundError extends SandlotError {}

/** 404 `file_not_found`: the path does not exist inside the sandbox. */
export class FileNotFoundError extends NotFoundError {}

/** 409 `conflict`: the sandbox's state does not allow this, or the process has already exited. */
export class ConflictError extends SandlotError {}

/** 409 `wrong_file_kind`: a directory where a file is needed, or the reverse. */
export class WrongFileKindError extends ConflictError {}

/** 409 `already_exists`: the destination, sandbox name or snapshot name exists. */
export class AlreadyExistsError extends ConflictError {}

/** 409 `directory_not_empty`: removing a non-empty directory without `recursive: true`. */
export class DirectoryNotEmptyError extends ConflictError {}

/** 413 `too_large`: over an upload, listing or disk limit. */
export class TooLargeError extends SandlotError {}

/** 429 `limit_reached`: a server, sandbox or tenant limit is reached; free something and retry. */
export class LimitReachedError extends SandlotError {
  /** Retryable unless the server says otherwise. */
  static override readonly defaultRetryable: boolean = true;
}

/** 429 `server_full`: the running sandboxes hold the host's capacity; retry when some have ended. */
export class ServerFullError extends LimitReachedError {}

/** 502 `port_unreachable`: nothing answers on the sandbox port (yet). */
export class PortUnreachableError extends SandlotError {
  /** Retryable unless the server says otherwise. */
  static override readonly defaultRetryable: boolean = true;
}

/** 502 `registry_unavailable`: an image registry could not be reached or sent bad data. */
export class RegistryUnavailableError extends SandlotError {
  /** Retryable unless the server says otherwise. */
  static override readonly defaultRetryable: boolean = true;
}

/** 500 `internal`: a bug or host problem on the server (see its log). */
export class InternalError extends SandlotError {}

/** 503 `unavailable`: the server's connection caps are reached; retry with backoff. */
export class UnavailableError extends SandlotError {
  /** Retryable unless the server says otherwise. */
  static override readonly defaultRetryable: boolean = true;
}

/** The server could not be reached (nothing listening at the URL, refused, name not resolved). */
export class ConnectError extends SandlotError {
  /** Retryable unless the server says otherwise. */
  static override readonly defaultRetryable: boolean = true;
}

/** The HTTP request to the server timed out (the client's timeout, not a command's `timeoutS`). */
export class TimeoutError extends SandlotError {
  /** Retryable unless the server says otherwise. */
  static override readonly defaultRetryable: boolean = true;
}

/** The server answered something this SDK does not understand, or a stream broke off. */
export class ProtocolError extends SandlotError {}

/** The client is set up wrong (no API key, an unusable URL). */
export class ConfigError extends SandlotError {}

type ErrorClass = new (message: string, options?: SandlotErrorOptions) => SandlotError;

const BY_CODE: Record<string, ErrorClass> = {
  invalid_request: InvalidRequestError,
  unauthenticated: AuthError,
  forbidden: ForbiddenError,
  permission_denied: PermissionDeniedError,
  registry_denied: RegistryDeniedError,
  not_found: NotFoundError,
  file_not_found: FileNotFoundError,
  conflict: ConflictError,
  wrong_file_kind: WrongFileKindError,
  already_exists: AlreadyExistsError,
  directory_not_empty: DirectoryNotEmptyError,
  too_large: TooLargeError,
  limit_reached: LimitReachedError,
  server_full: ServerFullError,
  port_unreachable: PortUnreachableError,
  registry_unavailable: RegistryUnavailableError,
  internal: InternalError,
  unavailable: UnavailableError,
};

const BY_STATUS: Record<number, ErrorClass> = {
  400: InvalidRequestError,
  401: AuthError,
  403: ForbiddenError,
  404: NotFoundError,
  405: InvalidRequestError,
  409: ConflictError,
  413: TooLargeError,
  429: LimitReachedError,
  500: InternalError,
  502: PortUnreachableError,
  503: UnavailableError,
};

/** The API's error object: `{"code", "message", "retryable"}`. */
export interface ErrorDetail {
  /** Stable code. */
  code?: string;
  /** What went wrong and what to do. */
  message?: string;
  /** Whether the same request may succeed later. */
  retryable?: boolean;
}

/**
 * The error for an API error object, chosen by its code (else by `status`).
 *
 * @param detail The `error` object of an answer or a stream line.
 * @param status The HTTP status, when the error came as one.
 * @param extra A failed build's `line` and `tail`.
 */
export function errorFromDetail(
  detail: ErrorDetail,
  status?: number,
  extra: { line?: number | undefined; tail?: string | undefined } = {},
): SandlotError {
  const code = typeof detail.code === 'string' ? detail.code : '';
  const message = (typeof detail.message === 'string' && detail.message) || `error ${code || status}`;
  const cls = BY_CODE[code] ?? (status !== undefined ? BY_STATUS[status] : undefined) ?? SandlotError;
  return new cls(message, {
    code: code || undefined,
    status,
    retryable: typeof detail.retryable === 'boolean' ? detail.retryable : undefined,
    line: extra.line,
    tail: extra.tail,
  });
}

/**
 * The error for a non-2xx answer: its JSON error body, else the status and the start of the body.
 *
 * @param status The HTTP status.
 * @param body The answer's body as text.
 */
export function errorFromResponse(status: number, body: string): SandlotError {
  let detail: unknown;
  try {
    detail = (JSON.parse(body) as { error?: unknown }).error;
  } catch {
    detail = undefined;
  }
  if (detail === null || typeof detail !== 'object' || Array.isArray(detail)) {
    const text = body.slice(0, 300).trim();
    const cls = BY_STATUS[status] ?? SandlotError;
    return new cls(text ? `HTTP ${status}: ${text}` : `HTTP ${status} with no error body`, { status });
  }
  return errorFromDetail(detail as ErrorDetail, status);
}
