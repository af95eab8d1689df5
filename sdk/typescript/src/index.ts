/**
 * TypeScript SDK for sandlot, the self-hosted sandbox server.
 *
 * ```ts
 * import { Sandbox } from 'sandlot';                  // SANDLOT_URL and SANDLOT_API_KEY set
 * await using sbx = await Sandbox.create();           // deleted when the block ends
 * console.log((await sbx.commands.run('echo hello')).stdout);
 * ```
 *
 * {@link Sandbox} is a sandbox; {@link Client} holds the server's URL and key (and `client.images`).
 * Errors are {@link SandlotError} subclasses named after the API's error codes.
 *
 * @packageDocumentation
 */

export { Client, DEFAULT_URL, DEFAULT_TIMEOUT_MS, ENV_API_KEY, ENV_URL, resolveConfig } from './client.js';
export type { BodyData, ClientOptions, Query, RequestOptions } from './client.js';
export { CommandHandle, Commands } from './commands.js';
export type { Command, OutputCallback, RunOptions } from './commands.js';
export {
  AlreadyExistsError,
  AuthError,
  ConfigError,
  ConflictError,
  ConnectError,
  DirectoryNotEmptyError,
  FileNotFoundError,
  ForbiddenError,
  InternalError,
  InvalidRequestError,
  LimitReachedError,
  NotFoundError,
  PermissionDeniedError,
  PortUnreachableError,
  ProtocolError,
  RegistryDeniedError,
  RegistryUnavailableError,
  SandlotError,
  ServerFullError,
  TimeoutError,
  TooLargeError,
  UnavailableError,
  WrongFileKindError,
  errorFromDetail,
  errorFromResponse,
} from './errors.js';
export type { ErrorDetail, SandlotErrorOptions } from './errors.js';
export { Files } from './files.js';
export type { ReadFormat, UserOption } from './files.js';
export { Images } from './images.js';
export type { Archive, BuildOptions, ImportOptions, LogCallback, ProgressCallback, PullOptions } from './images.js';
export type {
  AuditEntry,
  CommandResult,
  ExecEvent,
  ExitStatus,
  ExitedEvent,
  FileKind,
  FileStat,
  Health,
  ImageConfig,
  ImageInfo,
  ImageLayer,
  Json,
  KeyCreated,
  Limits,
  NetworkInfo,
  NetworkMode,
  NetworkPolicy,
  OutputEvent,
  PortInfo,
  ProcessInfo,
  ProgressEvent,
  SandboxInfo,
  SandboxState,
  SnapshotInfo,
  StartedEvent,
  TimeoutAction,
  TruncatedEvent,
  User,
  WriteResult,
} from './models.js';
export { Sandbox } from './sandbox.js';
export type { ConnectionOptions, CreateOptions } from './sandbox.js';
export { NDJSON } from './streaming.js';

/** This package's version. */
export const VERSION = '0.1.0';
