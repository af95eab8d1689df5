// The one JavaScript launcher of a real `sandlot serve` for the Node suites (sdk/typescript/test,
// tests/e2b-node, tests/ui), as tests/support/sandlot_server.py is the Python suites' one.
//
// SANDLOT_BIN names the binary (default: target/debug/sandlot of this checkout). The server listens on
// 127.0.0.1 only (`--test-loopback-only`) with a 16 GiB btrfs layers volume; its state is a temporary
// directory removed at the end, and so is its log unless the suite's keep-logs variable (or
// SANDLOT_KEEP_LOGS) is set. On a pure cgroup v2 host the daemon gets a cgroup of its own beside this
// process's (a daemon refuses to share one), removed after it.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** A loopback port nothing listens on right now. */
export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

// On a pure cgroup v2 host the daemon needs a cgroup of its own (it refuses to share one).
function ownCgroup(name, port) {
  if (!fs.existsSync('/sys/fs/cgroup/cgroup.controllers')) return null;
  const mounts = fs.readFileSync('/proc/self/mountinfo', 'utf8');
  if (mounts.split('\n').some((l) => l.includes(' - cgroup cgroup ') && l.includes('memory'))) return null;
  const own = fs
    .readFileSync('/proc/self/cgroup', 'utf8')
    .split('\n')
    .find((l) => l.startsWith('0::'))
    .slice(3);
  const dir = path.join('/sys/fs/cgroup', path.dirname(own), `sandlot-${name}-test-${process.pid}-${port}`);
  fs.mkdirSync(dir);
  return dir;
}

/** A running `sandlot serve`: its URL, its admin key, tenant keys made on demand, and `stop()`. */
export class SandlotServer {
  /**
   * Starts one. `name` tells the suite's state directory, log and cgroup apart; `args` are added to
   * `serve`'s; `keepLogs` is the suite's environment variable that keeps the daemon's log.
   */
  static async start({ name, args = [], keepLogs = 'SANDLOT_KEEP_LOGS' }) {
    const s = new this();
    s.keepLogs = keepLogs;
    await s.boot(name, args);
    return s;
  }

  async boot(name, extra) {
    const binary = process.env.SANDLOT_BIN || path.join(REPO, 'target/debug/sandlot');
    if (!fs.existsSync(binary)) throw new Error(`no sandlot binary at ${binary}: run cargo build -p sandlot or set SANDLOT_BIN`);
    this.port = await freePort();
    this.url = `http://127.0.0.1:${this.port}`;
    this.state = fs.mkdtempSync(path.join(os.tmpdir(), `sandlot-${name}-`));
    this.logPath = `${this.state}.log`;
    this.cgroup = ownCgroup(name, this.port);
    const args = [
      'serve',
      '--listen', `127.0.0.1:${this.port}`,
      '--state-dir', this.state,
      '--layers-volume-gb', '16',
      '--test-loopback-only',
      ...extra,
    ];
    this.log = fs.openSync(this.logPath, 'w');
    // The shell moves itself into the cgroup, then becomes the daemon.
    const script = this.cgroup ? `echo $$ > ${this.cgroup}/cgroup.procs && exec "$0" "$@"` : 'exec "$0" "$@"';
    this.proc = spawn('/bin/sh', ['-c', script, binary, ...args], { stdio: ['ignore', this.log, this.log] });
    this.exited = new Promise((r) => this.proc.once('exit', r));
    const deadline = Date.now() + 60_000;
    for (;;) {
      if (this.proc.exitCode !== null) {
        const tail = this.logTail();
        await this.stop();
        throw new Error(`sandlot serve exited ${this.proc.exitCode}:\n${tail}`);
      }
      try {
        if ((await fetch(`${this.url}/healthz`)).ok) break;
      } catch {}
      if (Date.now() > deadline) {
        const tail = this.logTail();
        await this.stop();
        throw new Error(`sandlot serve did not answer in 60 s:\n${tail}`);
      }
      await sleep(100);
    }
    this.adminKey = fs.readFileSync(path.join(this.state, 'admin.key'), 'utf8').trim();
  }

  /** The end of the daemon's log. */
  logTail(size = 4000) {
    try {
      return fs.readFileSync(this.logPath, 'utf8').slice(-size);
    } catch {
      return '';
    }
  }

  /** A new API key of `tenant`, made with the admin key over plain HTTP (not through an SDK under test). */
  async tenantKey(tenant) {
    const r = await fetch(`${this.url}/v1/keys`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${this.adminKey}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ tenant }),
    });
    if (r.status !== 201) throw new Error(`POST /v1/keys answered ${r.status}: ${await r.text()}`);
    return (await r.json()).key;
  }

  /** Stops the daemon (SIGTERM, then SIGKILL after a minute) and removes what it left. */
  async stop() {
    if (this.proc && this.proc.exitCode === null && this.proc.signalCode === null) {
      this.proc.kill('SIGTERM');
      let timer;
      await Promise.race([this.exited, new Promise((r) => (timer = setTimeout(r, 60_000)))]);
      // A pending timer would hold the test runner open until it fires.
      clearTimeout(timer);
      if (this.proc.exitCode === null && this.proc.signalCode === null) {
        this.proc.kill('SIGKILL');
        await this.exited;
      }
    }
    if (this.log !== undefined) {
      fs.closeSync(this.log);
      this.log = undefined;
    }
    fs.rmSync(this.state, { recursive: true, force: true });
    if (process.env.KEEP_LOG) fs.copyFileSync(this.logPath, process.env.KEEP_LOG);
    if (!process.env[this.keepLogs] && !process.env.SANDLOT_KEEP_LOGS) fs.rmSync(this.logPath, { force: true });
    if (this.cgroup) {
      for (let i = 0; i < 50; i++) {
        try {
          fs.rmdirSync(this.cgroup);
          break;
        } catch {
          await sleep(100);
        }
      }
      this.cgroup = null;
    }
  }
}
