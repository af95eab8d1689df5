// The TypeScript SDK suite's harness (a port of sdk/python/tests/conftest.py): one real `sandlot serve`
// per test file, tenant keys made with its admin key over plain fetch (not through the SDK under test),
// a root file system of Debian's static busybox for image tests, and Debian's docker-registry on
// loopback for pulls.
//
// The server is started by tests/support/sandlot-server.mjs, the Node suites' one launcher (SANDLOT_BIN
// names the binary; its btrfs layers volume serves snapshots, forks and persistent sandboxes;
// SDK_TS_KEEP_LOGS=1 keeps its log).
//
// It lives outside test/ because `node --test test/` runs every .js file under test/ as a test file.

import { execFileSync, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import zlib from 'node:zlib';

import { REPO, SandlotServer, freePort } from '../../../tests/support/sandlot-server.mjs';

export { REPO, freePort };
export const SDK = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const MIB = 1 << 20;

/**
 * A running `sandlot serve` (tests/support/sandlot-server.mjs, the Node suites' one launcher) that may
 * pull from the suite's own registry (`Registry`) on `registryPort`, plain HTTP.
 */
export class Server extends SandlotServer {
  static async start() {
    const registryPort = await freePort();
    const args = ['--insecure-registry', `127.0.0.1:${registryPort}`];
    const s = await super.start({ name: 'sdk-ts', args, keepLogs: 'SDK_TS_KEEP_LOGS' });
    s.registryPort = registryPort;
    return s;
  }
}

/** A name no other test uses. */
export function unique(prefix) {
  return `${prefix}-${randomBytes(5).toString('hex')}`;
}

/** A fresh local temporary directory; `cleanup()` removes it. */
export function tempDir(prefix = 'sandlot-sdk-ts-tmp-') {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

/**
 * A root file system tar: Debian's static busybox as /bin/busybox and /bin/sh (and cat, echo), a passwd
 * naming root. Small, and enough for a Dockerfile's RUN. Made with the system's tar, not the SDK's.
 */
export function busyboxRootfs() {
  const dir = tempDir('sandlot-sdk-ts-rootfs-');
  try {
    for (const d of ['bin', 'etc', 'root', 'tmp']) fs.mkdirSync(path.join(dir, d));
    fs.copyFileSync('/bin/busybox', path.join(dir, 'bin/busybox'));
    fs.chmodSync(path.join(dir, 'bin/busybox'), 0o755);
    for (const l of ['sh', 'cat', 'echo']) fs.symlinkSync('busybox', path.join(dir, 'bin', l));
    fs.writeFileSync(path.join(dir, 'etc/passwd'), 'root:x:0:0:root:/root:/bin/sh\n', { mode: 0o644 });
    return new Uint8Array(
      execFileSync('tar', ['-C', dir, '--owner=0', '--group=0', '--numeric-owner', '--mtime=@1700000000', '-cf', '-', 'bin', 'etc', 'root', 'tmp'], {
        maxBuffer: 64 * MIB,
      }),
    );
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** A tar of `files` (name → text), made with the system's tar. */
export function tarOf(files) {
  const dir = tempDir('sandlot-sdk-ts-ctx-');
  try {
    for (const [name, text] of Object.entries(files)) {
      fs.mkdirSync(path.dirname(path.join(dir, name)), { recursive: true });
      fs.writeFileSync(path.join(dir, name), text);
    }
    return new Uint8Array(execFileSync('tar', ['-C', dir, '-cf', '-', ...Object.keys(files)]));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const sha256 = (b) => 'sha256:' + createHash('sha256').update(b).digest('hex');

const REGISTRY_BINARY = '/usr/bin/docker-registry';

/**
 * Debian's `docker-registry` (the CNCF distribution registry) on loopback, plain HTTP, with one image
 * pushed through its API: `sdk/busybox:1`, the busybox root file system as one gzip layer.
 */
export class Registry {
  static async start(port) {
    if (!fs.existsSync(REGISTRY_BINARY)) {
      throw new Error(`${REGISTRY_BINARY} is missing: apt-get install docker-registry (scripts/deps.sh does)`);
    }
    const r = new Registry(port);
    try {
      await r.#waitReady();
      await r.#push();
    } catch (e) {
      await r.close();
      throw e;
    }
    return r;
  }

  constructor(port) {
    this.dir = tempDir('sandlot-sdk-ts-registry-');
    this.base = `http://127.0.0.1:${port}`;
    this.logPath = path.join(this.dir, 'registry.log');
    const config = path.join(this.dir, 'config.yml');
    fs.writeFileSync(
      config,
      `version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: ${this.dir}/data\n` +
        `http:\n  addr: 127.0.0.1:${port}\n  secret: sandlot-sdk-test\n`,
    );
    const log = fs.openSync(this.logPath, 'w');
    this.proc = spawn(REGISTRY_BINARY, ['serve', config], { stdio: ['ignore', log, log] });
    fs.closeSync(log);
    this.exited = new Promise((resolve) => this.proc.once('exit', resolve));
    this.ref = `127.0.0.1:${port}/sdk/busybox:1`;
  }

  async #waitReady() {
    const deadline = Date.now() + 20_000;
    for (;;) {
      try {
        const res = await fetch(`${this.base}/v2/`);
        await res.arrayBuffer();
        if (res.ok) return;
      } catch {
        // not listening yet
      }
      if (this.proc.exitCode !== null || Date.now() > deadline) {
        throw new Error(`docker-registry did not start:\n${fs.readFileSync(this.logPath, 'utf8').slice(-4000)}`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  async #request(method, url, body, type = 'application/octet-stream') {
    const res = await fetch(url.startsWith('http') ? url : this.base + url, {
      method,
      body,
      headers: { 'Content-Type': type },
    });
    await res.arrayBuffer();
    if (!res.ok) throw new Error(`registry ${method} ${url}: ${res.status}`);
    return res.headers;
  }

  async #push() {
    const layerTar = busyboxRootfs();
    const layer = zlib.gzipSync(layerTar);
    const config = Buffer.from(
      JSON.stringify({
        architecture: 'amd64',
        os: 'linux',
        config: { Env: ['PATH=/bin', 'FROM_IMAGE=yes'], WorkingDir: '/etc', Cmd: ['sh'] },
        rootfs: { type: 'layers', diff_ids: [sha256(layerTar)] },
      }),
    );
    for (const blob of [layer, config]) {
      // A monolithic upload: start a session, then PUT the whole blob with its digest.
      const location = (await this.#request('POST', '/v2/sdk/busybox/blobs/uploads/', new Uint8Array())).get('location');
      const sep = location.includes('?') ? '&' : '?';
      await this.#request('PUT', `${location}${sep}digest=${sha256(blob)}`, blob);
    }
    const manifest = Buffer.from(
      JSON.stringify({
        schemaVersion: 2,
        mediaType: 'application/vnd.oci.image.manifest.v1+json',
        config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: sha256(config), size: config.length },
        layers: [{ mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip', digest: sha256(layer), size: layer.length }],
      }),
    );
    await this.#request('PUT', '/v2/sdk/busybox/manifests/1', manifest, 'application/vnd.oci.image.manifest.v1+json');
    this.manifestDigest = sha256(manifest);
    this.layerDigest = sha256(layer);
  }

  /** The paths of the GET requests the registry logged, in order. */
  get requests() {
    const paths = [];
    for (const line of fs.readFileSync(this.logPath, 'utf8').split('\n')) {
      const at = line.indexOf('"GET ');
      if (at >= 0) paths.push(line.slice(at + 5).split(' ', 1)[0]);
    }
    return paths;
  }

  async close() {
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      this.proc.kill('SIGTERM');
      await this.exited;
    }
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}
