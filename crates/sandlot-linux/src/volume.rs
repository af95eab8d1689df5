//! The layers volume: a btrfs filesystem in a sparse file under the state directory, loop-mounted in
//! the daemon's *private* mount namespace, holding one subvolume per sandbox with a qgroup limit.
//!
//! Why btrfs: this class of host runs ext4 without project quotas (and its kernel lacks XFS quota
//! support), so a writable layer cannot be capped on the root filesystem. A btrfs qgroup is a real
//! limit — writes past it fail with EDQUOT at once, no periodic `du` — and subvolumes give O(1)
//! copy-on-write snapshots for later. Why a private mount namespace: the volume's mount never appears on
//! the host, and when the daemon dies (even by kill -9) the namespace and the mount go with it; nothing
//! is left to sweep.

use std::fs::{self, File};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};

const NAME_MAX: usize = 4088;

#[repr(C)]
struct VolArgs {
    fd: i64,
    name: [u8; NAME_MAX],
}

#[repr(C)]
#[derive(Default)]
struct QgroupLimit {
    flags: u64,
    max_rfer: u64,
    max_excl: u64,
    rsv_rfer: u64,
    rsv_excl: u64,
}

#[repr(C)]
#[derive(Default)]
struct QgroupLimitArgs {
    qgroupid: u64,
    lim: QgroupLimit,
}

const QGROUP_LIMIT_MAX_RFER: u64 = 1;

#[repr(C)]
struct VolArgsV2 {
    fd: i64,
    transid: u64,
    flags: u64,
    unused: [u64; 4],
    name: [u8; 4040],
}

const SUBVOL_RDONLY: u64 = 1 << 1;

nix::ioctl_write_ptr!(
    /// `BTRFS_IOC_SUBVOL_CREATE`: creates an empty subvolume, named in the argument, in the directory
    /// the ioctl is issued on (see [`create_subvolume`]).
    btrfs_subvol_create,
    0x94,
    14,
    VolArgs
);
nix::ioctl_write_ptr!(
    /// `BTRFS_IOC_SNAP_CREATE_V2`: snapshots the subvolume open as the argument's `fd` into the directory
    /// the ioctl is issued on, read-only with `SUBVOL_RDONLY`; the copy shares every extent (see [`snapshot`]).
    btrfs_snap_create_v2,
    0x94,
    23,
    VolArgsV2
);
nix::ioctl_write_ptr!(
    /// `BTRFS_IOC_SNAP_DESTROY`: deletes the subvolume named in the argument from the directory the ioctl
    /// is issued on, without walking its files.
    btrfs_snap_destroy,
    0x94,
    15,
    VolArgs
);
nix::ioctl_read!(
    /// `BTRFS_IOC_QGROUP_LIMIT`: sets the referenced-bytes limit of a subvolume's qgroup, which is what
    /// caps a sandbox's writable layer at `disk_mb`.
    btrfs_qgroup_limit,
    0x94,
    43,
    QgroupLimitArgs
);

#[repr(C)]
struct InoLookupArgs {
    treeid: u64,
    objectid: u64,
    name: [u8; 4080],
}

#[repr(C)]
struct QgroupCreateArgs {
    create: u64,
    qgroupid: u64,
}

/// The inode number of every subvolume's root directory (`BTRFS_FIRST_FREE_OBJECTID`).
const SUBVOLUME_ROOT_INODE: u64 = 256;

nix::ioctl_readwrite!(
    /// `BTRFS_IOC_INO_LOOKUP`: with tree 0 and the root inode, answers the id of the subvolume the fd
    /// is in, which is also its level-0 qgroup's id.
    btrfs_ino_lookup,
    0x94,
    18,
    InoLookupArgs
);
nix::ioctl_write_ptr!(
    /// `BTRFS_IOC_QGROUP_CREATE`: creates (`create` 1) or destroys (0) a qgroup of the filesystem the
    /// fd is on.
    btrfs_qgroup_create,
    0x94,
    42,
    QgroupCreateArgs
);

/// Moves the calling process into a new mount namespace that receives the host's mounts but sends none
/// back. Must run before the process starts threads.
pub fn enter_private_mount_namespace() -> io::Result<()> {
    unshare(CloneFlags::CLONE_NEWNS).map_err(|e| io::Error::from_raw_os_error(e as i32))?;
    mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_SLAVE, None::<&str>)
        .map_err(|e| io::Error::from_raw_os_error(e as i32))
}

/// The mounted layers volume.
#[derive(Debug, Clone)]
pub struct Volume {
    /// Where it is mounted (inside the daemon's mount namespace).
    pub root: PathBuf,
}

/// What an operator without btrfs or loop devices can do instead, appended to the volume's errors.
const NO_VOLUME_HINT: &str = "; or pass --no-disk-quota to run without the layers volume (no disk limits)";

fn run(cmd: &mut Command, what: &str) -> io::Result<()> {
    let out = cmd.output().map_err(|e| {
        io::Error::new(e.kind(), format!("{what}: cannot run {:?} ({e}); install btrfs-progs", cmd.get_program()))
    })?;
    if !out.status.success() {
        return Err(io::Error::other(format!("{what}: {}", String::from_utf8_lossy(&out.stderr).trim())));
    }
    Ok(())
}

impl Volume {
    /// Creates (first time) and mounts the volume `<state>/layers.btrfs` of `size_gb` at `<state>/layers`.
    pub fn open(state_dir: &Path, size_gb: u64) -> io::Result<Self> {
        crate::kmod::filesystem("btrfs", NO_VOLUME_HINT)?;
        crate::kmod::loop_devices(NO_VOLUME_HINT)?;
        let image = state_dir.join("layers.btrfs");
        let root = state_dir.join("layers");
        fs::create_dir_all(&root)?;
        if !image.exists() {
            let tmp = state_dir.join("layers.btrfs.tmp");
            let f = File::create(&tmp)?;
            // Sparse: the file takes host disk space only as sandboxes write.
            f.set_len(size_gb << 30)?;
            drop(f);
            run(Command::new("mkfs.btrfs").arg("-q").arg(&tmp), "creating the layers volume")?;
            fs::rename(&tmp, &image)?;
        }
        if !is_mountpoint(&root)? {
            run(
                Command::new("mount").args(["-o", "loop,noatime"]).arg(&image).arg(&root),
                "mounting the layers volume",
            )
            .map_err(|e| io::Error::new(e.kind(), format!("{e}{NO_VOLUME_HINT}")))?;
        }
        run(Command::new("btrfs").args(["quota", "enable"]).arg(&root), "enabling quotas on the layers volume")?;
        match remove_stale_qgroups(&root) {
            Ok(0) => {}
            Ok(n) => tracing::info!("removed {n} stale qgroups of deleted subvolumes from the layers volume"),
            Err(e) => tracing::warn!("{e}"),
        }
        Ok(Volume { root })
    }

    /// Directory holding the sandboxes' subvolumes.
    pub fn sandboxes(&self) -> PathBuf {
        self.root.join("sandboxes")
    }
}

fn is_mountpoint(p: &Path) -> io::Result<bool> {
    let canon = fs::canonicalize(p)?;
    let mountinfo = fs::read_to_string("/proc/self/mountinfo")?;
    Ok(mountinfo.lines().any(|l| l.split(' ').nth(4) == Some(canon.to_str().unwrap_or(""))))
}

fn vol_args(name: &str) -> io::Result<VolArgs> {
    let mut args = VolArgs { fd: 0, name: [0; NAME_MAX] };
    let b = name.as_bytes();
    if b.is_empty() || b.len() >= NAME_MAX || b.contains(&0) || b.contains(&b'/') {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("bad subvolume name {name:?}")));
    }
    args.name[..b.len()].copy_from_slice(b);
    Ok(args)
}

/// Creates subvolume `dir` (its parent must exist on a btrfs filesystem).
pub fn create_subvolume(dir: &Path) -> io::Result<()> {
    let (parent, name) = split(dir)?;
    let p = File::open(parent)?;
    let args = vol_args(name)?;
    // SAFETY: BTRFS_IOC_SUBVOL_CREATE reads a valid vol_args on a directory fd.
    unsafe { btrfs_subvol_create(p.as_raw_fd(), &args) }.map_err(|e| io::Error::from_raw_os_error(e as i32))?;
    Ok(())
}

/// Caps the bytes subvolume `dir` may reference; writes past it fail with EDQUOT.
pub fn limit_subvolume(dir: &Path, bytes: u64) -> io::Result<()> {
    let d = File::open(dir)?;
    let mut args = QgroupLimitArgs {
        qgroupid: 0, // 0 = the qgroup of the subvolume the fd is in
        lim: QgroupLimit { flags: QGROUP_LIMIT_MAX_RFER, max_rfer: bytes, ..Default::default() },
    };
    // SAFETY: BTRFS_IOC_QGROUP_LIMIT on a subvolume fd with a valid args struct.
    unsafe { btrfs_qgroup_limit(d.as_raw_fd(), &mut args) }.map_err(|e| io::Error::from_raw_os_error(e as i32))?;
    Ok(())
}

/// Makes `dst` a copy-on-write snapshot of subvolume `src` (O(1): no data is copied). The caller syncs
/// `src` first if it is in use.
pub fn snapshot(src: &Path, dst: &Path, readonly: bool) -> io::Result<()> {
    let (parent, name) = split(dst)?;
    let p = File::open(parent)?;
    let s = File::open(src)?;
    let mut args = VolArgsV2 {
        fd: s.as_raw_fd() as i64,
        transid: 0,
        flags: if readonly { SUBVOL_RDONLY } else { 0 },
        unused: [0; 4],
        name: [0; 4040],
    };
    let b = name.as_bytes();
    if b.len() >= args.name.len() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "snapshot name too long"));
    }
    args.name[..b.len()].copy_from_slice(b);
    // SAFETY: BTRFS_IOC_SNAP_CREATE_V2 reads a valid args struct; both fds are open.
    unsafe { btrfs_snap_create_v2(p.as_raw_fd(), &args) }.map_err(|e| io::Error::from_raw_os_error(e as i32))?;
    Ok(())
}

/// Bytes subvolume `dir` references (its qgroup's `rfer`: data it shares with other subvolumes
/// counts too), as btrfs accounts them at the last commit. The caller syncs first for a current figure.
pub fn referenced_bytes(dir: &Path) -> io::Result<u64> {
    let out = Command::new("btrfs").args(["qgroup", "show", "--raw", "-f"]).arg(dir).output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "reading the size of {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            f.next().filter(|q| q.starts_with("0/"))?;
            f.next()?.parse().ok()
        })
        .ok_or_else(|| io::Error::other(format!("no qgroup for {} in `btrfs qgroup show`", dir.display())))
}

/// Flushes every dirty page of the filesystem holding `dir` (syncfs): after it returns, every file
/// written there so far survives a crash.
pub fn sync(dir: &Path) -> io::Result<()> {
    let d = File::open(dir)?;
    // SAFETY: syncfs on an open fd.
    if unsafe { libc::syncfs(d.as_raw_fd()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Moves every owner and group in the tree at `dir` from one sandbox id range to another (`old_base+n`
/// becomes `new_base+n`), so a layer made by one sandbox can serve another with its own host ids.
/// Ids outside the old range (image files owned by unmapped ids) are left alone. The tree is the
/// sandbox's: the walk follows no link and changes owners with `AT_SYMLINK_NOFOLLOW`
/// ([`crate::tree`]).
pub fn shift_owners(dir: &Path, old_base: u32, new_base: u32) -> io::Result<u64> {
    if old_base == new_base {
        return Ok(0);
    }
    let shift = |id: u32| -> Option<u32> {
        (id >= old_base && id < old_base + crate::UID_RANGE).then(|| id - old_base + new_base)
    };
    let mut changed = 0u64;
    crate::tree::walk(
        dir,
        |e| {
            let (uid, gid) = (shift(e.stat.st_uid), shift(e.stat.st_gid));
            if uid.is_some() || gid.is_some() {
                e.chown(uid, gid)?;
                // chown clears set-uid and set-gid bits of regular files: put the mode back.
                if e.is_file() && e.stat.st_mode & 0o6000 != 0 {
                    e.chmod(e.stat.st_mode & 0o7777)?;
                }
                changed += 1;
            }
            Ok(crate::tree::Step::Descend)
        },
        |_, _| Ok(()),
    )?;
    Ok(changed)
}

/// Deletes subvolume `dir` with everything in it. A plain directory is removed recursively instead.
pub fn remove_subvolume(dir: &Path) -> io::Result<()> {
    let (parent, name) = split(dir)?;
    let p = match File::open(parent) {
        Ok(p) => p,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let args = vol_args(name)?;
    let qgroup = subvolume_id(dir);
    // SAFETY: BTRFS_IOC_SNAP_DESTROY reads a valid vol_args on the parent directory fd.
    match unsafe { btrfs_snap_destroy(p.as_raw_fd(), &args) } {
        Ok(_) => {
            if let Some(id) = qgroup {
                forget_qgroup(&p, id);
            }
            Ok(())
        }
        Err(nix::Error::ENOENT) => Ok(()),
        // Not a subvolume (or not btrfs): an ordinary directory, written by the sandbox.
        Err(nix::Error::EINVAL | nix::Error::ENOTTY | nix::Error::EPERM) => crate::tree::remove_tree(dir),
        Err(e) => Err(io::Error::from_raw_os_error(e as i32)),
    }
}

/// The id of subvolume `dir` (and of its level-0 qgroup), if `dir` is the root of a btrfs subvolume.
fn subvolume_id(dir: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    // A subvolume's root directory is always inode 256; a plain directory is not a subvolume. No link
    // is followed: the sandbox owns what is inside, not the subvolume's own directory.
    let meta = fs::symlink_metadata(dir).ok()?;
    if !meta.is_dir() || meta.ino() != SUBVOLUME_ROOT_INODE {
        return None;
    }
    let d = File::open(dir).ok()?;
    let mut args = InoLookupArgs { treeid: 0, objectid: SUBVOLUME_ROOT_INODE, name: [0; 4080] };
    // SAFETY: BTRFS_IOC_INO_LOOKUP reads and writes a valid args struct on an open fd.
    unsafe { btrfs_ino_lookup(d.as_raw_fd(), &mut args) }.ok()?;
    Some(args.treeid)
}

/// Qgroups of deleted subvolumes the kernel would not destroy yet, `(device, id)`: retried at every
/// later deletion on the same filesystem, and swept at the next start.
static PENDING_QGROUPS: std::sync::Mutex<Vec<(u64, u64)>> = std::sync::Mutex::new(Vec::new());

/// Destroys the level-0 qgroup `id` of a subvolume just deleted on the filesystem of `fs`, now or, when
/// the kernel refuses while the subvolume is still being dropped, at a later deletion.
///
/// Linux before 6.10 keeps a deleted subvolume's qgroup forever (`<stale>` in `btrfs qgroup show`): one
/// per sandbox ever deleted, each slowing every later quota update. And since the stable fix "forbid
/// deleting live subvol qgroup" (in 6.1 too) it refuses with EBUSY while the qgroup still counts bytes,
/// that is until the cleaner has dropped the subvolume, seconds later. Newer kernels remove the qgroup
/// themselves once the drop is done, so for them the retries only ever find ENOENT.
fn forget_qgroup(fs: &File, id: u64) {
    use std::os::unix::fs::MetadataExt;
    let Ok(dev) = fs.metadata().map(|m| m.dev()) else { return };
    let mut pending = PENDING_QGROUPS.lock().unwrap_or_else(|p| p.into_inner());
    pending.push((dev, id));
    pending.retain(|&(d, q)| d != dev || !destroy_qgroup(fs, q));
}

/// Tries to destroy level-0 qgroup `id` on the filesystem of `fs`; whether it is gone.
fn destroy_qgroup(fs: &File, id: u64) -> bool {
    let args = QgroupCreateArgs { create: 0, qgroupid: id };
    // SAFETY: BTRFS_IOC_QGROUP_CREATE reads a valid args struct on an open fd.
    match unsafe { btrfs_qgroup_create(fs.as_raw_fd(), &args) } {
        Ok(_) | Err(nix::Error::ENOENT) => true,
        // Still counting the bytes of a subvolume being dropped: later.
        Err(nix::Error::EBUSY) => false,
        Err(e) => {
            tracing::warn!("destroying the qgroup 0/{id} of a deleted subvolume: {e}");
            true
        }
    }
}

/// Destroys the qgroups of subvolumes deleted before (by a daemon that crashed, or an older version):
/// `btrfs qgroup show` marks them `<stale>`. Returns how many went.
fn remove_stale_qgroups(root: &Path) -> io::Result<usize> {
    let out = Command::new("btrfs").args(["qgroup", "show", "--raw"]).arg(root).output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "listing the qgroups of {}: {}",
            root.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let fs = File::open(root)?;
    let stale = stale_qgroups(&String::from_utf8_lossy(&out.stdout));
    Ok(stale.into_iter().filter(|id| destroy_qgroup(&fs, *id)).count())
}

/// The level-0 qgroup ids that a `btrfs qgroup show` listing marks `<stale>`.
fn stale_qgroups(listing: &str) -> Vec<u64> {
    listing
        .lines()
        .filter(|l| l.split_whitespace().last() == Some("<stale>"))
        .filter_map(|l| l.split_whitespace().next()?.strip_prefix("0/")?.parse().ok())
        .collect()
}

fn split(dir: &Path) -> io::Result<(&Path, &str)> {
    match (dir.parent(), dir.file_name().and_then(|n| n.to_str())) {
        (Some(p), Some(n)) => Ok((p, n)),
        _ => Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{}: not a subvolume path", dir.display()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_stale_qgroups_in_a_listing() {
        let listing = "Qgroupid    Referenced    Exclusive   Path \n--------    ----------    ---------   ---- \n\
                       0/5              16384        16384   <toplevel>\n0/256          5263360      5263360   <stale>\n\
                       0/257            16384        16384   sandboxes/sb_a\n1/100            16384        16384   <stale>\n";
        assert_eq!(stale_qgroups(listing), vec![256]);
    }

    /// Unmounts the test's volume however the test ends (the loop device goes with the mount).
    struct Mounted(PathBuf);

    impl Drop for Mounted {
        fn drop(&mut self) {
            let _ = nix::mount::umount(&self.0);
        }
    }

    /// A volume on which sandboxes were made and deleted keeps no qgroup of theirs once the kernel has
    /// dropped them: Linux 6.1 kept one per deleted subvolume and refuses to destroy it until the drop is
    /// done; the next deletion destroys it (newer kernels drop it themselves).
    #[test]
    fn deleted_subvolumes_leave_no_qgroup_behind() {
        let state = tempfile::tempdir().unwrap();
        let vol = Volume::open(state.path(), 1).unwrap();
        let _mounted = Mounted(vol.root.clone());
        fs::create_dir_all(vol.sandboxes()).unwrap();
        let cycle = |name: &str| {
            let sb = vol.sandboxes().join(name);
            create_subvolume(&sb).unwrap();
            limit_subvolume(&sb, 64 << 20).unwrap();
            fs::write(sb.join("data"), vec![7u8; 1 << 20]).unwrap();
            sync(&sb).unwrap();
            let id = subvolume_id(&sb).expect("a subvolume's id");
            remove_subvolume(&sb).unwrap();
            id
        };
        let level0 = || {
            let out = Command::new("btrfs").args(["qgroup", "show", "--raw"]).arg(&vol.root).output().unwrap();
            let listing = String::from_utf8_lossy(&out.stdout).into_owned();
            let ids: Vec<String> = listing
                .lines()
                .filter_map(|l| l.split_whitespace().next())
                .filter(|q| q.starts_with("0/") && *q != "0/5")
                .map(str::to_string)
                .collect();
            (ids, listing)
        };
        for i in 0..3 {
            cycle(&format!("sb_{i}"));
        }
        // Let the cleaner drop the deleted subvolumes, as time would (BTRFS_IOC_SYNC wakes it).
        run(Command::new("btrfs").args(["filesystem", "sync"]).arg(&vol.root), "syncing").unwrap();
        run(Command::new("btrfs").args(["subvolume", "sync"]).arg(&vol.root), "waiting for deleted subvolumes")
            .unwrap();
        // The next deletion takes the dropped ones' qgroups with it; only its own may still be there.
        let last = cycle("sb_last");
        let (left, listing) = level0();
        assert!(
            left.iter().all(|q| *q == format!("0/{last}")),
            "qgroups of dropped subvolumes left (the last deleted is 0/{last}):\n{listing}"
        );
        // And a start sweeps what is left once it is dropped. (6.1 zeroes a dropped subvolume's qgroup
        // at the commit after the drop, hence the second sync.)
        run(Command::new("btrfs").args(["filesystem", "sync"]).arg(&vol.root), "syncing").unwrap();
        run(Command::new("btrfs").args(["subvolume", "sync"]).arg(&vol.root), "waiting").unwrap();
        run(Command::new("btrfs").args(["filesystem", "sync"]).arg(&vol.root), "syncing").unwrap();
        remove_stale_qgroups(&vol.root).unwrap();
        let (left, listing) = level0();
        assert!(left.is_empty(), "qgroups left after the sweep:\n{listing}");
    }
}
