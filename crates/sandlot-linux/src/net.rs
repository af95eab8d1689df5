//! The sandbox's one way out: a TUN device inside its network namespace, whose other end (the fd) the
//! daemon keeps and feeds to its userspace TCP/IP stack. Nothing is bridged or routed to the host's
//! network; every packet the sandbox sends reaches the daemon as bytes.

use std::fs::{File, OpenOptions};
use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;

/// The sandbox's address on its TUN link.
pub const SANDBOX_ADDR: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 2);
/// The gateway: the daemon's stack answers DNS here; everything else is routed through it.
pub const GATEWAY_ADDR: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 1);

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;

#[repr(C)]
struct IfReqFlags {
    name: [u8; 16],
    flags: libc::c_short,
    _pad: [u8; 22],
}

fn check(rc: libc::c_int, what: &str) -> io::Result<()> {
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{what}: {e}")));
    }
    Ok(())
}

fn ifreq(name: &str) -> libc::ifreq {
    // SAFETY: ifreq is plain data; zeroed is valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (i, b) in name.bytes().enumerate() {
        req.ifr_name[i] = b as libc::c_char;
    }
    req
}

fn sockaddr(ip: Ipv4Addr) -> libc::sockaddr {
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr { s_addr: u32::from(ip).to_be() },
        sin_zero: [0; 8],
    };
    // SAFETY: sockaddr_in and sockaddr have the same size; this reinterprets the bytes.
    unsafe { std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(sin) }
}

/// Creates `tun0` in the network namespace of process `pid`, addresses it, routes everything through
/// the gateway with link MTU `mtu`, and returns the daemon's end (non-blocking).
pub fn create_tun(pid: i32, mtu: u16) -> io::Result<OwnedFd> {
    let ns = File::open(format!("/proc/{pid}/ns/net"))?;
    // setns changes only the calling thread's network namespace: do it on a throwaway thread.
    std::thread::spawn(move || -> io::Result<OwnedFd> {
        // SAFETY: setns on an open namespace fd; affects only this thread.
        check(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) }, "joining the sandbox network namespace")?;
        let tun = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/net/tun")?;
        let mut req = IfReqFlags { name: [0; 16], flags: IFF_TUN | IFF_NO_PI, _pad: [0; 22] };
        req.name[..4].copy_from_slice(b"tun0");
        // SAFETY: TUNSETIFF reads a valid ifreq-shaped struct.
        check(unsafe { libc::ioctl(tun.as_raw_fd(), TUNSETIFF, &mut req) }, "TUNSETIFF")?;

        // SAFETY: a plain socket for interface ioctls, owned below.
        let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        check(s, "socket")?;
        // SAFETY: s is a fresh fd.
        let sock = unsafe { OwnedFd::from_raw_fd(s) };
        let fd = sock.as_raw_fd();
        let mut r = ifreq("tun0");
        r.ifr_ifru.ifru_addr = sockaddr(SANDBOX_ADDR);
        // SAFETY: interface ioctls on a valid ifreq.
        check(unsafe { libc::ioctl(fd, libc::SIOCSIFADDR, &r) }, "SIOCSIFADDR")?;
        r.ifr_ifru.ifru_netmask = sockaddr(Ipv4Addr::new(255, 255, 255, 252));
        // SAFETY: as above.
        check(unsafe { libc::ioctl(fd, libc::SIOCSIFNETMASK, &r) }, "SIOCSIFNETMASK")?;
        r.ifr_ifru.ifru_mtu = mtu as libc::c_int;
        // SAFETY: as above.
        check(unsafe { libc::ioctl(fd, libc::SIOCSIFMTU, &r) }, "SIOCSIFMTU")?;
        r.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        // SAFETY: as above.
        check(unsafe { libc::ioctl(fd, libc::SIOCSIFFLAGS, &r) }, "SIOCSIFFLAGS")?;
        // Default route via the gateway.
        // SAFETY: rtentry is plain data; zeroed is valid.
        let mut rt: libc::rtentry = unsafe { std::mem::zeroed() };
        rt.rt_dst = sockaddr(Ipv4Addr::UNSPECIFIED);
        rt.rt_genmask = sockaddr(Ipv4Addr::UNSPECIFIED);
        rt.rt_gateway = sockaddr(GATEWAY_ADDR);
        rt.rt_flags = (libc::RTF_UP | libc::RTF_GATEWAY) as libc::c_ushort;
        let dev = std::ffi::CString::new("tun0").expect("no NUL");
        rt.rt_dev = dev.as_ptr() as *mut libc::c_char;
        // SAFETY: SIOCADDRT reads a valid rtentry whose rt_dev outlives the call.
        check(unsafe { libc::ioctl(fd, libc::SIOCADDRT, &rt) }, "SIOCADDRT")?;
        Ok(tun.into())
    })
    .join()
    .map_err(|_| io::Error::other("the TUN setup thread panicked"))?
}

/// Every address of this host's interfaces (sandboxes may never connect to them).
pub fn host_addresses() -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates a list we walk read-only and free below.
    if unsafe { libc::getifaddrs(&mut ifap) } != 0 {
        return out;
    }
    let mut cur = ifap;
    while !cur.is_null() {
        // SAFETY: cur is a valid node of the list returned by getifaddrs.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr points at a sockaddr whose family says which struct it is.
            let family = unsafe { (*ifa.ifa_addr).sa_family } as i32;
            if family == libc::AF_INET {
                // SAFETY: AF_INET means sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                out.push(IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))));
            } else if family == libc::AF_INET6 {
                // SAFETY: AF_INET6 means sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                out.push(IpAddr::V6(std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr)));
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: frees the list getifaddrs allocated.
    unsafe { libc::freeifaddrs(ifap) };
    out
}
