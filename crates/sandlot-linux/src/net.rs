//! The sandbox's one way out. Its network namespace has only `lo`; every non-loopback address is made
//! local to it (an "AnyIP" route), and a socket-lookup BPF program ([`crate::steer`]) hands every TCP
//! connection and UDP datagram the sandbox sends to a socket the daemon owns in that namespace. The
//! daemon reads the original destination from that socket, decides, and dials out itself. Nothing is
//! bridged or routed to the host's network: the sandbox's kernel terminates its own TCP, and only the
//! daemon's proxy, holding the policy, opens connections outside.
//!
//! Why not a TUN device and a userspace TCP/IP stack (the first design): that stack parsed hostile
//! packets inside the daemon and capped a download at ~0.4× loopback on two cores, and it could not
//! refuse a connection at SYN time. Here the sandbox's own kernel stack (which it already shares with
//! the host) does the TCP work with segmentation offloads, a refused connection is reset at once, and
//! IPv6 is steered the same way.

use std::fs::File;
use std::io;
use std::mem::size_of;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::steer::Steering;

/// The sandbox's own address (on `lo`): programs that look for a non-loopback address before they
/// resolve names (glibc's `AI_ADDRCONFIG`) find one.
pub const SANDBOX_ADDR: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 2);
/// The gateway: the sandbox's resolver. DNS sent here is answered by the daemon.
pub const GATEWAY_ADDR: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 1);
/// The daemon's IPv6 socket address inside the sandbox (a unique-local address, never routed).
pub const GATEWAY_ADDR6: Ipv6Addr = Ipv6Addr::new(0xfd5a, 0x6e64, 0, 0, 0, 0, 0, 1);
/// The port the daemon's TCP listeners are bound to. Connections arrive there whatever port they were
/// sent to; the original destination is the accepted socket's local address.
const LISTEN_PORT: u16 = 1;

/// The daemon's sockets inside one sandbox's network namespace. They keep the namespace alive; drop
/// them (and the steering) to let it go.
#[derive(Debug)]
pub struct EgressSockets {
    /// Listening TCP socket (IPv4), non-blocking.
    pub tcp4: OwnedFd,
    /// Listening TCP socket (IPv6 only), non-blocking; `None` on a host without IPv6 (the sandbox then
    /// has none either).
    pub tcp6: Option<OwnedFd>,
    /// UDP socket (IPv4) bound to the gateway's port 53, reporting each datagram's original destination.
    pub udp4: OwnedFd,
    /// UDP socket (IPv6 only), reporting each datagram's original destination; `None` without IPv6.
    pub udp6: Option<OwnedFd>,
    /// The attached socket-lookup program; detached when dropped.
    pub steering: Steering,
}

fn check(rc: libc::c_int, what: &str) -> io::Result<libc::c_int> {
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{what}: {e}")));
    }
    Ok(rc)
}

/// TCP buffer sizes (min, default, max bytes) in a sandbox's network namespace. The kernel defaults
/// let a socket grow to 6 MiB (receive) and 4 MiB (send); a sandbox holding its 512 connections full
/// and unread would pin ~5 GiB of kernel memory on the daemon's side. 1 MiB keeps a loopback-speed
/// relay (the proxy splices as fast as either end drains) and bounds a sandbox's daemon-side buffers
/// to 512 × 2 MiB.
const TCP_BUFFERS: [(&str, &str); 2] =
    [("/proc/sys/net/ipv4/tcp_rmem", "4096 131072 1048576"), ("/proc/sys/net/ipv4/tcp_wmem", "4096 16384 1048576")];

/// Joins the network namespace of process `pid` on a throwaway thread and sets up the sandbox's way
/// out there: addresses and AnyIP routes on `lo`, the daemon's sockets, and the steering program.
pub fn attach_egress(pid: i32) -> io::Result<EgressSockets> {
    let ns = File::open(format!("/proc/{pid}/ns/net"))?;
    // setns changes only the calling thread's network namespace: do it on a thread of its own.
    std::thread::spawn(move || -> io::Result<EgressSockets> {
        // SAFETY: setns on an open namespace fd; affects only this thread.
        check(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) }, "joining the sandbox network namespace")?;
        // Socket buffer sizes are per network namespace: these bound both ends of every connection
        // here, the sandbox's and the daemon's accepted one (charged to the daemon, not the sandbox).
        // /proc/sys/net shows the namespace of the thread that opens it.
        for (file, value) in TCP_BUFFERS {
            std::fs::write(file, value).map_err(|e| io::Error::new(e.kind(), format!("{file}: {e}")))?;
        }
        let rtnl = Netlink::open()?;
        rtnl.loopback_up()?;
        rtnl.add_address(SANDBOX_ADDR)?;
        rtnl.add_anyip_route(libc::AF_INET)?;
        let tcp4 = listener(SocketAddr::from((GATEWAY_ADDR, LISTEN_PORT)))?;
        let udp4 = socket_bound(SocketAddr::from((GATEWAY_ADDR, 53)), libc::SOCK_DGRAM)?;
        // IPv6 is steered too where the host has it; a host booted without it (ipv6.disable=1, or
        // disable_ipv6 inherited by new namespaces) gives sandboxes IPv4 only rather than no network.
        let v6 = rtnl.add_anyip_route(libc::AF_INET6).and_then(|()| {
            let tcp6 = listener(SocketAddr::from((GATEWAY_ADDR6, LISTEN_PORT)))?;
            let udp6 = socket_bound(SocketAddr::from((GATEWAY_ADDR6, 53)), libc::SOCK_DGRAM)?;
            Ok((tcp6, udp6))
        });
        let (tcp6, udp6) = match v6 {
            Ok((t, u)) => (Some(t), Some(u)),
            Err(e) => {
                tracing::warn!("sandbox network without IPv6: {e}");
                (None, None)
            }
        };
        let sockets = [Some(&tcp4), tcp6.as_ref(), Some(&udp4), udp6.as_ref()];
        let steering = Steering::attach(&ns, sockets, SANDBOX_ADDR, GATEWAY_ADDR)?;
        Ok(EgressSockets { tcp4, tcp6, udp4, udp6, steering })
    })
    .join()
    .map_err(|_| io::Error::other("the network setup thread panicked"))?
}

fn listener(addr: SocketAddr) -> io::Result<OwnedFd> {
    let sock = socket_bound(addr, libc::SOCK_STREAM)?;
    // SAFETY: listen on a bound socket we own.
    check(unsafe { libc::listen(sock.as_raw_fd(), 1024) }, "listen")?;
    Ok(sock)
}

fn setsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int, what: &str) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: an int option read from a live local.
    let rc = unsafe {
        libc::setsockopt(fd, level, name, (&one as *const libc::c_int).cast(), size_of::<libc::c_int>() as u32)
    };
    check(rc, what).map(drop)
}

/// A non-blocking socket bound to `addr` (an address that need not be configured: IP_FREEBIND), with
/// the original destination of each datagram reported for UDP.
fn socket_bound(addr: SocketAddr, kind: libc::c_int) -> io::Result<OwnedFd> {
    let family = if addr.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    // SAFETY: socket() has no memory preconditions; the fd is owned below.
    let fd = check(unsafe { libc::socket(family, kind | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) }, "socket")?;
    // SAFETY: fd is fresh and owned by nothing else.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let udp = kind == libc::SOCK_DGRAM;
    match addr {
        SocketAddr::V4(v4) => {
            setsockopt_int(fd, libc::SOL_IP, libc::IP_FREEBIND, "IP_FREEBIND")?;
            if udp {
                setsockopt_int(fd, libc::SOL_IP, libc::IP_RECVORIGDSTADDR, "IP_RECVORIGDSTADDR")?;
            }
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from(*v4.ip()).to_be() },
                sin_zero: [0; 8],
            };
            // SAFETY: bind reads a sockaddr_in of the given length.
            let rc = unsafe {
                libc::bind(fd, (&sin as *const libc::sockaddr_in).cast(), size_of::<libc::sockaddr_in>() as u32)
            };
            check(rc, &format!("bind {addr}"))?;
        }
        SocketAddr::V6(v6) => {
            setsockopt_int(fd, libc::SOL_IPV6, libc::IPV6_V6ONLY, "IPV6_V6ONLY")?;
            setsockopt_int(fd, libc::SOL_IPV6, libc::IPV6_FREEBIND, "IPV6_FREEBIND")?;
            if udp {
                setsockopt_int(fd, libc::SOL_IPV6, libc::IPV6_RECVORIGDSTADDR, "IPV6_RECVORIGDSTADDR")?;
            }
            // SAFETY: sockaddr_in6 is plain data; zeroed is valid.
            let mut sin6: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = v6.port().to_be();
            sin6.sin6_addr.s6_addr = v6.ip().octets();
            // SAFETY: bind reads a sockaddr_in6 of the given length.
            let rc = unsafe {
                libc::bind(fd, (&sin6 as *const libc::sockaddr_in6).cast(), size_of::<libc::sockaddr_in6>() as u32)
            };
            check(rc, &format!("bind {addr}"))?;
        }
    }
    Ok(sock)
}

/// A route-netlink socket of the calling thread's network namespace, for the few requests the setup
/// needs (each acknowledged, and an error reply is an error).
struct Netlink {
    fd: OwnedFd,
    seq: std::cell::Cell<u32>,
}

const NLMSG_ERROR: u16 = 2;
const RTM_NEWLINK: u16 = 16;
/// Flags of a request that adds an object that must not exist yet.
const CREATE: libc::c_int = libc::NLM_F_CREATE | libc::NLM_F_EXCL;
const RTM_NEWADDR: u16 = 20;
const RTM_NEWROUTE: u16 = 24;
const IFA_LOCAL: u16 = 2;
const IFA_ADDRESS: u16 = 1;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RT_TABLE_LOCAL: u8 = 255;
const RTPROT_STATIC: u8 = 4;
const RT_SCOPE_HOST: u8 = 254;
const RTN_LOCAL: u8 = 2;
/// `lo` is interface 1 in every network namespace.
const LOOPBACK_IFINDEX: u32 = 1;

impl Netlink {
    fn open() -> io::Result<Netlink> {
        // SAFETY: socket() has no memory preconditions; the fd is owned below.
        let fd = check(
            unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_ROUTE) },
            "netlink socket",
        )?;
        // SAFETY: fd is fresh and owned by nothing else.
        Ok(Netlink { fd: unsafe { OwnedFd::from_raw_fd(fd) }, seq: std::cell::Cell::new(1) })
    }

    /// `ip link set lo up` (the sandbox brings it up itself too; either may come first).
    fn loopback_up(&self) -> io::Result<()> {
        // struct ifinfomsg { family: u8, pad: u8, type: u16, index: i32, flags: u32, change: u32 }
        let mut body = vec![libc::AF_UNSPEC as u8, 0, 0, 0];
        body.extend_from_slice(&(LOOPBACK_IFINDEX as i32).to_ne_bytes());
        body.extend_from_slice(&(libc::IFF_UP as u32).to_ne_bytes());
        body.extend_from_slice(&(libc::IFF_UP as u32).to_ne_bytes());
        self.request(RTM_NEWLINK, 0, &body).map_err(|e| io::Error::new(e.kind(), format!("bringing up lo: {e}")))
    }

    /// `ip addr add ADDR/32 dev lo`.
    fn add_address(&self, addr: Ipv4Addr) -> io::Result<()> {
        // struct ifaddrmsg { family, prefixlen, flags, scope: u8; index: u32 }
        let mut body = vec![libc::AF_INET as u8, 32, 0, 0];
        body.extend_from_slice(&LOOPBACK_IFINDEX.to_ne_bytes());
        attr(&mut body, IFA_LOCAL, &addr.octets());
        attr(&mut body, IFA_ADDRESS, &addr.octets());
        self.request(RTM_NEWADDR, CREATE, &body)
            .map_err(|e| io::Error::new(e.kind(), format!("adding {addr} to lo: {e}")))
    }

    /// `ip route add local 0.0.0.0/0 dev lo table local` (or `::/0`): every address is local, so the
    /// sandbox's connections and datagrams all reach the socket lookup the steering program hooks.
    fn add_anyip_route(&self, family: libc::c_int) -> io::Result<()> {
        // struct rtmsg { family, dst_len, src_len, tos, table, protocol, scope, type: u8; flags: u32 }
        let mut body = vec![family as u8, 0, 0, 0, RT_TABLE_LOCAL, RTPROT_STATIC, RT_SCOPE_HOST, RTN_LOCAL];
        body.extend_from_slice(&0u32.to_ne_bytes());
        let any: &[u8] = if family == libc::AF_INET { &[0; 4] } else { &[0; 16] };
        attr(&mut body, RTA_DST, any);
        attr(&mut body, RTA_OIF, &LOOPBACK_IFINDEX.to_ne_bytes());
        self.request(RTM_NEWROUTE, CREATE, &body)
            .map_err(|e| io::Error::new(e.kind(), format!("adding the AnyIP route: {e}")))
    }

    fn request(&self, kind: u16, extra_flags: libc::c_int, body: &[u8]) -> io::Result<()> {
        let seq = self.seq.get();
        self.seq.set(seq + 1);
        let flags = (libc::NLM_F_REQUEST | libc::NLM_F_ACK | extra_flags) as u16;
        let mut msg = Vec::with_capacity(16 + body.len());
        msg.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
        msg.extend_from_slice(&kind.to_ne_bytes());
        msg.extend_from_slice(&flags.to_ne_bytes());
        msg.extend_from_slice(&seq.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(body);
        // SAFETY: send of an initialised buffer on a socket we own; the kernel is the default peer.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut reply = [0u8; 4096];
        loop {
            // SAFETY: recv into a live local buffer of the given length.
            let n = unsafe { libc::recv(self.fd.as_raw_fd(), reply.as_mut_ptr().cast(), reply.len(), 0) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let reply = &reply[..n as usize];
            if reply.len() < 20 {
                return Err(io::Error::other("short netlink reply"));
            }
            let kind = u16::from_ne_bytes([reply[4], reply[5]]);
            let rseq = u32::from_ne_bytes([reply[8], reply[9], reply[10], reply[11]]);
            if kind != NLMSG_ERROR || rseq != seq {
                continue;
            }
            let errno = i32::from_ne_bytes([reply[16], reply[17], reply[18], reply[19]]);
            return if errno == 0 { Ok(()) } else { Err(io::Error::from_raw_os_error(-errno)) };
        }
    }
}

/// Appends one netlink attribute (header, payload, padding to 4 bytes).
fn attr(buf: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    buf.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(payload);
    while !buf.len().is_multiple_of(4) {
        buf.push(0);
    }
}

/// What a sandbox may never reach of the host's own surroundings, as (address, prefix length): every
/// address of the host's interfaces (as a single address), the network each one is on (its netmask),
/// and the host's default gateways (from the main routing tables). Without the networks, `allow-all`
/// would open the host's LAN, its router and whatever a cloud puts on the host's subnet.
pub fn host_networks() -> Vec<(IpAddr, u8)> {
    let mut out = Vec::new();
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates a list we walk read-only and free below.
    if unsafe { libc::getifaddrs(&mut ifap) } == 0 {
        let mut cur = ifap;
        while !cur.is_null() {
            // SAFETY: cur is a valid node of the list returned by getifaddrs.
            let ifa = unsafe { &*cur };
            // SAFETY: both pointers, when not null, point at sockaddrs of the family they carry.
            if let Some(addr) = unsafe { sockaddr_ip(ifa.ifa_addr) } {
                let bits = if addr.is_ipv4() { 32 } else { 128 };
                out.push((addr, bits));
                // SAFETY: as above; the netmask has the address's family.
                if let Some(mask) = unsafe { sockaddr_ip(ifa.ifa_netmask) } {
                    let prefix = match mask {
                        IpAddr::V4(m) => u32::from(m).count_ones() as u8,
                        IpAddr::V6(m) => u128::from(m).count_ones() as u8,
                    };
                    if prefix > 0 && prefix < bits {
                        out.push((addr, prefix));
                    }
                }
            }
            cur = ifa.ifa_next;
        }
        // SAFETY: frees the list getifaddrs allocated.
        unsafe { libc::freeifaddrs(ifap) };
    }
    out.extend(default_gateways().into_iter().map(|g| (g, if g.is_ipv4() { 32 } else { 128 })));
    out
}

/// The address in `sa`, for AF_INET and AF_INET6.
///
/// # Safety
/// `sa` is null or points at a sockaddr whose family field says which struct it is.
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: the caller's promise; the family is the first field of every sockaddr.
    match unsafe { (*sa).sa_family } as i32 {
        libc::AF_INET => {
            // SAFETY: AF_INET means sockaddr_in.
            let sin = unsafe { &*(sa as *const libc::sockaddr_in) };
            Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))))
        }
        libc::AF_INET6 => {
            // SAFETY: AF_INET6 means sockaddr_in6.
            let sin6 = unsafe { &*(sa as *const libc::sockaddr_in6) };
            Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
        }
        _ => None,
    }
}

/// Next hops of the host's default routes, IPv4 (`/proc/net/route`) and IPv6 (`/proc/net/ipv6_route`).
fn default_gateways() -> Vec<IpAddr> {
    let mut out = Vec::new();
    // Iface Destination Gateway Flags …, addresses as little-endian hex.
    for line in std::fs::read_to_string("/proc/net/route").unwrap_or_default().lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if let (Some(&"00000000"), Some(gw)) = (f.get(1), f.get(2).and_then(|g| u32::from_str_radix(g, 16).ok())) {
            if gw != 0 {
                out.push(IpAddr::V4(Ipv4Addr::from(u32::from_be(gw))));
            }
        }
    }
    // dest dest_len src src_len next_hop …, addresses as 32 hex digits.
    for line in std::fs::read_to_string("/proc/net/ipv6_route").unwrap_or_default().lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() > 4 && f[0].bytes().all(|b| b == b'0') && f[1] == "00" {
            if let Ok(hop) = u128::from_str_radix(f[4], 16) {
                if hop != 0 {
                    out.push(IpAddr::V6(Ipv6Addr::from(hop)));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_networks_hold_each_address_its_network_and_the_default_gateway() {
        let nets = host_networks();
        assert!(nets.contains(&(IpAddr::V4(Ipv4Addr::LOCALHOST), 32)), "{nets:?}");
        assert!(nets.contains(&(IpAddr::V4(Ipv4Addr::LOCALHOST), 8)), "loopback's /8: {nets:?}");
        let route = std::fs::read_to_string("/proc/net/route").unwrap();
        let has_default = route.lines().skip(1).any(|l| l.split_whitespace().nth(1) == Some("00000000"));
        if has_default {
            let gw = default_gateways();
            assert!(gw.iter().any(|g| g.is_ipv4()), "a default route exists but no gateway was read: {route}");
            assert!(gw.iter().all(|g| nets.contains(&(*g, if g.is_ipv4() { 32 } else { 128 }))));
        }
    }
    use std::io::{Read, Write};
    use std::os::unix::process::CommandExt;

    /// A process in a network namespace of its own (killed and reaped on drop).
    struct NetnsHolder(std::process::Child);

    impl Drop for NetnsHolder {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn in_netns<T: Send + 'static>(pid: i32, f: impl FnOnce() -> T + Send + 'static) -> T {
        let ns = File::open(format!("/proc/{pid}/ns/net")).unwrap();
        std::thread::spawn(move || {
            // SAFETY: setns on an open namespace fd; affects only this thread.
            assert_eq!(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) }, 0);
            f()
        })
        .join()
        .unwrap()
    }

    #[test]
    fn sandbox_connections_and_datagrams_reach_the_daemon_sockets_with_their_destination() {
        if !crate::running_as_root() {
            eprintln!("skipped: needs root");
            return;
        }
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("30");
        // SAFETY: unshare in the child before exec; no allocation or locking.
        unsafe {
            cmd.pre_exec(
                || if libc::unshare(libc::CLONE_NEWNET) == 0 { Ok(()) } else { Err(io::Error::last_os_error()) },
            )
        };
        let holder = NetnsHolder(cmd.spawn().unwrap());
        let pid = holder.0.id() as i32;
        let egress = attach_egress(pid).unwrap();
        // Duplicates (try_clone), so `egress` and these std views each close their own fd.
        let tcp4 = std::net::TcpListener::from(egress.tcp4.try_clone().unwrap());
        let tcp6 = std::net::TcpListener::from(egress.tcp6.as_ref().unwrap().try_clone().unwrap());
        let udp4 = std::net::UdpSocket::from(egress.udp4.try_clone().unwrap());
        tcp4.set_nonblocking(false).unwrap();
        tcp6.set_nonblocking(false).unwrap();
        udp4.set_nonblocking(false).unwrap();

        let client = std::thread::spawn(move || {
            in_netns(pid, || {
                // lo is down in a fresh namespace; the driver brings it up in the sandbox itself.
                let mut v4 = std::net::TcpStream::connect("203.0.113.7:443").unwrap();
                v4.write_all(b"hi").unwrap();
                let v6 = std::net::TcpStream::connect("[2001:db8::9]:80").unwrap();
                // An unconnected UDP socket (as Python's sendto) gets the daemon's DNS reply, which
                // must be delivered to it rather than steered back to the daemon.
                let u = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
                u.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
                u.send_to(b"q", "10.200.0.1:53").unwrap();
                let mut answer = [0u8; 8];
                let (n, from) = u.recv_from(&mut answer).unwrap();
                assert_eq!((&answer[..n], from), (&b"a"[..], "10.200.0.1:53".parse().unwrap()));
                (v4, v6)
            })
        });
        let (mut s, _) = tcp4.accept().unwrap();
        assert_eq!(s.local_addr().unwrap(), "203.0.113.7:443".parse().unwrap());
        let mut two = [0u8; 2];
        s.read_exact(&mut two).unwrap();
        assert_eq!(&two, b"hi");
        let (s6, _) = tcp6.accept().unwrap();
        assert_eq!(s6.local_addr().unwrap(), "[2001:db8::9]:80".parse().unwrap());
        let mut buf = [0u8; 8];
        let (n, from) = udp4.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"q");
        udp4.send_to(b"a", from).unwrap();
        drop(client.join().unwrap());
    }
}
