//! Host-side operations on a sandbox-owned tree: a writable layer, a snapshot of one.
//!
//! Everything below such a tree's root was written by the sandbox's own root and is hostile: any entry
//! may be a symlink to a host file (`/etc/shadow`, another tenant's layer, `/dev/null`), a FIFO, a
//! hard-to-walk 30,000-level chain of directories. The daemon is host root, so a path-based call that
//! follows a link writes or chowns whatever the sandbox chose. This module is the one place where the
//! daemon touches such a tree, and it never resolves a path through it:
//!
//! - a single component is opened relative to its parent's descriptor with `O_NOFOLLOW`, a path of
//!   several with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
//!   RESOLVE_NO_XDEV)`;
//! - metadata is read with `fstatat(AT_SYMLINK_NOFOLLOW)`, owners changed with
//!   `fchownat(AT_SYMLINK_NOFOLLOW)`, modes with `fchmod` on a descriptor of a regular file or
//!   directory that was opened without following links;
//! - a file the daemon generates is written by unlinking whatever has its name and creating it anew
//!   with `O_CREAT | O_EXCL | O_NOFOLLOW`, so neither a symlink nor a hard link is written through;
//! - walks are iterative with a bounded number of open descriptors (see [`walk`]), so no depth of
//!   tree overflows the daemon's stack or spends its descriptors.
//!
//! Callers run these while no process of the sandbox exists (a stopped layer, a fresh copy of a
//! snapshot, a layer being deleted); the rules above hold even if one did.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{openat, openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{fstat, fstatat, FileStat, Mode, SFlag};
use nix::unistd::{fchownat, unlinkat, Gid, Uid, UnlinkatFlags};

/// Directory descriptors a walk keeps open at most. Deeper levels are reached again through `..` of
/// the level below them (checked by device and inode), so a deep tree costs memory for its names, not
/// descriptors, which the daemon shares with every other sandbox.
const WALK_OPEN_DIRS: usize = 16;

fn errno(e: nix::Error) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

fn own(fd: std::os::fd::RawFd) -> OwnedFd {
    // SAFETY: `fd` was just returned by a successful open call and is owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Opens directory `path`, which the daemon itself made and trusts (a layer's `upper`, a snapshot's
/// root), refusing a symlink in its last component.
pub fn open_root(path: &Path) -> io::Result<OwnedFd> {
    let fd =
        openat(None, path, OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_RDONLY, Mode::empty())
            .map_err(errno)?;
    Ok(own(fd))
}

/// Opens directory `rel` beneath `root` without following any symlink on the way, nor leaving `root`
/// or its filesystem.
pub fn open_dir_beneath(root: BorrowedFd<'_>, rel: &Path) -> io::Result<OwnedFd> {
    let how =
        OpenHow::new().flags(OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_RDONLY).resolve(
            ResolveFlag::RESOLVE_BENEATH
                | ResolveFlag::RESOLVE_NO_SYMLINKS
                | ResolveFlag::RESOLVE_NO_MAGICLINKS
                | ResolveFlag::RESOLVE_NO_XDEV,
        );
    let fd = openat2(root.as_raw_fd(), rel, how).map_err(errno)?;
    Ok(own(fd))
}

/// Replaces file `name` in directory `dir` with a new regular file holding `body`, owned by
/// `owner:owner` with `mode`. Whatever had the name before (a symlink, a hard link to another file, a
/// FIFO) is unlinked, never written through; a directory of that name is an error.
pub fn replace_file(dir: BorrowedFd<'_>, name: &str, body: &[u8], owner: u32, mode: u32) -> io::Result<()> {
    match unlinkat(Some(dir.as_raw_fd()), name, UnlinkatFlags::NoRemoveDir) {
        Ok(()) | Err(nix::Error::ENOENT) => {}
        Err(nix::Error::EISDIR) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{name} is a directory in the sandbox's layer; a generated file cannot replace it"),
            ))
        }
        Err(e) => return Err(errno(e)),
    }
    let fd = openat(
        Some(dir.as_raw_fd()),
        name,
        OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_WRONLY | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )
    .map_err(errno)?;
    let mut file = File::from(own(fd));
    file.write_all(body)?;
    nix::unistd::fchown(file.as_raw_fd(), Some(Uid::from_raw(owner)), Some(Gid::from_raw(owner))).map_err(errno)?;
    nix::sys::stat::fchmod(file.as_raw_fd(), Mode::from_bits_truncate(mode)).map_err(errno)
}

/// Opens directory `rel` beneath `root`, creating each missing component (owned by `owner:owner`,
/// `mode`) on the way. Each component is opened or made relative to its parent's descriptor with
/// `O_NOFOLLOW`: a symlink anywhere on the path is an error, never followed.
pub fn make_dirs_beneath(root: BorrowedFd<'_>, rel: &Path, owner: u32, mode: u32) -> io::Result<OwnedFd> {
    let mut dir = nix::unistd::dup(root.as_raw_fd()).map(own).map_err(errno)?;
    for c in rel.components() {
        let std::path::Component::Normal(name) = c else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a plain relative path", rel.display()),
            ));
        };
        match nix::sys::stat::mkdirat(Some(dir.as_raw_fd()), name, Mode::from_bits_truncate(mode)) {
            Ok(()) => {
                fchownat(
                    Some(dir.as_raw_fd()),
                    name,
                    Some(Uid::from_raw(owner)),
                    Some(Gid::from_raw(owner)),
                    nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
                )
                .map_err(errno)?;
            }
            Err(nix::Error::EEXIST) => {}
            Err(e) => return Err(errno(e)),
        }
        let fd = openat(
            Some(dir.as_raw_fd()),
            name,
            OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_RDONLY,
            Mode::empty(),
        )
        .map_err(|e| {
            io::Error::new(
                errno(e).kind(),
                format!("{}: {} is not a plain directory ({e})", rel.display(), Path::new(name).display()),
            )
        })?;
        dir = own(fd);
    }
    Ok(dir)
}

/// Reads regular file `rel` beneath `root` (at most `max` bytes), resolving links as the sandbox would
/// but never outside `root` (`RESOLVE_IN_ROOT`: `..` and absolute targets stay inside). `None` when it
/// does not exist or is not a regular file; an error when it is larger than `max`.
pub fn read_beneath(root: BorrowedFd<'_>, rel: &Path, max: u64) -> io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    let how = OpenHow::new()
        .flags(OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK | OFlag::O_NOCTTY)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS | ResolveFlag::RESOLVE_NO_XDEV);
    let fd = match openat2(root.as_raw_fd(), rel, how) {
        Ok(fd) => own(fd),
        Err(nix::Error::ENOENT | nix::Error::ENOTDIR | nix::Error::ELOOP | nix::Error::EXDEV) => return Ok(None),
        Err(e) => return Err(errno(e)),
    };
    let st = fstat(fd.as_raw_fd()).map_err(errno)?;
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
        return Ok(None);
    }
    if st.st_size as u64 > max {
        return Err(io::Error::other(format!("{} is {} bytes, over the {max} this reads", rel.display(), st.st_size)));
    }
    let mut body = Vec::with_capacity(st.st_size as usize);
    File::from(fd).take(max).read_to_end(&mut body)?;
    Ok(Some(body))
}

/// One entry of a walked tree, seen without following links.
pub struct Entry<'a> {
    /// The directory holding the entry (for the root, the root itself, with `name` `.`).
    pub dir: BorrowedFd<'a>,
    /// The entry's name in `dir`.
    pub name: &'a CStr,
    /// Its metadata (`fstatat` with `AT_SYMLINK_NOFOLLOW`).
    pub stat: &'a FileStat,
    /// Its path from the walk's root (`.` for the root), built from the names walked: for reports
    /// and archives, never to be opened.
    pub path: &'a Path,
}

impl Entry<'_> {
    /// Whether the entry is a directory (a real one: a symlink to a directory is a symlink).
    pub fn is_dir(&self) -> bool {
        is_type(self.stat, SFlag::S_IFDIR)
    }

    /// Whether the entry is a regular file.
    pub fn is_file(&self) -> bool {
        is_type(self.stat, SFlag::S_IFREG)
    }

    /// Unlinks the entry (not a directory); one that is already gone is not an error.
    pub fn remove_file(&self) -> io::Result<()> {
        match unlinkat(Some(self.dir.as_raw_fd()), self.name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(nix::Error::ENOENT) => Ok(()),
            Err(e) => Err(errno(e)),
        }
    }

    /// Changes the entry's owner and group (`None` leaves one as it is), never through a symlink.
    pub fn chown(&self, uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
        fchownat(
            Some(self.dir.as_raw_fd()),
            self.name,
            uid.map(Uid::from_raw),
            gid.map(Gid::from_raw),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(errno)
    }

    /// Sets the mode of a regular file or directory, on a descriptor opened without following links
    /// (`fchmodat` has no working no-follow flag on Linux). Other kinds are left alone.
    pub fn chmod(&self, mode: u32) -> io::Result<()> {
        if !(self.is_file() || self.is_dir()) {
            return Ok(());
        }
        // O_PATH opens even a file without read permission, and never a FIFO's other end.
        let fd = openat(
            Some(self.dir.as_raw_fd()),
            self.name,
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(errno)?;
        let fd = own(fd);
        let st = fstat(fd.as_raw_fd()).map_err(errno)?;
        if (st.st_dev, st.st_ino) != (self.stat.st_dev, self.stat.st_ino) {
            return Err(io::Error::other("the entry changed while it was being walked"));
        }
        // fchmod does not take an O_PATH descriptor; its /proc/self/fd link reaches the same inode
        // without resolving any path in the tree.
        let proc = format!("/proc/self/fd/{}", fd.as_raw_fd());
        nix::sys::stat::fchmodat(
            None,
            proc.as_str(),
            Mode::from_bits_truncate(mode),
            nix::sys::stat::FchmodatFlags::FollowSymlink,
        )
        .map_err(errno)
    }
}

fn is_type(st: &FileStat, kind: SFlag) -> bool {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == kind
}

/// What to do with a directory the walk reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Walk into it.
    Descend,
    /// Leave its contents alone.
    Skip,
}

/// Visits every entry of the tree at `root` (the root first, as `.`), parents before children. For
/// each directory `visit` returned [`Step::Descend`] for, `leave(parent, name)` runs once all its
/// entries were visited (children before parents: where a removal would run).
///
/// Iterative: any depth costs heap for the names still to visit and at most `WALK_OPEN_DIRS` (16)
/// descriptors.
pub fn walk(
    root: &Path,
    visit: impl FnMut(&Entry<'_>) -> io::Result<Step>,
    leave: impl FnMut(BorrowedFd<'_>, &CStr) -> io::Result<()>,
) -> io::Result<()> {
    walk_fd(open_root(root)?, visit, leave)
}

/// [`walk`] from a directory descriptor the caller opened without following links (the root is
/// visited as `.` of itself).
pub fn walk_fd(
    root_fd: OwnedFd,
    mut visit: impl FnMut(&Entry<'_>) -> io::Result<Step>,
    mut leave: impl FnMut(BorrowedFd<'_>, &CStr) -> io::Result<()>,
) -> io::Result<()> {
    struct Level {
        fd: Option<OwnedFd>,
        dev: u64,
        ino: u64,
        /// This directory's name in its parent (`.` for the root).
        name: CString,
        /// Its path from the root (empty for the root).
        rel: PathBuf,
        /// Subdirectories still to walk into.
        pending: Vec<CString>,
    }

    let dot = CString::new(".").expect("no NUL");
    let st = fstat(root_fd.as_raw_fd()).map_err(errno)?;
    if visit(&Entry { dir: root_fd.as_fd(), name: &dot, stat: &st, path: Path::new(".") })? == Step::Skip {
        return Ok(());
    }
    let pending = list(&root_fd, Path::new(""), &mut visit)?;
    let mut stack = vec![Level {
        fd: Some(root_fd),
        dev: st.st_dev,
        ino: st.st_ino,
        name: dot.clone(),
        rel: PathBuf::new(),
        pending,
    }];
    while let Some(top) = stack.last_mut() {
        if let Some(name) = top.pending.pop() {
            let parent = top.fd.as_ref().expect("the deepest level is open");
            let fd = match openat(
                Some(parent.as_raw_fd()),
                name.as_c_str(),
                OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_RDONLY,
                Mode::empty(),
            ) {
                Ok(fd) => own(fd),
                // Gone, or replaced by a non-directory since it was listed: nothing below to walk.
                Err(nix::Error::ENOENT | nix::Error::ENOTDIR | nix::Error::ELOOP) => continue,
                Err(e) => return Err(errno(e)),
            };
            let st = fstat(fd.as_raw_fd()).map_err(errno)?;
            let rel = top.rel.join(std::ffi::OsStr::from_bytes(name.to_bytes()));
            let pending = list(&fd, &rel, &mut visit)?;
            stack.push(Level { fd: Some(fd), dev: st.st_dev, ino: st.st_ino, name, rel, pending });
            if stack.len() > WALK_OPEN_DIRS {
                let idx = stack.len() - WALK_OPEN_DIRS - 1;
                stack[idx].fd = None;
            }
            continue;
        }
        let done = stack.pop().expect("top exists");
        let Some(parent) = stack.last_mut() else {
            return Ok(());
        };
        let done_fd = done.fd.expect("the deepest level is open");
        if parent.fd.is_none() {
            let fd = own(openat(
                Some(done_fd.as_raw_fd()),
                "..",
                OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_RDONLY,
                Mode::empty(),
            )
            .map_err(errno)?);
            let st = fstat(fd.as_raw_fd()).map_err(errno)?;
            if (st.st_dev, st.st_ino) != (parent.dev, parent.ino) {
                return Err(io::Error::other("a directory moved while the tree was being walked"));
            }
            parent.fd = Some(fd);
        }
        drop(done_fd);
        leave(parent.fd.as_ref().expect("reopened above").as_fd(), &done.name)?;
    }
    Ok(())
}

/// Visits every entry of directory `dir` and returns the subdirectories to walk into.
fn list(
    dir: &OwnedFd,
    dir_rel: &Path,
    visit: &mut impl FnMut(&Entry<'_>) -> io::Result<Step>,
) -> io::Result<Vec<CString>> {
    let mut names = Vec::new();
    let mut d = nix::dir::Dir::openat(
        Some(dir.as_raw_fd()),
        ".",
        OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno)?;
    for ent in d.iter() {
        let ent = ent.map_err(errno)?;
        let name = ent.file_name();
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        let st = match fstatat(Some(dir.as_raw_fd()), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(nix::Error::ENOENT) => continue,
            Err(e) => return Err(errno(e)),
        };
        let path = dir_rel.join(std::ffi::OsStr::from_bytes(name.to_bytes()));
        let entry = Entry { dir: dir.as_fd(), name, stat: &st, path: &path };
        if visit(&entry)? == Step::Descend && entry.is_dir() {
            names.push(name.to_owned());
        }
    }
    Ok(names)
}

/// Removes the tree at `root` and `root` itself, without following any link in it and at any depth.
pub fn remove_tree(root: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(root) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
        Ok(m) if !m.is_dir() => return std::fs::remove_file(root),
        Ok(_) => {}
    }
    empty_dir(open_root(root)?)?;
    std::fs::remove_dir(root)
}

/// Removes whatever has `name` in directory `dir`: a file, symlink, FIFO or socket is unlinked (a
/// symlink itself, never its target), a directory removed with everything below it, iteratively and
/// without following any link. A name that does not exist is not an error; `.`, `..` and the empty
/// name are refused (they would name `dir` or its parent, not an entry of it).
pub fn remove_beneath(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    if matches!(name.to_bytes(), b"" | b"." | b"..") {
        // `..` would empty the directory's parent, `.` the directory itself.
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{name:?} is not an entry of the directory")));
    }
    match unlinkat(Some(dir.as_raw_fd()), name, UnlinkatFlags::NoRemoveDir) {
        Ok(()) | Err(nix::Error::ENOENT) => return Ok(()),
        Err(nix::Error::EISDIR) => {}
        Err(e) => return Err(errno(e)),
    }
    let fd = match openat(
        Some(dir.as_raw_fd()),
        name,
        OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_RDONLY,
        Mode::empty(),
    ) {
        Ok(fd) => own(fd),
        Err(nix::Error::ENOENT) => return Ok(()),
        Err(e) => return Err(errno(e)),
    };
    empty_dir(fd)?;
    match unlinkat(Some(dir.as_raw_fd()), name, UnlinkatFlags::RemoveDir) {
        Ok(()) | Err(nix::Error::ENOENT) => Ok(()),
        Err(e) => Err(errno(e)),
    }
}

/// Removes everything below the directory `fd` (not the directory itself).
fn empty_dir(fd: OwnedFd) -> io::Result<()> {
    walk_fd(
        fd,
        |e| {
            if e.is_dir() {
                return Ok(Step::Descend);
            }
            e.remove_file().map(|()| Step::Skip)
        },
        |parent, name| match unlinkat(Some(parent.as_raw_fd()), name, UnlinkatFlags::RemoveDir) {
            Ok(()) | Err(nix::Error::ENOENT) => Ok(()),
            Err(err) => Err(errno(err)),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, MetadataExt};

    fn tempdir(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("sandlot-tree-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn replace_file_unlinks_a_planted_symlink_instead_of_writing_through_it() {
        let d = tempdir("replace");
        let victim = d.join("victim");
        std::fs::write(&victim, "host data").unwrap();
        let tree = d.join("tree");
        std::fs::create_dir(&tree).unwrap();
        symlink(&victim, tree.join("hosts")).unwrap();
        let fd = open_root(&tree).unwrap();
        replace_file(fd.as_fd(), "hosts", b"generated\n", 0, 0o644).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "host data");
        let m = std::fs::symlink_metadata(tree.join("hosts")).unwrap();
        assert!(m.is_file(), "a regular file replaced the link");
        assert_eq!(m.mode() & 0o7777, 0o644);
        assert_eq!(std::fs::read_to_string(tree.join("hosts")).unwrap(), "generated\n");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn open_dir_beneath_refuses_a_symlinked_directory() {
        let d = tempdir("beneath");
        let tree = d.join("tree");
        std::fs::create_dir(&tree).unwrap();
        symlink("/etc", tree.join("etc")).unwrap();
        let fd = open_root(&tree).unwrap();
        let err = open_dir_beneath(fd.as_fd(), Path::new("etc")).unwrap_err();
        // ELOOP from RESOLVE_NO_SYMLINKS, or ENOTDIR from O_DIRECTORY | O_NOFOLLOW on the link itself.
        assert!(matches!(err.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)), "{err}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn remove_tree_handles_any_depth_with_few_descriptors_and_spares_link_targets() {
        let d = tempdir("remove");
        let outside = d.join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), "x").unwrap();
        let tree = d.join("tree");
        std::fs::create_dir(&tree).unwrap();
        // 3,000 levels (std's recursive remove_dir_all holds a descriptor per level); a link at the
        // bottom and one at the top point out of the tree.
        // The chain is longer than PATH_MAX, so it is built one level at a time.
        let mut fd = open_root(&tree).unwrap();
        for _ in 0..3000 {
            nix::sys::stat::mkdirat(Some(fd.as_raw_fd()), "d", Mode::from_bits_truncate(0o755)).unwrap();
            fd = own(openat(Some(fd.as_raw_fd()), "d", OFlag::O_DIRECTORY | OFlag::O_RDONLY, Mode::empty()).unwrap());
        }
        let out = CString::new(outside.as_os_str().as_encoded_bytes()).unwrap();
        nix::unistd::symlinkat(out.as_c_str(), Some(fd.as_raw_fd()), "out").unwrap();
        drop(fd);
        symlink(&outside, tree.join("out")).unwrap();
        std::fs::write(tree.join("d").join("f"), "y").unwrap();
        let fds_before = std::fs::read_dir("/proc/self/fd").unwrap().count();
        let mut max_fds = 0;
        walk(
            &tree,
            |_| {
                max_fds = max_fds.max(std::fs::read_dir("/proc/self/fd").map(|r| r.count()).unwrap_or(0));
                Ok(Step::Descend)
            },
            |_, _| Ok(()),
        )
        .unwrap();
        assert!(max_fds <= fds_before + WALK_OPEN_DIRS + 4, "walk held {max_fds} fds (before: {fds_before})");
        remove_tree(&tree).unwrap();
        assert!(!tree.exists());
        assert_eq!(std::fs::read_to_string(outside.join("keep")).unwrap(), "x");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
