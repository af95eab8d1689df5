/**
 * What the API answers, as typed, camelCase objects (the wire types of `crates/sandlot-api`), with the
 * functions that read the server's snake_case JSON. Fields a newer server adds are ignored; fields an
 * older one leaves out take their documented defaults.
 *
 * @module
 */

/** Identities inside a sandbox: `user` (uid 1000, home `/home/user`) or `root` (of the sandbox). */
export type User = 'user' | 'root';

/** Egress modes: `deny` (loopback only, the default), `allow-all`, `allowlist`. */
export type NetworkMode = 'deny' | 'allow-all' | 'allowlist';

/** Lifecycle states of a sandbox. */
export type SandboxState = 'creating' | 'running' | 'paused' | 'stopped' | 'failed' | 'deleted';

/** How a command ended. */
export type ExitStatus = 'exited' | 'signaled' | 'timeout' | 'oom' | 'killed';

/** What a sandbox's expiry does. */
export type TimeoutAction = 'delete' | 'stop' | 'pause';

/** A JSON object as the server sent it. */
export type Json = Record<string, unknown>;

/** Resource limits in force for a sandbox (defaults filled in by the server). */
export interface Limits {
  /** CPU limit in cores. */
  cpu: number;
  /** Memory limit in MiB. */
  memoryMb: number;
  /** Most processes and threads at once. */
  pids: number;
  /** Lifetime in seconds. */
  timeoutS: number;
  /** Writable-layer cap in MiB; `undefined` when the server runs without disk limits. */
  diskMb: number | undefined;
}

/**
 * An egress policy to set (`Sandbox.create({network})`, `sbx.setNetwork(policy)`).
 *
 * `mode` is `deny` (default: loopback only), `allow-all` (all but the always-denied ranges and `deny`)
 * or `allowlist` (only `allow`: names, `*.suffix` wildcards, CIDRs). `rules` maps a host to headers the
 * server's proxy injects into its requests (credential brokering: the sandbox never sees the values,
 * and reading the policy back shows header names only).
 */
export interface NetworkPolicy {
  /** Egress mode; default `deny`. */
  mode?: NetworkMode;
  /** Names, `*.suffix` wildcards and CIDRs that may be reached. */
  allow?: string[];
  /** Names and CIDRs that may never be reached (wins over `allow`). */
  deny?: string[];
  /** Host to the headers injected into its requests (`{"api.x.com": {authorization: "Bearer …"}}`). */
  rules?: Record<string, Record<string, string>>;
  /**
   * Inbound: anyone with a port's URL reaches the sandbox's servers without its token (`true`), or
   * not (`false`, the default). Left out of a `setNetwork`: unchanged.
   */
  publicPorts?: boolean;
}

/** A sandbox's egress policy as the server reports it (header values redacted) and its traffic. */
export interface NetworkInfo {
  /** Egress mode. */
  mode: NetworkMode;
  /** What may be reached. */
  allow: string[];
  /** What may never be reached. */
  deny: string[];
  /** Host to the *names* of the headers injected for it. */
  rules: Record<string, string[]>;
  /** Ports answer requests without a token or key. */
  publicPorts: boolean;
  /** Bytes the sandbox sent through the proxy. */
  bytesOut: number;
  /** Bytes the sandbox received through the proxy. */
  bytesIn: number;
}

/** A sandbox as the API reports it (`GET /v1/sandboxes/{id}`). */
export interface SandboxInfo {
  /** Identifier (`sb_…`). */
  id: string;
  /** Lifecycle state. */
  state: SandboxState;
  /** Why it is `failed`, or how it ended, when known. */
  reason: string | undefined;
  /** Image it runs. */
  image: string;
  /** Limits in force. */
  limits: Limits;
  /** Labels given at create. */
  metadata: Record<string, string>;
  /** Creation time, Unix ms. */
  createdAtMs: number;
  /** When its lifetime ends, Unix ms. */
  expiresAtMs: number;
  /** Name, if given. */
  name: string | undefined;
  /** Kept across stop, expiry and server restarts. */
  persistent: boolean;
  /** Commands and file operations resume it when stopped or paused. */
  autoResume: boolean;
  /** Idle timeout in seconds, if any. */
  idleTimeoutS: number | undefined;
  /** What expiry does. */
  onTimeout: TimeoutAction;
  /** Seconds an expiry-paused sandbox waits before it is stopped. */
  stopAfterS: number;
  /** Last API activity or process output, Unix ms. */
  lastActiveAtMs: number;
  /** Snapshot it started from. */
  snapshot: string | undefined;
  /** Egress policy and traffic counters. */
  network: NetworkInfo;
}

/**
 * How a command ended, with its output (head and tail when over the cap).
 *
 * `status` is `exited` (`exitCode` is its code), `signaled` (128 + `signal`), `timeout` (124: its
 * `timeoutS` passed), `oom` (137) or `killed` (137: the sandbox went away). A program that cannot start
 * ends `exited` with 127 or 126 and a `sandlot: …` line on stderr.
 */
export interface CommandResult {
  /** How it ended. */
  status: ExitStatus;
  /** Exit code (128 + signal when a signal ended it, 124 on timeout). */
  exitCode: number;
  /** The signal that ended it, if one did. */
  signal: number | undefined;
  /** Standard output (UTF-8; head + marker + tail when truncated). */
  stdout: string;
  /** Standard error, likewise. */
  stderr: string;
  /** Bytes written to stdout in all (more than `stdout` holds when truncated). */
  stdoutBytes: number;
  /** Bytes written to stderr in all. */
  stderrBytes: number;
  /** Whether either stream passed the output cap and lost its middle. */
  truncated: boolean;
  /** Run time in ms. */
  durationMs: number;
  /** The API process id, when known (streamed and background commands). */
  pid: number | undefined;
  /** True when it exited with code 0. */
  ok: boolean;
}

/** Stream event: the process runs under API process id `pid`. */
export interface StartedEvent {
  /** Discriminant. */
  type: 'started';
  /** The API process id. */
  pid: number;
}

/** Stream event: a chunk of output (UTF-8 text, split on character boundaries). */
export interface OutputEvent {
  /** Which stream. */
  type: 'stdout' | 'stderr';
  /** The text. */
  data: string;
}

/**
 * Stream event: `stream` passed its cap (the tail follows after exit), or `events`: this reader fell
 * behind and missed events.
 */
export interface TruncatedEvent {
  /** Discriminant. */
  type: 'truncated';
  /** `stdout`, `stderr` or `events`. */
  stream: string;
}

/** Stream event, always the last: how the process ended (counts, no output text). */
export interface ExitedEvent {
  /** Discriminant. */
  type: 'exited';
  /** How it ended. */
  status: ExitStatus;
  /** Exit code. */
  exitCode: number;
  /** The signal that ended it, if one did. */
  signal: number | undefined;
  /** Bytes written to stdout. */
  stdoutBytes: number;
  /** Bytes written to stderr. */
  stderrBytes: number;
  /** Whether output was dropped. */
  truncated: boolean;
  /** Run time in ms. */
  durationMs: number;
}

/** One line of an exec or logs stream. An `error` line is thrown as a {@link SandlotError}. */
export type ExecEvent = StartedEvent | OutputEvent | TruncatedEvent | ExitedEvent;

/** A process started through the API (`GET …/processes`). */
export interface ProcessInfo {
  /** The API process id. */
  pid: number;
  /** Its argv. */
  argv: string[];
  /** Whether it still runs. */
  running: boolean;
  /** Start time, Unix ms. */
  startedAtMs: number;
  /** How it ended, once it has. */
  status: ExitStatus | undefined;
  /** Its exit code, once it has ended. */
  exitCode: number | undefined;
  /** Its tag, if given. */
  tag: string | undefined;
  /** Its working directory. */
  cwd: string;
  /** The variables the request set. */
  env: Record<string, string>;
  /** Whether it runs on a pseudo-terminal. */
  pty: boolean;
  /** For what a finished command left running in its process group: that command's pid. */
  leftBy: number | undefined;
}

/** Kinds of file system entries. */
export type FileKind = 'file' | 'dir' | 'symlink' | 'other';

/** Metadata of one path inside a sandbox (symlinks are not followed). */
export interface FileStat {
  /** Absolute path. */
  path: string;
  /** Last component. */
  name: string;
  /** `file`, `dir`, `symlink` or `other`. */
  kind: FileKind;
  /** Size in bytes. */
  size: number;
  /** Permission bits (`0o644`). */
  mode: number;
  /** Owner inside the sandbox. */
  uid: number;
  /** Modification time, Unix ms. */
  mtimeMs: number;
  /** Target of a symlink. */
  linkTarget: string | undefined;
  /** The entry's `user.e2b.*` extended attributes, prefix stripped (E2B's file metadata); `{}` when none. */
  metadata: Record<string, string>;
  /** True for a directory. */
  isDir: boolean;
  /** True for a regular file. */
  isFile: boolean;
}

/** Answer to a file write or directory upload: where it landed and the bytes received. */
export interface WriteResult {
  /** Absolute path written. */
  path: string;
  /** Bytes received. */
  bytes: number;
  /** Entries unpacked (directory uploads only). */
  entries: number | undefined;
}

/** A read-only snapshot of a sandbox's files; pass `id` or `name` as `snapshot` to create. */
export interface SnapshotInfo {
  /** Identifier (`snap_…`). */
  id: string;
  /** Name, if given. */
  name: string | undefined;
  /** The sandbox it was taken from. */
  sandboxId: string;
  /** That sandbox's image. */
  image: string;
  /** Creation time, Unix ms. */
  createdAtMs: number;
  /** Bytes charged to the tenant's snapshot quota. */
  bytes: number;
}

/** An exposed sandbox port: `url` is its preview URL (the `token` in it admits a browser). */
export interface PortInfo {
  /** The sandbox port. */
  port: number;
  /** Preview URL on an origin of its own. */
  url: string;
  /** Token that admits a browser. */
  token: string;
  /**
   * The same port on the API's own address, for programs that send the API key (Node's `fetch`
   * does not resolve `*.localhost`).
   */
  apiUrl: string;
}

/** One layer of an image: its blob's digest and size. */
export interface ImageLayer {
  /** Blob digest. */
  digest: string;
  /** Blob size. */
  sizeBytes: number;
}

/** How an image runs. */
export interface ImageConfig {
  /** `K=V` variables. */
  env: string[];
  /** Working directory of commands. */
  workingDir: string | undefined;
  /** User commands run as. */
  user: string | undefined;
  /** Entrypoint. */
  entrypoint: string[] | undefined;
  /** Default command. */
  cmd: string[] | undefined;
  /** Labels. */
  labels: Record<string, string>;
  /** Exposed ports (`8000/tcp`). */
  exposedPorts: string[];
}

/** An image sandboxes can boot (`image` of a create). */
export interface ImageInfo {
  /** Name to boot it by. */
  name: string;
  /** `tenant`, `public` or `builtin` (`host`). */
  owner: 'tenant' | 'public' | 'builtin';
  /** Bytes it takes. */
  sizeBytes: number;
  /** When it was stored, Unix ms. */
  createdAtMs: number;
  /** Reference it was pulled or imported as. */
  reference: string | undefined;
  /** Manifest digest. */
  digest: string | undefined;
  /** Config digest. */
  id: string | undefined;
  /** `os/arch`. */
  platform: string | undefined;
  /** Layers, bottom first. */
  layers: ImageLayer[];
  /** How it runs. */
  config: ImageConfig;
}

/**
 * One line of a pull, import or build stream, as sent: `type` (`step`, `output`, `resolved`,
 * `download`, `unpacked`, `done`, …) and the line's other fields (snake_case, as on the wire).
 */
export interface ProgressEvent {
  /** The line's type. */
  type: string;
  /** Its other fields. */
  fields: Json;
}

/** A new API key (`client.createKey`); `key` is the secret, shown once. */
export interface KeyCreated {
  /** Its tenant. */
  tenant: string;
  /** The secret (`sl_…`). */
  key: string;
  /** Its id (not a secret). */
  id: string;
  /** When it expires, Unix ms. */
  expiresAtMs: number | undefined;
}

/** `GET /healthz`: `status` is `ok` when the server answers; `degraded` names host features it lacks. */
export interface Health {
  /** `ok`. */
  status: string;
  /** Host features the server runs without. */
  degraded: string[];
}

/** One audit record. */
export interface AuditEntry {
  /** Sequence number. */
  seq: number;
  /** When, Unix ms. */
  atMs: number;
  /** Tenant. */
  tenant: string;
  /** Sandbox, when any. */
  sandboxId: string | undefined;
  /** What (`sandbox.create`, `exec`, `file.write`, …). */
  action: string;
  /** Details, as the server recorded them. */
  detail: unknown;
}

const str = (v: unknown, d = ''): string => (typeof v === 'string' ? v : d);
const optStr = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);
const num = (v: unknown, d = 0): number => (typeof v === 'number' ? v : d);
const optNum = (v: unknown): number | undefined => (typeof v === 'number' ? v : undefined);
const strArray = (v: unknown): string[] => (Array.isArray(v) ? v.map((x) => String(x)) : []);
const optStrArray = (v: unknown): string[] | undefined => (Array.isArray(v) ? v.map((x) => String(x)) : undefined);
const strMap = (v: unknown): Record<string, string> => {
  const out: Record<string, string> = {};
  if (v && typeof v === 'object') for (const [k, x] of Object.entries(v)) out[k] = String(x);
  return out;
};
const obj = (v: unknown): Json => (v && typeof v === 'object' && !Array.isArray(v) ? (v as Json) : {});

/** Reads a `limits` object. */
export function limitsFromJson(d: Json): Limits {
  return {
    cpu: num(d.cpu),
    memoryMb: num(d.memory_mb),
    pids: num(d.pids),
    timeoutS: num(d.timeout_s),
    diskMb: optNum(d.disk_mb),
  };
}

/** Reads the `network` object of a `SandboxInfo`. */
export function networkInfoFromJson(d: Json): NetworkInfo {
  const rules: Record<string, string[]> = {};
  for (const [host, names] of Object.entries(obj(d.rules))) rules[host] = strArray(names);
  return {
    mode: str(d.mode, 'deny') as NetworkMode,
    allow: strArray(d.allow),
    deny: strArray(d.deny),
    rules,
    publicPorts: d.public_ports === true,
    bytesOut: num(d.bytes_out),
    bytesIn: num(d.bytes_in),
  };
}

/** The API's `network` object for a policy. */
export function networkPolicyToJson(p: NetworkPolicy): Json {
  const rules: Record<string, { headers: Record<string, string> }> = {};
  for (const [host, headers] of Object.entries(p.rules ?? {})) rules[host] = { headers: { ...headers } };
  const json: Json = { mode: p.mode ?? 'deny', allow: [...(p.allow ?? [])], deny: [...(p.deny ?? [])], rules };
  if (p.publicPorts !== undefined) json.public_ports = p.publicPorts;
  return json;
}

/** Reads a `SandboxInfo` object. */
export function sandboxInfoFromJson(d: Json): SandboxInfo {
  return {
    id: str(d.id),
    state: str(d.state) as SandboxState,
    reason: optStr(d.reason),
    image: str(d.image),
    limits: limitsFromJson(obj(d.limits)),
    metadata: strMap(d.metadata),
    createdAtMs: num(d.created_at_ms),
    expiresAtMs: num(d.expires_at_ms),
    name: optStr(d.name),
    persistent: d.persistent === true,
    autoResume: d.auto_resume === true,
    idleTimeoutS: optNum(d.idle_timeout_s),
    onTimeout: str(d.on_timeout, 'delete') as TimeoutAction,
    stopAfterS: num(d.stop_after_s, 600),
    lastActiveAtMs: num(d.last_active_at_ms),
    snapshot: optStr(d.snapshot),
    network: networkInfoFromJson(obj(d.network)),
  };
}

/** Reads an `ExecResult` object. */
export function commandResultFromJson(d: Json, pid?: number): CommandResult {
  const status = str(d.status) as ExitStatus;
  const exitCode = num(d.exit_code);
  return {
    status,
    exitCode,
    signal: optNum(d.signal),
    stdout: str(d.stdout),
    stderr: str(d.stderr),
    stdoutBytes: num(d.stdout_bytes),
    stderrBytes: num(d.stderr_bytes),
    truncated: d.truncated === true,
    durationMs: num(d.duration_ms),
    pid,
    ok: status === 'exited' && exitCode === 0,
  };
}

/** Reads a `ProcessInfo` object. */
export function processInfoFromJson(d: Json): ProcessInfo {
  return {
    pid: num(d.pid),
    argv: strArray(d.argv),
    running: d.running === true,
    startedAtMs: num(d.started_at_ms),
    status: optStr(d.status) as ExitStatus | undefined,
    exitCode: optNum(d.exit_code),
    tag: optStr(d.tag),
    cwd: str(d.cwd),
    env: strMap(d.env),
    pty: d.pty === true,
    leftBy: optNum(d.left_by),
  };
}

/** Reads a `FileStat` object. */
export function fileStatFromJson(d: Json): FileStat {
  const kind = str(d.kind, 'other') as FileKind;
  return {
    path: str(d.path),
    name: str(d.name),
    kind,
    size: num(d.size),
    mode: num(d.mode),
    uid: num(d.uid),
    mtimeMs: num(d.mtime_ms),
    linkTarget: optStr(d.link_target),
    metadata: strMap(d.metadata),
    isDir: kind === 'dir',
    isFile: kind === 'file',
  };
}

/** Reads a `WriteResult` object. */
export function writeResultFromJson(d: Json): WriteResult {
  return { path: str(d.path), bytes: num(d.bytes), entries: optNum(d.entries) };
}

/** Reads a `SnapshotInfo` object. */
export function snapshotInfoFromJson(d: Json): SnapshotInfo {
  return {
    id: str(d.id),
    name: optStr(d.name),
    sandboxId: str(d.sandbox_id),
    image: str(d.image),
    createdAtMs: num(d.created_at_ms),
    bytes: num(d.bytes),
  };
}

/** Reads a `PortInfo` object. */
export function portInfoFromJson(d: Json): PortInfo {
  return { port: num(d.port), url: str(d.url), token: str(d.token), apiUrl: str(d.api_url) };
}

/** Reads an image object. */
export function imageInfoFromJson(d: Json): ImageInfo {
  const c = obj(d.config);
  return {
    name: str(d.name),
    owner: str(d.owner, 'tenant') as ImageInfo['owner'],
    sizeBytes: num(d.size_bytes),
    createdAtMs: num(d.created_at_ms),
    reference: optStr(d.reference),
    digest: optStr(d.digest),
    id: optStr(d.id),
    platform: optStr(d.platform),
    layers: (Array.isArray(d.layers) ? d.layers : []).map((l) => ({
      digest: str(obj(l).digest),
      sizeBytes: num(obj(l).size_bytes),
    })),
    config: {
      env: strArray(c.env),
      workingDir: optStr(c.working_dir),
      user: optStr(c.user),
      entrypoint: optStrArray(c.entrypoint),
      cmd: optStrArray(c.cmd),
      labels: strMap(c.labels),
      exposedPorts: strArray(c.exposed_ports),
    },
  };
}

/** Reads a `KeyCreated` object. */
export function keyCreatedFromJson(d: Json): KeyCreated {
  return { tenant: str(d.tenant), key: str(d.key), id: str(d.id), expiresAtMs: optNum(d.expires_at_ms) };
}

/** Reads an audit record. */
export function auditEntryFromJson(d: Json): AuditEntry {
  return {
    seq: num(d.seq),
    atMs: num(d.at_ms),
    tenant: str(d.tenant),
    sandboxId: optStr(d.sandbox_id),
    action: str(d.action),
    detail: d.detail,
  };
}
