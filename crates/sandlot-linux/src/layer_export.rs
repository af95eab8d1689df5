//! A sandbox's writable layer written out as an OCI layer tar: what a build step or a published
//! snapshot adds to the image below it.
//!
//! The upper directory was written by the sandbox and is hostile (see [`crate::tree`]): it is walked
//! with [`tree::walk`], which follows no link; each regular file is opened relative to its parent's
//! descriptor with `O_NOFOLLOW | O_NONBLOCK` (a FIFO swapped in opens without blocking and is then
//! refused by its changed inode) and read for exactly the size `fstat` gave. What the overlay wrote is
//! turned into the OCI forms:
//!
//! - a whiteout (a character device 0/0) becomes an empty `.wh.NAME`;
//! - an opaque directory (xattr `user.overlay.opaque` = `y`; the overlay runs with `userxattr`) gets
//!   a `DIR/.wh..wh..opq` entry after its own;
//! - owners are shifted from the sandbox's host range back to image ids 0..65535; an id outside the
//!   range (which the sandbox cannot make, but a copied-in layer might hold) becomes 65534 (nobody)
//!   and is reported;
//! - `user.*` xattrs other than `user.overlay.*` are kept as PAX `SCHILY.xattr.*` records;
//! - hard links (one inode under several names) become a file and tar link entries to it;
//! - FIFOs are kept; other devices and sockets are left out and reported;
//! - sandlot's own per-sandbox files (`etc/hostname`, `etc/hosts`, `etc/resolv.conf`) are left out:
//!   every sandbox gets its own.

use std::collections::HashMap;
use std::ffi::CStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstat, Mode, SFlag};

use crate::{tree, IdRange, UID_RANGE};

/// The id a file gets when its host owner is outside the sandbox's range.
pub const NOBODY: u32 = 65534;
/// Per-sandbox files sandlot writes into every layer, never part of an image.
const GENERATED: &[&str] = &["etc/hostname", "etc/hosts", "etc/resolv.conf"];
/// Most report lines kept (the counts are exact).
const MAX_REPORTED: usize = 20;
/// Most bytes of xattr names and values read for one entry.
const MAX_XATTR_BYTES: usize = 64 << 10;

/// What an export wrote and left out.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Exported {
    /// Entries written.
    pub entries: u64,
    /// Bytes of file data written.
    pub bytes: u64,
    /// Devices and sockets left out (the first few paths).
    pub skipped: Vec<String>,
    /// Entries whose owner was outside the sandbox's range and became 65534 (the first few paths).
    pub remapped: Vec<String>,
}

fn errno(e: nix::Error) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

fn note(list: &mut Vec<String>, path: &Path) {
    if list.len() < MAX_REPORTED {
        list.push(path.to_string_lossy().into_owned());
    }
}

/// Writes the layer at `upper` (its files owned by host ids of `ids`) to `out` as a tar.
pub fn export_upper(upper: &Path, ids: IdRange, out: impl Write) -> io::Result<Exported> {
    let mut tar = tar::Builder::new(out);
    let mut report = Exported::default();
    let mut links: HashMap<(u64, u64), PathBuf> = HashMap::new();
    let mut failure: Option<io::Error> = None;
    tree::walk(
        upper,
        |e| {
            if e.path == Path::new(".") {
                return Ok(tree::Step::Descend);
            }
            if GENERATED.iter().any(|g| e.path == Path::new(g)) {
                return Ok(tree::Step::Skip);
            }
            match entry(&mut tar, e, ids, &mut links, &mut report) {
                Ok(step) => Ok(step),
                Err(err) => {
                    // Carried out whole: the walk's own error would lose which entry it was.
                    let err = io::Error::new(err.kind(), format!("{}: {err}", e.path.display()));
                    failure = Some(err);
                    Err(io::Error::other("export stopped"))
                }
            }
        },
        |_, _| Ok(()),
    )
    .map_err(|e| failure.take().unwrap_or(e))?;
    tar.into_inner()?.flush()?;
    Ok(report)
}

fn owner(id: u32, ids: IdRange, path: &Path, report: &mut Exported, noted: &mut bool) -> u64 {
    match id.checked_sub(ids.base) {
        Some(n) if n < UID_RANGE => n.into(),
        _ => {
            if !*noted {
                note(&mut report.remapped, path);
                *noted = true;
            }
            NOBODY.into()
        }
    }
}

fn header(e: &tree::Entry<'_>, ids: IdRange, report: &mut Exported) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    let mut noted = false;
    h.set_uid(owner(e.stat.st_uid, ids, e.path, report, &mut noted));
    h.set_gid(owner(e.stat.st_gid, ids, e.path, report, &mut noted));
    h.set_mode(e.stat.st_mode & 0o7777);
    h.set_mtime(e.stat.st_mtime.max(0) as u64);
    h.set_size(0);
    h
}

/// Opens entry `name` of `dir` without following a link or blocking on a FIFO, and checks it is the
/// inode the walk saw.
fn open_entry(dir: BorrowedFd<'_>, name: &CStr, st: &nix::sys::stat::FileStat, flags: OFlag) -> io::Result<OwnedFd> {
    let fd = openat(
        Some(dir.as_raw_fd()),
        name,
        flags | OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno)?;
    // SAFETY: `fd` was just returned by a successful openat and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let now = fstat(fd.as_raw_fd()).map_err(errno)?;
    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) {
        return Err(io::Error::other("the entry changed while the layer was exported"));
    }
    Ok(fd)
}

fn entry<W: Write>(
    tar: &mut tar::Builder<W>,
    e: &tree::Entry<'_>,
    ids: IdRange,
    links: &mut HashMap<(u64, u64), PathBuf>,
    report: &mut Exported,
) -> io::Result<tree::Step> {
    let kind = SFlag::from_bits_truncate(e.stat.st_mode) & SFlag::S_IFMT;
    let path = e.path;
    let mut h = header(e, ids, report);
    if kind == SFlag::S_IFDIR {
        let fd = open_entry(e.dir, e.name, e.stat, OFlag::O_DIRECTORY)?;
        let xattrs = user_xattrs(&fd)?;
        pax(tar, &xattrs.kept)?;
        h.set_entry_type(tar::EntryType::Directory);
        let mut name = path.as_os_str().as_bytes().to_vec();
        name.push(b'/');
        tar.append_data(&mut h, Path::new(std::ffi::OsStr::from_bytes(&name)), io::empty())?;
        report.entries += 1;
        if xattrs.opaque {
            let mut wh = tar::Header::new_gnu();
            wh.set_entry_type(tar::EntryType::Regular);
            wh.set_mode(0o644);
            wh.set_size(0);
            wh.set_mtime(e.stat.st_mtime.max(0) as u64);
            tar.append_data(&mut wh, path.join(".wh..wh..opq"), io::empty())?;
            report.entries += 1;
        }
        return Ok(tree::Step::Descend);
    }
    if kind == SFlag::S_IFREG {
        if e.stat.st_nlink > 1 {
            let key = (e.stat.st_dev, e.stat.st_ino);
            if let Some(first) = links.get(&key) {
                h.set_entry_type(tar::EntryType::Link);
                tar.append_link(&mut h, path, first)?;
                report.entries += 1;
                return Ok(tree::Step::Skip);
            }
            links.insert(key, path.to_path_buf());
        }
        let fd = open_entry(e.dir, e.name, e.stat, OFlag::empty())?;
        let xattrs = user_xattrs(&fd)?;
        pax(tar, &xattrs.kept)?;
        let size = fstat(fd.as_raw_fd()).map_err(errno)?.st_size.max(0) as u64;
        h.set_entry_type(tar::EntryType::Regular);
        h.set_size(size);
        let data = Exact { inner: File::from(fd).take(size), left: size };
        tar.append_data(&mut h, path, data)?;
        report.entries += 1;
        report.bytes += size;
        return Ok(tree::Step::Skip);
    }
    if kind == SFlag::S_IFLNK {
        let target = nix::fcntl::readlinkat(Some(e.dir.as_raw_fd()), e.name).map_err(errno)?;
        h.set_entry_type(tar::EntryType::Symlink);
        tar.append_link(&mut h, path, Path::new(&target))?;
        report.entries += 1;
        return Ok(tree::Step::Skip);
    }
    if kind == SFlag::S_IFCHR && e.stat.st_rdev == 0 {
        // An overlay whiteout: the name was deleted from the layers below.
        let wh_name = [b".wh.".as_slice(), e.name.to_bytes()].concat();
        let wh_path = path.parent().unwrap_or(Path::new("")).join(std::ffi::OsStr::from_bytes(&wh_name));
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mode(0o644);
        tar.append_data(&mut h, wh_path, io::empty())?;
        report.entries += 1;
        return Ok(tree::Step::Skip);
    }
    if kind == SFlag::S_IFIFO {
        h.set_entry_type(tar::EntryType::Fifo);
        tar.append_data(&mut h, path, io::empty())?;
        report.entries += 1;
        return Ok(tree::Step::Skip);
    }
    // Devices and sockets: an image carries neither (a sandbox cannot make a real device anyway).
    note(&mut report.skipped, path);
    Ok(tree::Step::Skip)
}

/// Exactly `left` bytes, or an error: a file that shrank while it was read is not silently padded.
struct Exact<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Exact<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let n = self.inner.read(buf)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the file shrank while it was exported"));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// The `user.*` xattrs of an entry (`user.overlay.*` aside) and whether the overlay marked it opaque.
struct Xattrs {
    kept: Vec<(String, Vec<u8>)>,
    opaque: bool,
}

fn user_xattrs(fd: &OwnedFd) -> io::Result<Xattrs> {
    let mut names = vec![0u8; MAX_XATTR_BYTES];
    // SAFETY: `names` is a writable buffer of the length passed; `fd` is an open descriptor.
    let n = unsafe { libc::flistxattr(fd.as_raw_fd(), names.as_mut_ptr().cast(), names.len()) };
    if n < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOTSUP) {
            return Ok(Xattrs { kept: vec![], opaque: false });
        }
        return Err(io::Error::new(e.kind(), format!("listing its xattrs: {e}")));
    }
    names.truncate(n as usize);
    let mut kept = Vec::new();
    let mut opaque = false;
    let mut budget = MAX_XATTR_BYTES;
    for name in names.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        if !name.starts_with(b"user.") {
            continue;
        }
        let cname = std::ffi::CString::new(name).expect("split at NUL");
        let mut value = vec![0u8; budget];
        // SAFETY: `cname` is NUL-terminated, `value` is a writable buffer of the length passed.
        let len = unsafe { libc::fgetxattr(fd.as_raw_fd(), cname.as_ptr(), value.as_mut_ptr().cast(), value.len()) };
        if len < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!(
                    "reading xattr {} (the entry's xattrs are limited to {MAX_XATTR_BYTES} bytes): {e}",
                    cname.to_string_lossy()
                ),
            ));
        }
        value.truncate(len as usize);
        if name == b"user.overlay.opaque" {
            opaque = value == b"y";
            continue;
        }
        if name.starts_with(b"user.overlay.") {
            continue;
        }
        budget = budget.saturating_sub(name.len() + value.len());
        kept.push((String::from_utf8_lossy(name).into_owned(), value));
    }
    Ok(Xattrs { kept, opaque })
}

fn pax<W: Write>(tar: &mut tar::Builder<W>, xattrs: &[(String, Vec<u8>)]) -> io::Result<()> {
    if xattrs.is_empty() {
        return Ok(());
    }
    let records: Vec<(String, &[u8])> =
        xattrs.iter().map(|(k, v)| (format!("SCHILY.xattr.{k}"), v.as_slice())).collect();
    tar.append_pax_extensions(records.iter().map(|(k, v)| (k.as_str(), *v)))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::fs;
    use std::os::fd::AsFd;
    use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
    use std::process::Command;

    use super::*;
    use crate::unpack::{self, UnpackLimits, IMAGE_IDS_BASE};

    fn root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    /// `path -> (kind, mode, uid, content or link target)` of a tree, owners relative to `base`.
    fn listing(dir: &Path, base: u32) -> BTreeMap<String, (char, u32, u32, String)> {
        let mut out = BTreeMap::new();
        for ent in walk(dir) {
            let rel = ent.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
            let m = fs::symlink_metadata(&ent).unwrap();
            let (kind, body) = if m.file_type().is_symlink() {
                ('l', fs::read_link(&ent).unwrap().to_string_lossy().into_owned())
            } else if m.is_dir() {
                ('d', String::new())
            } else {
                ('f', String::from_utf8_lossy(&fs::read(&ent).unwrap()).into_owned())
            };
            out.insert(rel, (kind, m.mode() & 0o7777, m.uid().wrapping_sub(base), body));
        }
        out
    }

    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for ent in fs::read_dir(dir).unwrap() {
            let p = ent.unwrap().path();
            out.push(p.clone());
            if fs::symlink_metadata(&p).unwrap().is_dir() {
                out.extend(walk(&p));
            }
        }
        out
    }

    fn set_xattr(path: &Path, name: &str, value: &[u8]) {
        let p = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        let n = std::ffi::CString::new(name).unwrap();
        // SAFETY: both strings are NUL-terminated; `value` is valid for its length.
        let r = unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
        assert_eq!(r, 0, "setxattr {name}: {}", io::Error::last_os_error());
    }

    fn run(cmd: &mut Command) {
        let st = cmd.status().unwrap();
        assert!(st.success(), "{cmd:?}");
    }

    /// Changes made through a real overlay (delete, opaque directory, rename, new files, a hard link),
    /// exported and applied with the unpacker onto a copy of the lower layer, give the tree the
    /// overlay showed.
    #[test]
    fn an_overlay_upper_exports_to_a_layer_that_reproduces_the_merged_tree() {
        if !root() {
            eprintln!("skipped: needs root (mounts an overlay)");
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let (lower, upper, work, merged) =
            (t.path().join("lower"), t.path().join("upper"), t.path().join("work"), t.path().join("merged"));
        for d in [&lower, &upper, &work, &merged] {
            fs::create_dir(d).unwrap();
        }
        let ids = IdRange { base: 0 };
        fs::create_dir_all(lower.join("dir/sub")).unwrap();
        fs::write(lower.join("dir/sub/old"), "old").unwrap();
        fs::write(lower.join("gone"), "gone").unwrap();
        fs::write(lower.join("renamed"), "moved").unwrap();
        fs::create_dir(lower.join("keep")).unwrap();
        fs::write(lower.join("keep/a"), "a").unwrap();
        let opts =
            format!("lowerdir={},upperdir={},workdir={},userxattr", lower.display(), upper.display(), work.display());
        run(Command::new("mount").args(["-t", "overlay", "overlay", "-o", &opts]).arg(&merged));
        let changes = (|| -> io::Result<()> {
            fs::remove_file(merged.join("gone"))?;
            fs::rename(merged.join("renamed"), merged.join("moved"))?;
            // An opaque directory: removed and made again, the lower's contents hidden.
            fs::remove_dir_all(merged.join("dir"))?;
            fs::create_dir(merged.join("dir"))?;
            fs::write(merged.join("dir/new"), "new")?;
            fs::write(merged.join("keep/b"), "b")?;
            fs::hard_link(merged.join("keep/b"), merged.join("keep/b2"))?;
            std::os::unix::fs::symlink("../keep/a", merged.join("dir/link"))?;
            fs::set_permissions(merged.join("keep/a"), fs::Permissions::from_mode(0o600))?;
            fs::create_dir_all(merged.join("etc"))?;
            fs::write(merged.join("etc/hostname"), "sb\n")?;
            fs::write(merged.join("etc/app.conf"), "x=1\n")?;
            Ok(())
        })();
        let expected = listing(&merged, 0);
        run(Command::new("umount").arg(&merged));
        changes.unwrap();
        // The overlay recorded the deletions as whiteouts and the directory as opaque.
        assert!(fs::symlink_metadata(upper.join("gone")).unwrap().file_type().is_char_device());

        let mut layer = Vec::new();
        let report = export_upper(&upper, ids, &mut layer).unwrap();
        assert!(report.skipped.is_empty() && report.remapped.is_empty(), "{report:?}");
        let names: Vec<String> = tar::Archive::new(layer.as_slice())
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().to_string_lossy().into_owned())
            .collect();
        for want in [".wh.gone", ".wh.renamed", "dir/.wh..wh..opq", "keep/b2"] {
            assert!(names.iter().any(|n| n == want), "{want} missing from {names:?}");
        }
        assert!(!names.iter().any(|n| n == "etc/hostname"), "{names:?}");

        // Apply onto a copy of the lower (owned as an image root is) and compare.
        let applied = t.path().join("applied");
        run(Command::new("cp").arg("-a").arg(&lower).arg(&applied));
        run(Command::new("chown").arg("-R").arg(format!("{IMAGE_IDS_BASE}:{IMAGE_IDS_BASE}")).arg(&applied));
        let fd = tree::open_root(&applied).unwrap();
        unpack::apply_layer(fd.as_fd(), layer.as_slice(), &UnpackLimits::default()).unwrap();
        let mut got = listing(&applied, IMAGE_IDS_BASE);
        let mut expected = expected;
        expected.remove("etc/hostname");
        got.retain(|k, _| !k.is_empty());
        assert_eq!(got, expected);
        let ino = |p: &str| fs::metadata(applied.join(p)).unwrap().ino();
        assert_eq!(ino("keep/b"), ino("keep/b2"), "the hard link is kept as one");
    }

    /// Owners come back to image ids; one outside the range becomes nobody; user xattrs are kept
    /// and overlay ones are not; devices are left out.
    #[test]
    fn owners_shift_back_xattrs_are_kept_and_devices_left_out() {
        if !root() {
            eprintln!("skipped: needs root (chown, mknod)");
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let upper = t.path().join("upper");
        fs::create_dir(&upper).unwrap();
        let ids = IdRange::for_slot(7);
        fs::write(upper.join("mine"), "m").unwrap();
        std::os::unix::fs::chown(upper.join("mine"), Some(ids.host(1000)), Some(ids.host(100))).unwrap();
        fs::write(upper.join("stranger"), "s").unwrap();
        std::os::unix::fs::chown(upper.join("stranger"), Some(12), Some(12)).unwrap();
        set_xattr(&upper.join("mine"), "user.note", b"hello");
        set_xattr(&upper.join("mine"), "user.overlay.origin", b"x");
        nix::sys::stat::mknod(
            &upper.join("null"),
            SFlag::S_IFCHR,
            Mode::from_bits_truncate(0o666),
            nix::sys::stat::makedev(1, 3),
        )
        .unwrap();
        nix::unistd::mkfifo(&upper.join("fifo"), Mode::from_bits_truncate(0o644)).unwrap();
        for name in ["null", "fifo"] {
            std::os::unix::fs::lchown(upper.join(name), Some(ids.host(0)), Some(ids.host(0))).unwrap();
        }
        let mut layer = Vec::new();
        let report = export_upper(&upper, ids, &mut layer).unwrap();
        assert_eq!(report.skipped, ["null"]);
        assert_eq!(report.remapped, ["stranger"]);
        let mut seen = BTreeMap::new();
        let mut a = tar::Archive::new(layer.as_slice());
        for e in a.entries().unwrap() {
            let mut e = e.unwrap();
            let path = e.path().unwrap().to_string_lossy().into_owned();
            let xattrs: Vec<String> = match e.pax_extensions().unwrap() {
                Some(exts) => exts
                    .map(|x| {
                        let x = x.unwrap();
                        format!("{}={}", x.key().unwrap(), x.value().unwrap())
                    })
                    .collect(),
                None => vec![],
            };
            let h = e.header();
            seen.insert(path, (h.uid().unwrap(), h.gid().unwrap(), h.entry_type(), xattrs));
        }
        assert_eq!(seen["mine"], (1000, 100, tar::EntryType::Regular, vec!["SCHILY.xattr.user.note=hello".into()]));
        assert_eq!(seen["stranger"].0, u64::from(NOBODY));
        assert_eq!(seen["fifo"].2, tar::EntryType::Fifo);
        assert!(!seen.contains_key("null"));
    }
}
