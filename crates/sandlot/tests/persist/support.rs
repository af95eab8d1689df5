//! Shared helpers: deterministic data, hashing, a file tree that can be checked from inside a sandbox,
//! host-side views of sandbox processes, latency figures and polling.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandlot_client::api::{CreateSandbox, SandboxInfo, SandboxState};
use sandlot_client::{Client, Sandbox};

pub const MIB: u64 = 1 << 20;

pub use crate::common::{alive, eventually, expect_error, sh, sh_ok};

/// Host processes whose cgroup path names sandbox `id`, as `(pid, command line)`.
pub fn sandbox_processes(id: &str) -> Vec<(i32, String)> {
    let needle = format!("/{id}");
    let mut found = Vec::new();
    for ent in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = ent.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(cgroup) = fs::read_to_string(format!("/proc/{pid}/cgroup")) else { continue };
        if cgroup.lines().any(|l| l.ends_with(&needle) || l.contains(&format!("{needle}/"))) && alive(pid) {
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ").trim().to_string();
            found.push((pid, cmdline));
        }
    }
    found
}

/// Runs `f` on a thread and waits at most `timeout` for it: `None` if it has not returned by then (the
/// thread is left blocked — for calls that hang on a server bug).
pub fn within<T: Send + 'static>(timeout: Duration, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(timeout).ok()
}

/// Polls sandbox `id` until it is in `state`; returns its info and how long that took. Polling uses
/// `GET`, which does not count as activity.
#[track_caller]
pub fn wait_state(client: &Client, id: &str, state: SandboxState, timeout: Duration) -> (SandboxInfo, Duration) {
    let t0 = Instant::now();
    let mut last = None;
    while t0.elapsed() < timeout {
        let info = client.get(id).unwrap_or_else(|e| panic!("GET {id}: {e:?}"));
        if info.state == state {
            return (info, t0.elapsed());
        }
        last = Some(info);
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("sandbox {id} not {} within {timeout:?}; last seen: {last:?}", state.as_str());
}

/// A persistent sandbox spec.
pub fn persistent(name: Option<&str>) -> CreateSandbox {
    CreateSandbox { persistent: Some(true), name: name.map(str::to_string), ..CreateSandbox::default() }
}

/// Audit actions of sandbox `id`, oldest first.
pub fn audit_actions(client: &Client, id: &str) -> Vec<String> {
    let mut rows = client.audit(Some(id), Some(2000)).expect("reading the audit log");
    rows.reverse();
    rows.into_iter().map(|r| r.action).collect()
}

/// Audit records of sandbox `id` with `action`, oldest first.
pub fn audit_rows(client: &Client, id: &str, action: &str) -> Vec<serde_json::Value> {
    let mut rows = client.audit(Some(id), Some(2000)).expect("reading the audit log");
    rows.reverse();
    rows.into_iter().filter(|r| r.action == action).map(|r| r.detail).collect()
}

/// A deterministic stream of `len` pseudo-random bytes from `seed` (splitmix64), optionally paced.
#[derive(Clone)]
pub struct Gen {
    seed: u64,
    pos: u64,
    len: u64,
    /// Bytes handed out so far, readable from another thread.
    produced: Arc<AtomicU64>,
    pace: Option<(u64, Instant)>,
}

impl Gen {
    pub fn new(seed: u64, len: u64) -> Gen {
        Gen { seed, pos: 0, len, produced: Arc::new(AtomicU64::new(0)), pace: None }
    }

    /// Hands out at most `bytes_per_s` on average (a slow client).
    pub fn paced(mut self, bytes_per_s: u64) -> Gen {
        self.pace = Some((bytes_per_s, Instant::now()));
        self
    }

    /// A counter of the bytes read so far.
    pub fn produced(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.produced)
    }

    fn word(&self, index: u64) -> [u8; 8] {
        let mut z = self.seed.wrapping_add(index.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)).to_le_bytes()
    }
}

impl Read for Gen {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut n = (buf.len() as u64).min(self.len - self.pos) as usize;
        if let Some((rate, start)) = self.pace {
            n = n.min(256 * 1024);
            let due = Duration::from_secs_f64((self.pos + n as u64) as f64 / rate as f64);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        let mut i = 0;
        while i < n {
            let word = self.word(self.pos / 8);
            let off = (self.pos % 8) as usize;
            let take = (8 - off).min(n - i);
            buf[i..i + take].copy_from_slice(&word[off..off + take]);
            i += take;
            self.pos += take as u64;
        }
        self.produced.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// SHA-256 of everything `reader` yields, hex, computed on the host by coreutils' `sha256sum`.
pub fn sha256_hex(mut reader: impl Read) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("running the host's sha256sum");
    io::copy(&mut reader, child.stdin.as_mut().expect("stdin")).expect("feeding sha256sum");
    drop(child.stdin.take());
    let out = child.wait_with_output().expect("sha256sum");
    let text = String::from_utf8(out.stdout).expect("sha256sum output");
    text.split_whitespace().next().expect("a digest").to_string()
}

/// Latency samples of one operation.
#[derive(Default)]
pub struct Latencies {
    samples: Vec<Duration>,
}

impl Latencies {
    pub fn push(&mut self, d: Duration) {
        self.samples.push(d);
    }

    /// Times `f` and records it.
    pub fn time<T>(&mut self, f: impl FnOnce() -> T) -> T {
        let t0 = Instant::now();
        let v = f();
        self.push(t0.elapsed());
        v
    }

    fn sorted(&self) -> Vec<Duration> {
        let mut s = self.samples.clone();
        s.sort();
        s
    }

    /// `n=50 min=… p50=… max=…` in milliseconds.
    pub fn summary(&self) -> String {
        let s = self.sorted();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        format!(
            "n={} min={:.1}ms p50={:.1}ms p90={:.1}ms max={:.1}ms",
            s.len(),
            ms(s[0]),
            ms(s[s.len() / 2]),
            ms(s[s.len() * 9 / 10]),
            ms(s[s.len() - 1])
        )
    }
}

/// One expected entry of a [`Tree`]: kind, mode, and content digest or link target.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    File { mode: u32, sha: String },
    Dir,
    Link { target: String },
}

/// A file tree written into a sandbox — nested directories, sizes around page and block edges, an
/// empty file, a 0600 and a 0755 file, symlinks (relative, absolute, to a directory) and one big file
/// streamed from a generator — with what each entry must be, to check it from inside after a
/// lifecycle change.
pub struct Tree {
    root: String,
    entries: BTreeMap<String, Entry>,
}

impl Tree {
    /// Writes the tree under `root` (which must not exist) in `sb`, with a big file of `big` bytes.
    pub fn build(sb: &Sandbox, root: &str, big: u64) -> Tree {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x05a4_d107);
        let mut entries = BTreeMap::new();
        for d in [".", "a", "a/b", "a/b/c", "a/b/c/d", "a/b/c/d/e", "x", "x/y", "x/y/z", "bin", "many", "empty-dir"] {
            entries.insert(d.to_string(), Entry::Dir);
        }
        sb.mkdir(&format!("{root}/a/b/c/d/e")).expect("mkdir");
        sb.mkdir(&format!("{root}/x/y/z")).expect("mkdir");
        for d in ["bin", "many", "empty-dir"] {
            sb.mkdir(&format!("{root}/{d}")).expect("mkdir");
        }
        let mut files: Vec<(String, u64, u32)> = vec![
            ("top.txt".into(), 13, 0o644),
            ("empty".into(), 0, 0o644),
            ("a/one".into(), 1, 0o644),
            ("a/b/page".into(), 4096, 0o644),
            ("a/b/page-plus".into(), 4097, 0o644),
            ("a/b/c/deep.bin".into(), rng.gen_range(100_000..2_000_000), 0o644),
            ("a/b/c/d/e/deeper.bin".into(), rng.gen_range(1..300_000), 0o644),
            ("x/y/z/odd".into(), 65_537, 0o644),
            ("secret".into(), rng.gen_range(1..10_000), 0o600),
            ("bin/tool".into(), rng.gen_range(1..50_000), 0o755),
            ("big.bin".into(), big, 0o644),
        ];
        for i in 0..12 {
            files.push((format!("many/f{i:02}"), rng.gen_range(0..512 * 1024), 0o644));
        }
        for (seed, (rel, size, mode)) in files.into_iter().enumerate() {
            let seed = seed as u64 + 1000;
            let path = format!("{root}/{rel}");
            let mode_arg = (mode != 0o644).then_some(mode);
            let written = sb
                .write_file_from(&path, Gen::new(seed, size), mode_arg)
                .unwrap_or_else(|e| panic!("writing {path} ({size} bytes): {e:?}"));
            assert_eq!(written.bytes, size, "{path}: server counted {} bytes, sent {size}", written.bytes);
            entries.insert(rel, Entry::File { mode, sha: sha256_hex(Gen::new(seed, size)) });
        }
        let links = [
            ("link-deep", "a/b/c/deep.bin".to_string()),
            ("link-abs", format!("{root}/top.txt")),
            ("link-dir", "a/b".to_string()),
        ];
        for (name, target) in links {
            sh_ok(sb, &format!("ln -s '{target}' '{root}/{name}'"));
            entries.insert(name.to_string(), Entry::Link { target });
        }
        let tree = Tree { root: root.to_string(), entries };
        tree.verify(sb, "after writing it");
        tree
    }

    /// One exec that prints a digest of every file and kind, mode, owner and link target of every entry.
    pub fn manifest(&self, sb: &Sandbox) -> String {
        sh_ok(
            sb,
            &format!(
                "cd '{}' && export LC_ALL=C && find . -type f -print0 | sort -z | xargs -0 -r sha256sum \
                 && echo --- && find . -printf '%y %m %u %p -> %l\\n' | sort",
                self.root
            ),
        )
    }

    /// Checks the tree from inside `sb` against what was written; `when` names the moment in failures.
    #[track_caller]
    pub fn verify(&self, sb: &Sandbox, when: &str) {
        let manifest = self.manifest(sb);
        let problems = self.compare(&manifest);
        assert!(problems.is_empty(), "tree {} {when}: {problems:#?}\n--- manifest ---\n{manifest}", self.root);
    }

    /// What differs between `manifest` and the expected entries.
    fn compare(&self, manifest: &str) -> Vec<String> {
        let (sums, listing) = manifest.split_once("---\n").unwrap_or((manifest, ""));
        let mut problems = Vec::new();
        let mut digests = BTreeMap::new();
        for line in sums.lines() {
            if let Some((sha, path)) = line.split_once("  ") {
                digests.insert(path.trim_start_matches("./").to_string(), sha.to_string());
            }
        }
        let mut seen = BTreeMap::new();
        for line in listing.lines() {
            let (head, target) = line.split_once(" -> ").unwrap_or((line, ""));
            let mut parts = head.splitn(4, ' ');
            let (kind, mode, owner, path) = (parts.next(), parts.next(), parts.next(), parts.next());
            let (Some(kind), Some(mode), Some(owner), Some(path)) = (kind, mode, owner, path) else {
                problems.push(format!("unparsable line {line:?}"));
                continue;
            };
            let rel = if path == "." { ".".to_string() } else { path.trim_start_matches("./").to_string() };
            if owner != "user" {
                problems.push(format!("{rel}: owned by {owner}, expected user"));
            }
            seen.insert(rel, (kind.to_string(), mode.to_string(), target.to_string()));
        }
        for (rel, want) in &self.entries {
            let Some((kind, mode, target)) = seen.remove(rel) else {
                problems.push(format!("{rel}: missing"));
                continue;
            };
            match want {
                Entry::Dir if kind != "d" => problems.push(format!("{rel}: is {kind}, expected a directory")),
                Entry::Dir => {}
                Entry::File { mode: want_mode, sha } => {
                    if kind != "f" {
                        problems.push(format!("{rel}: is {kind}, expected a file"));
                    }
                    if mode != format!("{want_mode:o}") {
                        problems.push(format!("{rel}: mode {mode}, expected {want_mode:o}"));
                    }
                    match digests.get(rel) {
                        Some(got) if got == sha => {}
                        got => problems.push(format!("{rel}: sha256 {got:?}, expected {sha}")),
                    }
                }
                Entry::Link { target: want_target } => {
                    if kind != "l" || &target != want_target {
                        problems.push(format!("{rel}: {kind} -> {target:?}, expected a symlink to {want_target:?}"));
                    }
                }
            }
        }
        for (rel, (kind, _, _)) in seen {
            problems.push(format!("{rel}: unexpected {kind} entry"));
        }
        problems
    }
}

/// A writer that checks what is written against a [`Gen`] stream, for reading big files back without
/// holding them in memory.
pub struct Compare {
    expected: Gen,
    offset: u64,
    /// Offset of the first differing byte, if any.
    pub mismatch: Option<u64>,
}

impl Compare {
    pub fn new(expected: Gen) -> Compare {
        Compare { expected, offset: 0, mismatch: None }
    }

    pub fn len(&self) -> u64 {
        self.offset
    }
}

impl Write for Compare {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let mut want = vec![0u8; data.len()];
        let mut got = 0;
        while got < want.len() {
            let n = self.expected.read(&mut want[got..])?;
            if n == 0 {
                break;
            }
            got += n;
        }
        if self.mismatch.is_none() && (got < data.len() || data != &want[..]) {
            if let Some(i) = (0..data.len()).find(|&i| i >= got || data[i] != want[i]) {
                self.mismatch = Some(self.offset + i as u64);
            }
        }
        self.offset += data.len() as u64;
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
