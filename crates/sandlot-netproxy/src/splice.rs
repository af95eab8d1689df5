//! Zero-copy proxying between two TCP sockets: bytes move socket → pipe → socket inside the kernel
//! (`splice(2)`), never through the daemon's memory. On a two-core host the proxy is a third party
//! competing with the sandbox's client and the server for CPU; not copying every byte twice through
//! user space is most of what keeps a download through it near loopback speed.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::fcntl::{fcntl, splice, FcntlArg, OFlag, SpliceFFlags};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Bytes moved per splice call (and the pipe size asked for).
const CHUNK: usize = 1 << 20;

/// Moves bytes both ways until both directions reach end of stream (each end is passed on as a
/// half-close) or either fails. Bytes are counted into `a_to_b` and `b_to_a` as they move, so a long
/// transfer's counters are live.
pub async fn bidirectional(a: &TcpStream, b: &TcpStream, a_to_b: &AtomicU64, b_to_a: &AtomicU64) -> io::Result<()> {
    tokio::try_join!(one_way(a, b, a_to_b), one_way(b, a, b_to_a))?;
    Ok(())
}

async fn one_way(from: &TcpStream, to: &TcpStream, counter: &AtomicU64) -> io::Result<()> {
    let (pipe_r, pipe_w) = nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC)?;
    // A larger pipe means fewer wakeups per megabyte; the default (64 KiB) is kept if the host's
    // pipe-max-size refuses this.
    let _ = fcntl(pipe_w.as_raw_fd(), FcntlArg::F_SETPIPE_SZ(CHUNK as i32));
    let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
    loop {
        // The pipe is empty here, so EAGAIN can only mean the socket has nothing to read.
        let n = from.async_io(Interest::READABLE, || fill(from, &pipe_w, flags)).await?;
        if n == 0 {
            break;
        }
        let mut left = n;
        while left > 0 {
            // The pipe holds `left` bytes, so EAGAIN can only mean the socket is full.
            let m = to.async_io(Interest::WRITABLE, || drain(&pipe_r, to, left, flags)).await?;
            left -= m;
        }
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }
    // End of stream from `from`: pass it on, and keep the other direction going.
    nix::sys::socket::shutdown(to.as_raw_fd(), nix::sys::socket::Shutdown::Write).or_else(|e| {
        if e == nix::errno::Errno::ENOTCONN {
            Ok(())
        } else {
            Err(io::Error::from(e))
        }
    })
}

fn fill(from: &TcpStream, pipe_w: &OwnedFd, flags: SpliceFFlags) -> io::Result<usize> {
    splice(from, None, pipe_w, None, CHUNK, flags).map_err(io::Error::from)
}

fn drain(pipe_r: &OwnedFd, to: &TcpStream, len: usize, flags: SpliceFFlags) -> io::Result<usize> {
    splice(pipe_r, None, to, None, len, flags).map_err(io::Error::from)
}
