//! UDP from the sandbox: DNS queries to the gateway are answered, every other datagram is dropped and
//! recorded. The steered sockets report each datagram's original destination.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::task::JoinSet;

use super::{unmap, Permit, SandboxNet, MAX_DNS_PENDING};
use crate::dns::{self, Rcode};
use crate::lock;
use crate::policy::Decision;

impl SandboxNet {
    /// One UDP datagram from the sandbox: a DNS query to the gateway is answered; anything else is
    /// dropped and recorded (once a minute per destination, so a flood does not flood the audit log).
    pub(super) fn datagram(self: &Arc<Self>, conns: &mut JoinSet<()>, sock: &Arc<UdpSocket>, d: Datagram) {
        if d.dst == SocketAddr::from((self.shared.gateway, 53)) {
            let reply_to = Arc::clone(sock);
            let Some(permit) = Permit::take(&self.dns_pending, MAX_DNS_PENDING) else {
                // A flood of queries (for random names, say) is answered at once instead of queued.
                if let Some(reply) = dns::parse_query(&d.payload).map(|q| dns::answer(&q, Rcode::ServFail, &[])) {
                    let _ = reply_to.try_send_to(&reply, d.src);
                }
                return;
            };
            let net = Arc::clone(self);
            conns.spawn(async move {
                let _permit = permit;
                if let Some(reply) = net.dns(&d.payload).await {
                    let _ = reply_to.send_to(&reply, d.src).await;
                }
            });
            return;
        }
        let now = tokio::time::Instant::now();
        let mut seen = lock(&self.udp_seen);
        if seen.len() >= 1024 {
            seen.retain(|_, t| now.duration_since(*t) < Duration::from_secs(60));
        }
        match seen.get(&d.dst) {
            Some(t) if now.duration_since(*t) < Duration::from_secs(60) => return,
            // Full of fresh destinations (a scan): recorded, subject to the audit rate limit, not kept.
            _ if seen.len() >= 1024 => {}
            _ => {
                seen.insert(d.dst, now);
            }
        }
        drop(seen);
        // No UDP leaves the sandbox: DNS tunnelling to a resolver of its choosing fails.
        self.record(
            "udp",
            d.dst.to_string(),
            None,
            Decision { allow: false, rule: "udp".into(), reason: "only DNS to the gateway is answered".into() },
        );
    }
}

/// The next datagram of an optional socket (a missing one never yields), with a handle to answer on.
pub(super) async fn next_opt(d: Option<&mut Datagrams>) -> Option<(Arc<UdpSocket>, Datagram)> {
    match d {
        Some(d) => {
            let datagram = d.next().await?;
            Some((Arc::clone(&d.sock), datagram))
        }
        None => std::future::pending().await,
    }
}

/// One datagram the sandbox sent: where from, where to, what.
pub(super) struct Datagram {
    src: SocketAddr,
    dst: SocketAddr,
    payload: Vec<u8>,
}

/// A steered UDP socket read together with each datagram's original destination.
pub(super) struct Datagrams {
    pub(super) sock: Arc<UdpSocket>,
    buf: Vec<u8>,
}

impl Datagrams {
    pub(super) fn new(sock: UdpSocket) -> Self {
        Datagrams { sock: Arc::new(sock), buf: vec![0u8; 65536] }
    }

    /// The next datagram; `None` only if the socket fails (then this arm of the loop stays idle).
    pub(super) async fn next(&mut self) -> Option<Datagram> {
        loop {
            let sock = Arc::clone(&self.sock);
            let buf = &mut self.buf;
            let r = sock.async_io(Interest::READABLE, || recv_with_destination(sock.as_raw_fd(), buf)).await;
            match r {
                Ok(Some(d)) => return Some(d),
                Ok(None) => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!("sandbox UDP socket failed: {e}");
                    std::future::pending::<()>().await;
                }
            }
        }
    }
}

/// `recvmsg` with the `IP(V6)_ORIGDSTADDR` control message; `Ok(None)` for a datagram without one.
fn recv_with_destination(fd: std::os::fd::RawFd, buf: &mut [u8]) -> io::Result<Option<Datagram>> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, SockaddrLike, SockaddrStorage};
    let mut iov = [std::io::IoSliceMut::new(buf)];
    let mut space = nix::cmsg_space!(libc::sockaddr_in6);
    let msg =
        recvmsg::<SockaddrStorage>(fd, &mut iov, Some(&mut space), MsgFlags::MSG_DONTWAIT).map_err(io::Error::from)?;
    let mut dst = None;
    for c in msg.cmsgs().map_err(io::Error::from)? {
        match c {
            ControlMessageOwned::Ipv4OrigDstAddr(sin) => {
                dst = Some(SocketAddr::from((
                    Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                    u16::from_be(sin.sin_port),
                )))
            }
            ControlMessageOwned::Ipv6OrigDstAddr(sin6) => {
                dst = Some(SocketAddr::from((
                    std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                    u16::from_be(sin6.sin6_port),
                )))
            }
            _ => {}
        }
    }
    let src = msg.address.and_then(|a| match a.family() {
        Some(nix::sys::socket::AddressFamily::Inet) => a.as_sockaddr_in().map(|s| SocketAddr::from((s.ip(), s.port()))),
        Some(nix::sys::socket::AddressFamily::Inet6) => {
            a.as_sockaddr_in6().map(|s| SocketAddr::from((s.ip(), s.port())))
        }
        _ => None,
    });
    let n = msg.bytes;
    Ok(match (src, dst) {
        (Some(src), Some(dst)) => Some(Datagram { src, dst: unmap(dst), payload: buf[..n].to_vec() }),
        _ => None,
    })
}
