//! Unpacked images on the layers volume: one read-only btrfs subvolume per layer chain, and one per image
//! root, each made once and shared by every sandbox that boots it.
//!
//! ```text
//! <volume>/images/chains/<hex>   the tree of layers 1..n (OCI "ChainID" of n): a writable snapshot of
//!                                chain n-1 with layer n applied, then made read-only
//! <volume>/images/roots/<hex>    an image's root (named by its config digest): a snapshot of its top
//!                                chain plus what sandlot adds (a `user` account, the egress CA)
//! <volume>/images/tmp/…          work in progress; a crash leaves it for the next start to remove
//! ```
//!
//! Two images that share their first layers share those chains, so a layer is unpacked once per
//! distinct prefix, not once per image. A root is independent of the chains it came from once made
//! (btrfs snapshots share extents, not lifetimes): a chain may go when no image needs it any more while
//! sandboxes of a root made from it keep running. Sandboxes see a root through an idmapped mount
//! ([`crate::idmap`]) as their overlay's lower layer, so a create copies nothing.
//!
//! Layers are hostile input ([`crate::unpack`]); every change to a tree after unpacking goes through
//! [`crate::tree`], which follows no link the image planted.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

use sha2::{Digest as _, Sha256};

use crate::tree;
use crate::unpack::{self, UnpackLimits, Unpacked, IMAGE_IDS_BASE};
use crate::volume;

/// One layer to apply: its blob on the host (compressed or not) and the digest of its uncompressed tar.
#[derive(Debug, Clone)]
pub struct LayerBlob {
    /// The blob's file.
    pub path: PathBuf,
    /// `sha256:<hex>` of the uncompressed tar (the image config's `rootfs.diff_ids` entry).
    pub diff_id: String,
}

/// What sandlot adds to every image root.
#[derive(Debug, Clone, Default)]
pub struct RootExtras {
    /// The daemon's egress CA (PEM), appended to the image's trust bundles.
    pub ca_pem: Option<String>,
}

/// A progress report while an image root is made.
#[derive(Debug, Clone)]
pub enum PrepareEvent {
    /// Layer `index` (bottom first) is being applied.
    Unpacking {
        /// Position in the image's layers.
        index: usize,
        /// Its diff id.
        diff_id: String,
    },
    /// Layer `index` is applied (or was already, in a shared chain).
    Unpacked {
        /// Position in the image's layers.
        index: usize,
        /// What the unpacker did; `None` when the chain already existed.
        report: Option<Unpacked>,
    },
}

/// Who an image's `USER` names, as its own `/etc/passwd` and `/etc/group` say.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ImageUser {
    /// Uid inside the sandbox.
    pub uid: u32,
    /// Gid inside the sandbox.
    pub gid: u32,
    /// Login name (the uid as text when the image's passwd has none).
    pub name: String,
    /// Home directory (`/` when the image's passwd has none, as Docker does).
    pub home: String,
}

/// Where the chains and roots live.
#[derive(Debug, Clone)]
pub struct ImageStore {
    dir: PathBuf,
}

/// Bytes a layer's uncompressed stream may hold after its tar archive ends: the end-of-archive blocks
/// and a writer's record padding (tar's default record is 10 KiB), with room to spare.
const MAX_AFTER_TAR_END: u64 = 1 << 20;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The 64 hex digits of a `sha256:` digest, refused if it is anything else (names become paths).
fn digest_hex(d: &str) -> io::Result<&str> {
    match d.strip_prefix("sha256:") {
        Some(h) if h.len() == 64 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) => Ok(h),
        _ => Err(io::Error::new(io::ErrorKind::InvalidInput, format!("not a sha256 digest: {d:?}"))),
    }
}

impl ImageStore {
    /// Opens (creating) the store under the layers volume's root and removes what a crash left half made.
    pub fn open(volume_root: &Path) -> io::Result<ImageStore> {
        let dir = volume_root.join("images");
        for sub in ["chains", "roots", "tmp", "diffs", "rootchains"] {
            fs::create_dir_all(dir.join(sub))?;
        }
        let store = ImageStore { dir };
        for markers in ["diffs", "rootchains"] {
            for ent in fs::read_dir(store.dir.join(markers))? {
                let path = ent?.path();
                if path.extension().is_some_and(|e| e == "tmp") {
                    let _ = fs::remove_file(&path);
                }
            }
        }
        for ent in fs::read_dir(store.dir.join("tmp"))? {
            let path = ent?.path();
            if let Err(e) = volume::remove_subvolume(&path) {
                tracing::warn!("removing the unfinished image tree {}: {e}", path.display());
            }
        }
        Ok(store)
    }

    /// The root of image `key` (a config digest), whether or not it exists.
    pub fn root(&self, key: &str) -> io::Result<PathBuf> {
        Ok(self.dir.join("roots").join(digest_hex(key)?))
    }

    /// Whether image `key`'s root has been made.
    pub fn has_root(&self, key: &str) -> bool {
        self.root(key).is_ok_and(|p| p.is_dir())
    }

    fn chain(&self, chain_id: &str) -> io::Result<PathBuf> {
        Ok(self.dir.join("chains").join(digest_hex(chain_id)?))
    }

    fn tmp(&self, what: &str) -> PathBuf {
        use rand::Rng;
        let n: u64 = rand::thread_rng().gen();
        self.dir.join("tmp").join(format!("{what}-{n:016x}"))
    }

    /// Makes image `key`'s root from `layers` (bottom first), applying each layer whose chain does
    /// not exist yet, and returns its path. `chains` are the layers' OCI chain ids, one per layer
    /// (the engine's `chain_ids`), which name the chains on disk. Each layer's uncompressed bytes
    /// are checked against its diff id as they are applied; a mismatch, or a layer the unpacker
    /// refuses, leaves nothing behind. `limits.max_bytes` bounds what all the layers this call
    /// unpacks add to the layers volume together (file bytes, each entry's metadata cost,
    /// [`SUBVOLUME_COST`] for each new chain and for the root); returns the root and those bytes.
    /// Blocking; seconds for a large image.
    pub fn prepare(
        &self,
        key: &str,
        layers: &[LayerBlob],
        chains: &[String],
        extras: &RootExtras,
        limits: &UnpackLimits,
        events: &mut dyn FnMut(PrepareEvent),
    ) -> io::Result<(PathBuf, u64)> {
        if chains.len() != layers.len() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "one chain id per layer"));
        }
        let root = self.root(key)?;
        let mut unpacked = 0u64;
        // What the root holds, recorded beside it: a key is only a name, and a root reused under a key
        // must hold exactly these layers.
        let top = chains.last().cloned().unwrap_or_else(|| "sha256:empty".into());
        let made_from = self.dir.join("rootchains").join(digest_hex(key)?);
        if root.is_dir() {
            if let Ok(recorded) = fs::read_to_string(&made_from) {
                if recorded != top {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "image root {key} was made from other layers ({recorded}, not {top}); it is not reused"
                        ),
                    ));
                }
            }
            // The root (and its chains) may have been made for another tenant's image: this image's own
            // blobs must be shown to hold the same layers, or naming a config digest would be enough to
            // boot someone else's files.
            for (index, layer) in layers.iter().enumerate() {
                self.check_diff_id(layer, limits.deadline)?;
                events(PrepareEvent::Unpacked { index, report: None });
            }
            return Ok((root, 0));
        }
        let mut parent: Option<PathBuf> = None;
        for (index, (layer, chain_id)) in layers.iter().zip(chains).enumerate() {
            let path = self.chain(chain_id)?;
            if path.is_dir() {
                // As for an existing root: the chain says what the layer holds only if this image's
                // blob decompresses to the diff id it was made from.
                self.check_diff_id(layer, limits.deadline)?;
                events(PrepareEvent::Unpacked { index, report: None });
            } else {
                events(PrepareEvent::Unpacking { index, diff_id: layer.diff_id.clone() });
                unpacked = charge_subvolume(unpacked, limits)?;
                let remaining = UnpackLimits { max_bytes: limits.max_bytes.saturating_sub(unpacked), ..limits.clone() };
                let report = self.make_chain(parent.as_deref(), &path, layer, &remaining)?;
                unpacked += report.charged;
                events(PrepareEvent::Unpacked { index, report: Some(report) });
            }
            parent = Some(path);
        }
        let unpacked = charge_subvolume(unpacked, limits)?;
        let tmp = self.tmp("root");
        match &parent {
            Some(top) => volume::snapshot(top, &tmp, false)?,
            None => volume::create_subvolume(&tmp)?,
        }
        let made = add_extras(&tmp, extras).and_then(|()| write_marker(&made_from, &top)).and_then(|()| {
            // Made read-only under its final name in one step: a root that exists is complete.
            match volume::snapshot(&tmp, &root, true) {
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()), // a concurrent prepare won
                r => r,
            }
        });
        let _ = volume::remove_subvolume(&tmp);
        made.map(|()| (root, unpacked))
    }

    /// Where the fact "this blob decompresses to that diff id" is kept once shown (content-derived, so
    /// it never goes stale): `diffs/<blob hex>`.
    fn diff_marker(&self, layer: &LayerBlob) -> io::Result<PathBuf> {
        let name = layer.path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        digest_hex(&format!("sha256:{name}"))?;
        Ok(self.dir.join("diffs").join(name))
    }

    /// Checks that `layer`'s blob decompresses to its diff id: from the marker a previous check or
    /// unpack left, else by decompressing and hashing it (no unpack).
    fn check_diff_id(&self, layer: &LayerBlob, deadline: Option<Instant>) -> io::Result<()> {
        if fs::read_to_string(self.diff_marker(layer)?).is_ok_and(|d| d == layer.diff_id) {
            return Ok(());
        }
        // No marker, or one that disagrees: hash the blob again (a torn marker must not fail an image
        // for good).
        self.settle_diff_id(layer, open_hashed(layer, deadline)?, u64::MAX)
    }

    /// Reads what is left of `layer`'s uncompressed stream (at most `max_left` bytes), remembers the
    /// diff id it hashes to, and checks it against the one its image names.
    fn settle_diff_id(
        &self,
        layer: &LayerBlob,
        mut hashed: HashingReader<Box<dyn Read>>,
        max_left: u64,
    ) -> io::Result<()> {
        // The tar may end before the stream does (padding): what follows counts towards the digest.
        // After an unpack, only that padding is left, so a stream that goes on past it is refused
        // rather than decompressed for nothing (a small zstd frame can expand to gigabytes).
        let left = io::copy(&mut (&mut hashed).take(max_left.saturating_add(1)), &mut io::sink())?;
        if left > max_left {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a layer goes on for more than {max_left} bytes after the end of its tar archive"),
            ));
        }
        let got = format!("sha256:{}", hex(&hashed.hash.finalize()));
        write_marker(&self.diff_marker(layer)?, &got)?;
        if got != layer.diff_id {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "layer sha256:{} unpacks to {got}, not to the diff id {} its image names",
                    // The blob's digest, never its path: errors reach tenants, host paths must not.
                    layer.path.file_name().and_then(|n| n.to_str()).unwrap_or_default(),
                    layer.diff_id
                ),
            ));
        }
        Ok(())
    }

    fn make_chain(
        &self,
        parent: Option<&Path>,
        path: &Path,
        layer: &LayerBlob,
        limits: &UnpackLimits,
    ) -> io::Result<Unpacked> {
        let tmp = self.tmp("chain");
        match parent {
            Some(p) => volume::snapshot(p, &tmp, false)?,
            None => volume::create_subvolume(&tmp)?,
        }
        let applied = (|| {
            let dir = tree::open_root(&tmp)?;
            let mut hashed = open_hashed(layer, limits.deadline)?;
            let report = unpack::apply_layer(dir.as_fd(), &mut hashed, limits)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
            self.settle_diff_id(layer, hashed, MAX_AFTER_TAR_END)?;
            match volume::snapshot(&tmp, path, true) {
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                r => r?,
            }
            Ok(report)
        })();
        let _ = volume::remove_subvolume(&tmp);
        applied
    }

    /// Resolves `spec` (`USER` of image `key`'s config: `name`, `uid`, `name:group`, `uid:gid`) in the
    /// image's own account files.
    pub fn resolve_user(&self, key: &str, spec: &str) -> io::Result<ImageUser> {
        let root = tree::open_root(&self.root(key)?)?;
        let passwd = tree::read_beneath(root.as_fd(), Path::new("etc/passwd"), 4 << 20)?.unwrap_or_default();
        let group = tree::read_beneath(root.as_fd(), Path::new("etc/group"), 4 << 20)?.unwrap_or_default();
        resolve_user(&passwd, &group, spec).map_err(|e| io::Error::new(io::ErrorKind::NotFound, e))
    }

    /// Removes roots not in `keep_roots`, chains not in `keep_chains` and the diff markers of blobs
    /// not in `keep_blobs`; returns the roots and chains that went (digests).
    pub fn remove_unused(
        &self,
        keep_roots: &HashSet<String>,
        keep_chains: &HashSet<String>,
        keep_blobs: &HashSet<String>,
    ) -> io::Result<Vec<String>> {
        for ent in fs::read_dir(self.dir.join("diffs"))? {
            let ent = ent?;
            if !keep_blobs.contains(&format!("sha256:{}", ent.file_name().to_string_lossy())) {
                let _ = fs::remove_file(ent.path());
            }
        }
        let mut removed = Vec::new();
        for (sub, keep) in [("roots", keep_roots), ("chains", keep_chains)] {
            for ent in fs::read_dir(self.dir.join(sub))? {
                let ent = ent?;
                let name = format!("sha256:{}", ent.file_name().to_string_lossy());
                if keep.contains(&name) {
                    continue;
                }
                match volume::remove_subvolume(&ent.path()) {
                    Ok(()) => {
                        if sub == "roots" {
                            let _ = fs::remove_file(self.dir.join("rootchains").join(ent.file_name()));
                        }
                        removed.push(name)
                    }
                    Err(e) => tracing::warn!("removing unused image tree {}: {e}", ent.path().display()),
                }
            }
        }
        Ok(removed)
    }
}

/// What a new subvolume (a layer's chain, an image's root) costs the layers volume before any file:
/// its tree root, root item and back references, and the read-only snapshot beside the writable one
/// it is made from. Measured: 150 `FROM scratch` + `LABEL` images grew the volume by 145 MiB.
pub const SUBVOLUME_COST: u64 = 1 << 20;

/// `charged` plus one [`SUBVOLUME_COST`], or the error of a budget it would pass (worded as the
/// unpacker's, which callers recognise by `max_bytes`).
fn charge_subvolume(charged: u64, limits: &UnpackLimits) -> io::Result<u64> {
    match charged.checked_add(SUBVOLUME_COST) {
        Some(total) if total <= limits.max_bytes => Ok(total),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "a new layer tree costs {SUBVOLUME_COST} bytes of the volume, which would bring the image over {} \
                 bytes (max_bytes); {charged} already charged",
                limits.max_bytes
            ),
        )),
    }
}

/// Writes a diff marker atomically and durably (a crash leaves it whole or absent).
fn write_marker(path: &Path, diff_id: &str) -> io::Result<()> {
    use std::io::Write;
    // A name of its own: two prepares of one image may write the same marker at once.
    use rand::Rng;
    let tmp = path.with_extension(format!("{:016x}.tmp", rand::thread_rng().gen::<u64>()));
    let mut f = File::create(&tmp)?;
    f.write_all(diff_id.as_bytes())?;
    f.sync_all()?;
    fs::rename(&tmp, path)?;
    File::open(path.parent().expect("markers live in a directory"))?.sync_all()
}

/// `layer`'s blob, decompressed, hashed as it is read, failing any read after `deadline`.
fn open_hashed(layer: &LayerBlob, deadline: Option<Instant>) -> io::Result<HashingReader<Box<dyn Read>>> {
    let blob = File::open(&layer.path)?;
    Ok(HashingReader {
        inner: unpack::decompress(io::BufReader::with_capacity(1 << 20, blob))?,
        hash: Sha256::new(),
        deadline,
    })
}

struct HashingReader<R> {
    inner: R,
    hash: Sha256,
    /// Reads fail from this point on (a small compressed layer can take minutes to decompress).
    deadline: Option<Instant>,
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the layer was still being read at the image's unpack deadline (--unpack-timeout-s)",
            ));
        }
        let n = self.inner.read(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
}

/// The image's trust bundles, by distribution: Debian/Ubuntu/Alpine/Arch, then RHEL/Fedora's two names.
const TRUST_BUNDLES: [&str; 3] = [
    "etc/ssl/certs/ca-certificates.crt",
    "etc/pki/tls/certs/ca-bundle.crt",
    "etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
];

/// What sandlot adds to an image root (written as the image's root, through [`crate::tree`]):
/// `root` and `user` (uid 1000) accounts when the image lacks them, and the egress CA in every trust
/// bundle the image has (or in Debian's place when it has none, which the sandbox's TLS variables name).
fn add_extras(root: &Path, extras: &RootExtras) -> io::Result<()> {
    let rootfd = tree::open_root(root)?;
    let owner = IMAGE_IDS_BASE;
    let etc = tree::make_dirs_beneath(rootfd.as_fd(), Path::new("etc"), owner, 0o755)?;
    let passwd = tree::read_beneath(rootfd.as_fd(), Path::new("etc/passwd"), 4 << 20)?.unwrap_or_default();
    let group = tree::read_beneath(rootfd.as_fd(), Path::new("etc/group"), 4 << 20)?.unwrap_or_default();
    let passwd = with_accounts(
        &passwd,
        &[("root", "root:x:0:0:root:/root:/bin/sh"), ("user", "user:x:1000:1000:sandbox user:/home/user:/bin/sh")],
    );
    let group = with_accounts(&group, &[("root", "root:x:0:"), ("user", "user:x:1000:")]);
    tree::replace_file(etc.as_fd(), "passwd", &passwd, owner, 0o644)?;
    tree::replace_file(etc.as_fd(), "group", &group, owner, 0o644)?;
    if let Some(ca) = &extras.ca_pem {
        let mut wrote = false;
        for bundle in TRUST_BUNDLES {
            let rel = Path::new(bundle);
            let Ok(dir) = tree::open_dir_beneath(rootfd.as_fd(), rel.parent().expect("has a parent")) else { continue };
            // Read through whatever link the image has there (resolved inside the root), then replace
            // the name with a plain file: the write never follows a link.
            let Some(mut body) = tree::read_beneath(rootfd.as_fd(), rel, 16 << 20)? else { continue };
            if !body.ends_with(b"\n") && !body.is_empty() {
                body.push(b'\n');
            }
            body.extend_from_slice(ca.as_bytes());
            let name = rel.file_name().expect("has a name").to_str().expect("ascii");
            tree::replace_file(dir.as_fd(), name, &body, owner, 0o644)?;
            wrote = true;
        }
        if !wrote {
            let dir = tree::make_dirs_beneath(rootfd.as_fd(), Path::new("etc/ssl/certs"), owner, 0o755)?;
            tree::replace_file(dir.as_fd(), "ca-certificates.crt", ca.as_bytes(), owner, 0o644)?;
        }
        let own = tree::make_dirs_beneath(rootfd.as_fd(), Path::new("etc/sandlot"), owner, 0o755)?;
        tree::replace_file(own.as_fd(), "ca.pem", ca.as_bytes(), owner, 0o644)?;
    }
    Ok(())
}

/// `USER` resolved as Docker does: a name must be in passwd; a numeric uid need not be (then its gid
/// is 0 and its home `/`); a group part, name or number, replaces the passwd entry's gid.
fn resolve_user(passwd: &[u8], group: &[u8], spec: &str) -> Result<ImageUser, String> {
    let (user, grp) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    let lines = |file: &[u8]| -> Vec<Vec<String>> {
        String::from_utf8_lossy(file).lines().map(|l| l.split(':').map(str::to_string).collect()).collect()
    };
    let users = lines(passwd);
    let entry = users.iter().find(|f| f.len() >= 7 && (f[0] == user || (user.parse::<u32>().is_ok() && f[2] == user)));
    let mut out = match (entry, user.parse::<u32>()) {
        (Some(f), _) => ImageUser {
            uid: f[2].parse().map_err(|_| format!("the image's /etc/passwd has a bad uid for {}", f[0]))?,
            gid: f[3].parse().map_err(|_| format!("the image's /etc/passwd has a bad gid for {}", f[0]))?,
            name: f[0].clone(),
            home: if f[5].is_empty() { "/".into() } else { f[5].clone() },
        },
        (None, Ok(uid)) => ImageUser { uid, gid: 0, name: uid.to_string(), home: "/".into() },
        (None, Err(_)) => return Err(format!("the image's USER {user:?} is not in its /etc/passwd")),
    };
    if let Some(g) = grp {
        out.gid = match g.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => lines(group)
                .iter()
                .find(|f| f.len() >= 3 && f[0] == g)
                .and_then(|f| f[2].parse().ok())
                .ok_or_else(|| format!("the image's USER group {g:?} is not in its /etc/group"))?,
        };
    }
    if out.uid >= crate::UID_RANGE || out.gid >= crate::UID_RANGE {
        return Err(format!("the image's USER {spec:?} is outside the ids a sandbox has (0-65535)"));
    }
    Ok(out)
}

/// `file` (an /etc/passwd or /etc/group) with a line for each `(name, line)` whose name it lacks.
fn with_accounts(file: &[u8], accounts: &[(&str, &str)]) -> Vec<u8> {
    let mut out = file.to_vec();
    for (name, line) in accounts {
        let has = file.split(|b| *b == b'\n').any(|l| l.split(|b| *b == b':').next() == Some(name.as_bytes()));
        if !has {
            if !out.is_empty() && !out.ends_with(b"\n") {
                out.push(b'\n');
            }
            out.extend_from_slice(line.as_bytes());
            out.push(b'\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounts_are_added_only_when_missing() {
        let passwd = b"root:x:0:0:root:/root:/bin/ash\nnode:x:1000:1000::/home/node:/bin/sh";
        let out = String::from_utf8(with_accounts(
            passwd,
            &[("root", "root:x:0:0::/root:/bin/sh"), ("user", "user:x:1000:1000::/home/user:/bin/sh")],
        ))
        .unwrap();
        assert_eq!(out, "root:x:0:0:root:/root:/bin/ash\nnode:x:1000:1000::/home/node:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n");
        assert_eq!(with_accounts(b"", &[("user", "user:x:1000:")]), b"user:x:1000:\n");
    }

    #[test]
    fn image_users_resolve_as_docker_resolves_them() {
        let passwd =
            b"root:x:0:0:root:/root:/bin/sh\nnode:x:1000:1000::/home/node:/bin/sh\napp:x:1001:50::/srv:/bin/sh\n";
        let group = b"root:x:0:\nstaff:x:50:\n";
        let r = |s: &str| resolve_user(passwd, group, s);
        assert_eq!(
            r("node").unwrap(),
            ImageUser { uid: 1000, gid: 1000, name: "node".into(), home: "/home/node".into() }
        );
        assert_eq!(r("1001").unwrap(), ImageUser { uid: 1001, gid: 50, name: "app".into(), home: "/srv".into() });
        assert_eq!(r("4242").unwrap(), ImageUser { uid: 4242, gid: 0, name: "4242".into(), home: "/".into() });
        assert_eq!(r("node:staff").unwrap().gid, 50);
        assert_eq!(r("node:7").unwrap().gid, 7);
        assert!(r("ghost").unwrap_err().contains("not in its /etc/passwd"));
        assert!(r("node:ghosts").unwrap_err().contains("/etc/group"));
        assert!(r("70000").unwrap_err().contains("outside"));
    }

    #[test]
    fn digests_that_are_not_sha256_never_become_paths() {
        for bad in ["sha256:../../etc", "md5:abc", &format!("sha256:{}", "A".repeat(64)), "sha256:"] {
            assert!(digest_hex(bad).is_err(), "{bad}");
        }
    }

    /// A layer whose stream goes on long after its tar ends is refused after the unpack, not hashed
    /// to its end; ordinary padding is taken. Errors name the blob's digest, never a host path.
    #[test]
    fn a_layer_that_goes_on_past_its_tar_end_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = ImageStore::open(dir.path()).unwrap();
        let mut tar = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_ustar();
        h.set_size(2);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut h, "hi", &b"hi"[..]).unwrap();
        let tar = tar.into_inner().unwrap();
        let blob = |name: &str, trailing: usize| {
            let mut bytes = tar.clone();
            bytes.resize(tar.len() + trailing, 0);
            let diff_id = format!("sha256:{}", hex(&Sha256::digest(&bytes)));
            let hexname = hex(&Sha256::digest(name.as_bytes()));
            let path = dir.path().join(&hexname);
            fs::write(&path, &bytes).unwrap();
            (LayerBlob { path, diff_id }, hexname)
        };
        // As after an unpack: the tar's own bytes read, what follows left to settle.
        let settle = |layer: &LayerBlob| {
            let mut hashed = open_hashed(layer, None).unwrap();
            io::copy(&mut (&mut hashed).take(tar.len() as u64), &mut io::sink()).unwrap();
            store.settle_diff_id(layer, hashed, MAX_AFTER_TAR_END)
        };
        let (padded, _) = blob("padded", 10 << 10);
        settle(&padded).unwrap();
        // Past its deadline, not one more byte of a layer is read.
        let mut late = open_hashed(&padded, Some(Instant::now())).unwrap();
        let e = late.read(&mut [0; 512]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        let (long, _) = blob("long", (MAX_AFTER_TAR_END + 1) as usize);
        let e = settle(&long).unwrap_err();
        assert!(e.to_string().contains("after the end of its tar archive"), "{e}");
        let (wrong, hexname) = blob("wrong", 0);
        let wrong = LayerBlob { diff_id: format!("sha256:{}", "0".repeat(64)), ..wrong };
        let e = settle(&wrong).unwrap_err();
        assert!(e.to_string().contains(&format!("layer sha256:{hexname} unpacks to")), "{e}");
        assert!(!e.to_string().contains(dir.path().to_str().unwrap()), "{e}");
    }
}
