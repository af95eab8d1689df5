//! The per-sandbox writable layer, prepared by the daemon before the sandbox starts.
//!
//! Image files are owned by host ids that are not mapped into the sandbox, so the sandbox's root cannot
//! write through them. The daemon therefore creates, in the upper layer, the directories the sandbox must
//! own (`/`, `/etc`, `/root`, `/home/user`, …) with the sandbox's host ids, and the generated identity
//! files. overlayfs shows an upper directory's owner over the lower one's.

use std::fs;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{chown, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::{tree, IdRange};

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

    /// Creates the layer with the sandbox-owned skeleton and generated /etc files. With `disk_bytes`,
    /// the layer is a btrfs subvolume capped at that many bytes. `accounts` writes sandlot's own
    /// passwd, group and shadow (the `host` image); an OCI image keeps its own, which the image store
    /// completed with sandlot's accounts.
    pub fn create(&self, ids: IdRange, hostname: &str, disk_bytes: Option<u64>, accounts: bool) -> io::Result<()> {
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
        dir("", root, 0o755)?;
        for d in ["etc", "home", "var", "opt", "mnt", "srv", "run"] {
            dir(d, root, 0o755)?;
        }
        dir("root", root, 0o700)?;
        dir("home/user", user, 0o755)?;
        dir("var/tmp", root, 0o1777)?;
        if !accounts {
            // Mount points the sandbox's setup needs, which a minimal image may lack.
            for d in ["proc", "dev", "sys"] {
                dir(d, root, 0o755)?;
            }
            dir("tmp", root, 0o1777)?;
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
        if accounts {
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
