//! Idmapped mounts: one copy of an image on disk, seen by each sandbox with its own owners.
//!
//! An image's files are stored once, owned by the image id range ([`crate::unpack::IMAGE_IDS_BASE`] +
//! the id inside the image), which no host user and no sandbox slot has. A sandbox runs in a user
//! namespace that maps its ids 0..65536 onto its slot's host range, where those files would show as
//! `nobody`, and root in the sandbox could not change them. Copying and re-owning the image per
//! sandbox would cost a pass over every inode at each create. Instead the daemon mounts the image
//! through an *idmapped mount* (`mount_setattr(MOUNT_ATTR_IDMAP)`, Linux 5.12; overlayfs accepts such a
//! mount as a lower layer since 5.19) whose mapping takes the image range onto the slot's range: the
//! sandbox sees the image's root as its root, with nothing copied and nothing re-owned.
//!
//! The mapping is carried by a user namespace made only for it (a child cloned into a new user
//! namespace, its maps written, its namespace kept open by descriptor, the child ended): one per slot,
//! made on first use and kept for the daemon's life (a few hundred bytes of kernel memory each).

use std::collections::HashMap;
use std::ffi::CString;
use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Mutex;

use nix::sched::{clone, CloneFlags};
use nix::sys::signal::Signal;

use crate::unpack::IMAGE_IDS_BASE;
use crate::UID_RANGE;

/// User namespaces that map the image id range onto a slot's range, by the slot's host base id.
static MAPPINGS: Mutex<Option<HashMap<u32, OwnedFd>>> = Mutex::new(None);

fn own(fd: RawFd) -> OwnedFd {
    // SAFETY: `fd` was just returned by a successful syscall and is owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// A user namespace whose ids `IMAGE_IDS_BASE + n` are host ids `base + n` (n < 65536).
fn mapping_for(base: u32) -> io::Result<OwnedFd> {
    let mut cache = MAPPINGS.lock().unwrap_or_else(|p| p.into_inner());
    let map = cache.get_or_insert_with(HashMap::new);
    if let Some(fd) = map.get(&base) {
        return fd.try_clone();
    }
    let fd = new_mapping(IMAGE_IDS_BASE, base, UID_RANGE)?;
    let copy = fd.try_clone()?;
    map.insert(base, fd);
    Ok(copy)
}

fn new_mapping(inside: u32, outside: u32, count: u32) -> io::Result<OwnedFd> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let (read, write) = (own(fds[0]), own(fds[1]));
    let read_raw = read.as_raw_fd();
    let write_raw = write.as_raw_fd();
    let child = Box::new(move || -> isize {
        // SAFETY: raw syscalls on descriptors inherited from the parent; this copy of a multi-threaded
        // process may do nothing else. The child waits until the parent has opened its namespace.
        unsafe {
            libc::close(write_raw);
            let mut b = 0u8;
            libc::read(read_raw, (&mut b as *mut u8).cast(), 1);
            libc::_exit(0)
        }
    });
    let mut stack = vec![0u8; 16 << 10];
    // SAFETY: the child runs on its own copy of the address space (no CLONE_VM) and only makes syscalls.
    let pid = unsafe { clone(child, &mut stack, CloneFlags::CLONE_NEWUSER, Some(Signal::SIGCHLD as i32)) }
        .map_err(|e| io::Error::from_raw_os_error(e as i32))?
        .as_raw();
    let result = (|| {
        let map = format!("{inside} {outside} {count}\n");
        fs::write(format!("/proc/{pid}/uid_map"), &map)?;
        fs::write(format!("/proc/{pid}/gid_map"), &map)?;
        let ns = fs::File::open(format!("/proc/{pid}/ns/user"))?;
        Ok(OwnedFd::from(ns))
    })();
    drop(write);
    drop(read);
    // The child reads EOF now and exits; its namespace lives on through the descriptor.
    let _ = crate::launch::wait(pid);
    result.map_err(|e: io::Error| io::Error::new(e.kind(), format!("make the image id mapping: {e}")))
}

/// Mirrors `struct mount_attr` of linux/mount.h.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// A detached, read-only copy of the mount at directory `dir` (an image's root), showing files of the
/// image id range as owned by the slot whose host ids start at `base`.
pub fn image_tree(dir: &Path, base: u32) -> io::Result<OwnedFd> {
    let userns = mapping_for(base)?;
    let path = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in an image path"))?;
    // SAFETY: open_tree with a valid NUL-terminated path; it returns a new descriptor we own.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC as libc::c_uint,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("open_tree {}: {e}", dir.display())));
    }
    let tree = own(fd as RawFd);
    let attr = MountAttr {
        // nosuid: commands run with no_new_privs anyway; this keeps an image's set-id files inert even if
        // that ever changed.
        attr_set: libc::MOUNT_ATTR_IDMAP | libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NODEV | libc::MOUNT_ATTR_NOSUID,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    // SAFETY: mount_setattr on the descriptor just made, with an empty path and a valid attribute struct.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("idmap the image at {} (needs Linux 5.12+ and a filesystem that supports it): {e}", dir.display()),
        ));
    }
    Ok(tree)
}

/// Attaches a detached tree from [`image_tree`] at directory `target`.
pub fn attach(tree: BorrowedFd<'_>, target: &Path) -> io::Result<()> {
    let path = CString::new(target.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a mount path"))?;
    // SAFETY: move_mount from a valid descriptor (empty path) to a valid NUL-terminated target path.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_fd().as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if r != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("attach the image at {}: {e}", target.display())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn an_image_file_shows_with_the_slots_owner_through_the_mount() {
        if !crate::running_as_root() {
            eprintln!("skipped: needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("image");
        let target = dir.path().join("seen");
        fs::create_dir_all(&image).unwrap();
        fs::create_dir_all(&target).unwrap();
        fs::write(image.join("f"), b"x").unwrap();
        std::os::unix::fs::chown(image.join("f"), Some(IMAGE_IDS_BASE + 7), Some(IMAGE_IDS_BASE + 8)).unwrap();
        let base = crate::IdRange::for_slot(4095).base;
        // In a private mount namespace of a thread of our own, so nothing is left mounted on failure.
        let seen = std::thread::spawn(move || {
            nix::sched::unshare(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_FS).unwrap();
            nix::mount::mount(
                None::<&str>,
                "/",
                None::<&str>,
                nix::mount::MsFlags::MS_REC | nix::mount::MsFlags::MS_PRIVATE,
                None::<&str>,
            )
            .unwrap();
            let tree = image_tree(&image, base).unwrap();
            attach(tree.as_fd(), &target).unwrap();
            let m = fs::symlink_metadata(target.join("f")).unwrap();
            let write = fs::write(target.join("g"), b"y").unwrap_err();
            nix::mount::umount2(&target, nix::mount::MntFlags::MNT_DETACH).unwrap();
            (m.uid(), m.gid(), write.raw_os_error())
        })
        .join()
        .unwrap();
        assert_eq!(seen, (base + 7, base + 8, Some(libc::EROFS)));
    }
}
