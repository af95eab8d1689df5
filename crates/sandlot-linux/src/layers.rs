//! The per-sandbox writable layer, prepared by the daemon before the sandbox starts.
//!
//! Image files are owned by host ids that are not mapped into the sandbox, so the sandbox's root cannot
//! write through them. The daemon therefore creates, in the upper layer, the directories the sandbox must
//! own (`/`, `/etc`, `/root`, `/home/user`, …) with the sandbox's host ids, and the generated identity
//! files. overlayfs shows an upper directory's owner over the lower one's.

use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::{chown, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::{tree, IdRange};

/// What a sandbox's layer lies over.
#[derive(Debug, Clone, Copy)]
pub enum Base<'a> {
    /// The `host` image: a bare skeleton and the host's /usr. The layer gets sandlot's own accounts
    /// (passwd, group, shadow) and the directories a system has.
    Host,
    /// An OCI image's root (unpacked, image ids on disk): it keeps its own accounts and directories.
    Image {
        /// The image's root directory on the host (read without following links).
        root: &'a Path,
        /// A build step's sandbox: nothing but mount points is added to the tree (its layer becomes
        /// the image's).
        build_step: bool,
    },
}

/// Paths of one sandbox's layer on the host.
#[derive(Debug, Clone)]
pub struct Layer {
    /// `<state>/sandboxes/<id>`.
    pub dir: PathBuf,
    /// Writable overlay layer.
    pub upper: PathBuf,
    /// overlayfs work dir.
    pub work: PathBuf,
    /// Mount point of the merged root (inside the sandbox's own mount namespace only).
    pub root: PathBuf,
}

impl Layer {
    /// Layout under `sandboxes_dir` for sandbox `id`.
    pub fn at(sandboxes_dir: &Path, id: &str) -> Self {
        let dir = sandboxes_dir.join(id);
        Layer { upper: dir.join("upper"), work: dir.join("work"), root: dir.join("root"), dir }
    }

    /// Creates the layer with the generated /etc files and, over `base`, the directories a sandbox
    /// needs. With `disk_bytes`, the layer is a btrfs subvolume capped at that many bytes.
    pub fn create(&self, ids: IdRange, hostname: &str, disk_bytes: Option<u64>, base: Base<'_>) -> io::Result<()> {
        if let Some(parent) = self.dir.parent() {
            fs::create_dir_all(parent)?;
        }
        if let Some(bytes) = disk_bytes {
            crate::volume::create_subvolume(&self.dir)?;
            crate::volume::limit_subvolume(&self.dir, bytes)?;
        }
        fs::create_dir_all(&self.dir)?;
        fs::set_permissions(&self.dir, fs::Permissions::from_mode(0o711))?;
        fs::create_dir_all(&self.root)?;
        let root = ids.host(0);
        let user = ids.host(1000);
        let dir = |rel: &str, owner: u32, mode: u32| -> io::Result<()> {
            let p = self.upper.join(rel);
            fs::create_dir_all(&p)?;
            chown(&p, Some(owner), Some(owner))?;
            fs::set_permissions(&p, fs::Permissions::from_mode(mode))
        };
        match base {
            Base::Host => {
                // The host image's lower layer is a bare skeleton: the sandbox owns these.
                dir("", root, 0o755)?;
                for d in ["etc", "home", "var", "opt", "mnt", "srv", "run"] {
                    dir(d, root, 0o755)?;
                }
                dir("root", root, 0o700)?;
                dir("home/user", user, 0o755)?;
                dir("var/tmp", root, 0o1777)?;
                for d in ["proc", "dev", "sys"] {
                    dir(d, root, 0o755)?;
                }
                dir("tmp", root, 0o1777)?;
            }
            Base::Image { root: image, build_step } => {
                // An image's tree is seen through an idmapped mount, its owners already the sandbox's:
                // an upper directory would hide the image's own mode and owner (overlayfs shows the
                // upper one's), so only what the image lacks is made, and `/` and `/etc` (which the
                // generated files need) take the image's mode and owner.
                let image_fd = tree::open_root(image)?;
                let image_dir = |rel: &str| -> Option<nix::sys::stat::FileStat> {
                    let fd = match rel {
                        "" => None,
                        rel => Some(tree::open_dir_beneath(image_fd.as_fd(), Path::new(rel)).ok()?),
                    };
                    let raw = fd.as_ref().map_or(image_fd.as_raw_fd(), |f| f.as_raw_fd());
                    nix::sys::stat::fstat(raw).ok()
                };
                // `rel` in the upper layer: the image's mode and owner when the image has it (an upper
                // directory must not change what the image's looks like), else `owner` and `mode`. Its
                // parents the same way, so no directory of the image is hidden by one of root's.
                let made = |rel: &str, owner: u32, mode: u32| -> io::Result<()> {
                    let mut path = String::new();
                    let parts: Vec<&str> = rel.split('/').filter(|c| !c.is_empty()).collect();
                    for i in 0..=parts.len() {
                        if i > 0 {
                            path = parts[..i].join("/");
                        }
                        if i < parts.len() && self.upper.join(&path).is_dir() {
                            continue;
                        }
                        // The image's files are stored owned by the image id range (see `idmap`).
                        let image_id =
                            |id: u32| id.checked_sub(crate::unpack::IMAGE_IDS_BASE).filter(|n| *n < crate::UID_RANGE);
                        let stored = image_dir(&path)
                            .and_then(|st| Some((image_id(st.st_uid)?, image_id(st.st_gid)?, st.st_mode)));
                        match stored {
                            Some((uid, gid, st_mode)) => {
                                let p = self.upper.join(&path);
                                fs::create_dir_all(&p)?;
                                chown(&p, Some(ids.host(uid)), Some(ids.host(gid)))?;
                                fs::set_permissions(&p, fs::Permissions::from_mode(st_mode & 0o7777))?;
                            }
                            _ if i == parts.len() => dir(&path, owner, mode)?,
                            _ => dir(&path, root, 0o755)?,
                        }
                    }
                    Ok(())
                };
                // A mount point is made unless the image has it as a directory; what is only expected
                // is made where the image has nothing at all (an image's `/home` that is a link stays).
                let lacks = |rel: &str| image_dir(rel).is_none();
                let absent = |rel: &str| {
                    let parts: Vec<&str> = rel.split('/').collect();
                    (1..=parts.len()).any(|n| {
                        matches!(
                            tree::open_dir_beneath(image_fd.as_fd(), Path::new(&parts[..n].join("/"))),
                            Err(e) if e.raw_os_error() == Some(nix::libc::ENOENT)
                        )
                    })
                };
                made("etc", root, 0o755)?;
                // Mount points of the sandbox's setup, which a minimal image may lack.
                for (d, mode) in [("proc", 0o555), ("dev", 0o755), ("sys", 0o555), ("tmp", 0o1777)] {
                    if lacks(d) {
                        made(d, root, mode)?;
                    }
                }
                if !build_step {
                    // What programs in a sandbox expect, and the homes of its two users (root's is a
                    // command's default working directory; `user` is E2B's).
                    for (d, mode) in [("run", 0o755), ("var/tmp", 0o1777), ("root", 0o700)] {
                        if absent(d) {
                            made(d, root, mode)?;
                        }
                    }
                    if absent("home/user") {
                        made("home/user", user, 0o755)?;
                    }
                }
            }
        }
        fs::create_dir_all(&self.work)?;
        chown(&self.work, Some(root), Some(root))?;
        fs::set_permissions(&self.work, fs::Permissions::from_mode(0o700))?;

        let file = |rel: &str, body: &str, mode: u32| -> io::Result<()> {
            let p = self.upper.join(rel);
            fs::write(&p, body)?;
            chown(&p, Some(root), Some(root))?;
            fs::set_permissions(&p, fs::Permissions::from_mode(mode))
        };
        file("etc/hostname", &format!("{hostname}\n"), 0o644)?;
        file("etc/hosts", &hosts(hostname), 0o644)?;
        if matches!(base, Base::Host) {
            file(
                "etc/passwd",
                "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000:sandbox user:/home/user:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
                0o644,
            )?;
            file("etc/group", "root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n", 0o644)?;
            // The sandbox's own shadow file: a symlink planted to /etc/shadow reads this, never the host's.
            file("etc/shadow", "root:*:19000:0:99999:7:::\nuser:*:19000:0:99999:7:::\n", 0o640)?;
        }
        // The gateway's DNS server is the daemon: it answers allowed names and NXDOMAIN for the rest. A
        // sandbox without network has no route to it, so lookups fail at once instead of hanging.
        let resolv = format!("nameserver {}\noptions timeout:2 attempts:1\n", crate::net::GATEWAY_ADDR);
        file("etc/resolv.conf", &resolv, 0o644)?;
        Ok(())
    }

    /// Rewrites the generated identity files of a layer copied from another sandbox. The layer was
    /// written by that sandbox: `etc` or the files in it may be symlinks to host files, so `etc` is
    /// opened without following links (a link there is refused) and each file is replaced, never
    /// written through (see [`crate::tree`]).
    pub fn rename_host(&self, ids: IdRange, hostname: &str) -> io::Result<()> {
        let root = ids.host(0);
        let upper = tree::open_root(&self.upper)?;
        let etc = tree::open_dir_beneath(upper.as_fd(), Path::new("etc")).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("the copied layer's /etc is not a plain directory ({e}); make it one in the source sandbox"),
            )
        })?;
        for (name, body) in [("hostname", format!("{hostname}\n")), ("hosts", hosts(hostname))] {
            tree::replace_file(etc.as_fd(), name, body.as_bytes(), root, 0o644)?;
        }
        Ok(())
    }

    /// Removes the temporary files of uploads that a crash cut short (`.NAME.sandlot-HEX`, see the
    /// supervisor's file writes): they hold partial data nobody acknowledged and count against the quota.
    /// Only the upper layer is walked, which holds just what the sandbox changed; it is the sandbox's
    /// own tree, so the walk follows no link. Returns how many went.
    pub fn remove_partial_uploads(&self) -> io::Result<u64> {
        let mut removed = 0;
        tree::walk(
            &self.upper,
            |e| {
                if e.is_dir() {
                    return Ok(tree::Step::Descend);
                }
                let partial = e.is_file() && e.name.to_str().is_ok_and(is_partial_upload);
                if partial && e.remove_file().is_ok() {
                    removed += 1;
                }
                Ok(tree::Step::Skip)
            },
            |_, _| Ok(()),
        )?;
        Ok(removed)
    }

    /// Removes the layer. Everything below is plain files: the mounts lived in the sandbox's own mount
    /// namespace and vanished with its last process.
    pub fn remove(&self) -> io::Result<()> {
        crate::volume::remove_subvolume(&self.dir)
    }
}

fn hosts(hostname: &str) -> String {
    format!("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t{hostname}\n")
}

/// `.NAME.sandlot-HEX`: the temporary name a file upload writes to before its atomic rename.
fn is_partial_upload(name: &str) -> bool {
    name.starts_with('.')
        && name
            .rsplit_once(".sandlot-")
            .is_some_and(|(_, hex)| !hex.is_empty() && hex.chars().all(|c| c.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_only_upload_temporaries() {
        assert!(is_partial_upload(".big.bin.sandlot-1f2e3d"));
        assert!(!is_partial_upload("big.bin.sandlot-1f2e3d"));
        assert!(!is_partial_upload(".bashrc"));
        assert!(!is_partial_upload(".x.sandlot-xyz"));
    }
}
