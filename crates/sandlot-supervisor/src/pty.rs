//! Pseudo-terminals for processes started with a pty: the pair is opened from the sandbox's own
//! devpts instance (`/dev/ptmx` is `pts/ptmx` of the private mount the driver makes), so the terminal
//! belongs to the sandbox, and its master is held by the supervisor only, never by the daemon.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use sandlot_protocol::PtySize;

/// Opens a new pty pair of `size` whose slave is owned by `uid`:`gid` (as `login` does, so the
/// process may `chmod` its own terminal, and `mesg`/`write` see the right owner). Both ends are
/// close-on-exec: the child gets the slave only as its stdio.
pub(crate) fn open(size: PtySize, uid: u32, gid: u32) -> io::Result<(OwnedFd, OwnedFd)> {
    // SAFETY: a plain open of a constant path; the result is checked before it is owned.
    let fd = unsafe { libc::open(c"/dev/ptmx".as_ptr(), libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    let master = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: unlockpt takes a valid master fd.
    if unsafe { libc::unlockpt(master.as_raw_fd()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // TIOCGPTPEER opens the slave from the master itself: no path lookup under /dev/pts that a
    // process of the sandbox could have raced with a link.
    // SAFETY: ioctl on a valid master fd; the flags are the open flags of the new descriptor.
    let fd =
        unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGPTPEER, libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
    let slave = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: fchown on a valid fd.
    if unsafe { libc::fchown(slave.as_raw_fd(), uid, gid) } != 0 {
        return Err(io::Error::last_os_error());
    }
    resize(&master, size)?;
    Ok((master, slave))
}

/// Sets the terminal's size; the kernel sends SIGWINCH to its foreground process group.
pub(crate) fn resize(master: &OwnedFd, size: PtySize) -> io::Result<()> {
    let ws = libc::winsize { ws_row: size.rows, ws_col: size.cols, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCSWINSZ reads one winsize from a valid pointer.
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &ws) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Between fork and exec of a pty process: a new session (so the process group id is the pid, as
/// for other processes) with stdin, already the slave, as its controlling terminal.
///
/// # Safety
/// Call only in the forked child before exec: it changes the process's session.
pub(crate) unsafe fn become_session_leader() -> io::Result<()> {
    // SAFETY: raw syscalls in a single-threaded child.
    unsafe {
        if libc::setsid() < 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pair opened here (the host's /dev/ptmx in a test) reports the size it was given, and a
    /// resize is seen through the slave.
    #[test]
    fn a_new_pair_has_its_size_and_a_resize_is_seen_on_the_slave() {
        // SAFETY: getuid and getgid cannot fail.
        let me = unsafe { (libc::getuid(), libc::getgid()) };
        let (master, slave) = open(PtySize { rows: 24, cols: 80 }, me.0, me.1).expect("open a pty");
        let size = |fd: &OwnedFd| {
            let mut ws = libc::winsize { ws_row: 0, ws_col: 0, ws_xpixel: 0, ws_ypixel: 0 };
            // SAFETY: TIOCGWINSZ writes one winsize.
            assert_eq!(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) }, 0);
            (ws.ws_row, ws.ws_col)
        };
        assert_eq!(size(&slave), (24, 80));
        resize(&master, PtySize { rows: 50, cols: 132 }).unwrap();
        assert_eq!(size(&slave), (50, 132));
    }
}
