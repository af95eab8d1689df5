//! The socket-lookup BPF program that sends a sandbox's traffic to the daemon.
//!
//! A `BPF_PROG_TYPE_SK_LOOKUP` program runs when the kernel of the sandbox's network namespace looks for
//! a socket to deliver a new TCP connection or UDP datagram to. With every address made local (see
//! [`crate::net`]), that is every connection the sandbox opens. The program passes traffic for
//! loopback and for the sandbox's own address through to the usual lookup (the sandbox's own servers),
//! and hands everything else to one of the daemon's four sockets, chosen by protocol and family:
//!
//! | key | socket               |
//! |-----|----------------------|
//! | 0   | TCP, IPv4 (listener) |
//! | 1   | TCP, IPv6 (listener) |
//! | 2   | UDP, IPv4            |
//! | 3   | UDP, IPv6            |
//!
//! The program is a few dozen instructions, assembled here (as the seccomp filter is) rather than
//! compiled from C, so the build needs no clang and the daemon no BPF loader library.

use std::fs::File;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_MAP_TYPE_SOCKMAP: u32 = 15;
const BPF_PROG_TYPE_SK_LOOKUP: u32 = 30;
const BPF_SK_LOOKUP: u32 = 36;

// Offsets into `struct bpf_sk_lookup`.
const CTX_FAMILY: i16 = 8;
const CTX_PROTOCOL: i16 = 12;
const CTX_REMOTE_IP4: i16 = 16;
const CTX_REMOTE_PORT: i16 = 36;
const CTX_LOCAL_IP4: i16 = 40;
const CTX_LOCAL_IP6: i16 = 44;

const HELPER_MAP_LOOKUP_ELEM: i32 = 1;
const HELPER_SK_RELEASE: i32 = 86;
const HELPER_SK_ASSIGN: i32 = 124;
const SK_PASS: i32 = 1;

/// The attached program. Dropping it detaches the program from the namespace.
#[derive(Debug)]
pub struct Steering {
    _link: OwnedFd,
}

impl Steering {
    /// Loads the program with `sockets` (in key order, see the module docs; a missing one leaves its
    /// traffic to the usual lookup, which finds nothing) and attaches it to the network namespace
    /// `netns`. `own` is the sandbox's own address, which is not steered; `gateway` is where the
    /// daemon answers DNS (its replies, sent from `gateway`:53, are delivered, not steered back).
    pub fn attach(
        netns: &File,
        sockets: [Option<&OwnedFd>; 4],
        own: Ipv4Addr,
        gateway: Ipv4Addr,
    ) -> io::Result<Steering> {
        let map = create_sockmap(sockets.len() as u32)?;
        for (key, sock) in sockets.iter().enumerate() {
            let Some(sock) = sock else { continue };
            update(&map, key as u32, sock.as_raw_fd() as u64)
                .map_err(|e| io::Error::new(e.kind(), format!("adding socket {key} to the steering map: {e}")))?;
        }
        let prog = load(&program(map.as_raw_fd(), own, gateway))?;
        let mut attr = Attr::default();
        attr.u32_at(0, prog.as_raw_fd() as u32);
        attr.u32_at(4, netns.as_raw_fd() as u32);
        attr.u32_at(8, BPF_SK_LOOKUP);
        let link = attr.call(BPF_LINK_CREATE).map_err(|e| {
            io::Error::new(e.kind(), format!("attaching the socket-lookup program (needs Linux ≥ 5.9): {e}"))
        })?;
        // The link holds the program, and the program its map: only the link needs keeping.
        Ok(Steering { _link: link })
    }
}

/// Whether this kernel lets the daemon create the steering map and load the steering program
/// (`sandlot doctor`): the same map and program a sandbox gets, verified and then dropped, attached to
/// nothing.
pub fn probe() -> io::Result<()> {
    let map = create_sockmap(4)?;
    load(&program(map.as_raw_fd(), crate::net::SANDBOX_ADDR, crate::net::GATEWAY_ADDR)).map(drop)
}

/// A zeroed `union bpf_attr`, large enough for the commands used here.
#[derive(Default)]
struct Attr([u64; 16]);

impl Attr {
    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: viewing a [u64; 16] as 128 bytes; u8 has no alignment or validity requirements.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast::<u8>(), 128) }
    }

    fn u32_at(&mut self, off: usize, v: u32) {
        self.bytes()[off..off + 4].copy_from_slice(&v.to_ne_bytes());
    }

    fn u64_at(&mut self, off: usize, v: u64) {
        self.bytes()[off..off + 8].copy_from_slice(&v.to_ne_bytes());
    }

    /// Runs `bpf(cmd, self)` and returns its non-negative result.
    fn run(&mut self, cmd: libc::c_long) -> io::Result<libc::c_long> {
        // SAFETY: the attr is a 128-byte, zero-padded buffer; every pointer stored in it refers to memory
        // that outlives this call.
        let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, self.0.as_mut_ptr(), 128usize) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(rc)
    }

    /// Runs a command that makes a new descriptor (map, program, link) and returns it.
    fn call(&mut self, cmd: libc::c_long) -> io::Result<OwnedFd> {
        let fd = self.run(cmd)?;
        // SAFETY: for these commands the result is a fresh descriptor nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
    }
}

fn create_sockmap(entries: u32) -> io::Result<OwnedFd> {
    let mut attr = Attr::default();
    attr.u32_at(0, BPF_MAP_TYPE_SOCKMAP);
    attr.u32_at(4, 4); // key: u32
    attr.u32_at(8, 8); // value: u64 socket fd
    attr.u32_at(12, entries);
    attr.call(BPF_MAP_CREATE).map_err(|e| io::Error::new(e.kind(), format!("creating the steering map: {e}")))
}

fn update(map: &OwnedFd, key: u32, value: u64) -> io::Result<()> {
    let mut attr = Attr::default();
    attr.u32_at(0, map.as_raw_fd() as u32);
    attr.u64_at(8, &key as *const u32 as u64);
    attr.u64_at(16, &value as *const u64 as u64);
    attr.run(BPF_MAP_UPDATE_ELEM).map(drop)
}

fn load(insns: &[u64]) -> io::Result<OwnedFd> {
    let license = c"Dual MIT/GPL";
    let mut log = vec![0u8; 64 * 1024];
    let mut attr = Attr::default();
    attr.u32_at(0, BPF_PROG_TYPE_SK_LOOKUP);
    attr.u32_at(4, insns.len() as u32);
    attr.u64_at(8, insns.as_ptr() as u64);
    attr.u64_at(16, license.as_ptr() as u64);
    attr.u32_at(24, 1); // log level: the verifier's reasons, kept for the error
    attr.u32_at(28, log.len() as u32);
    attr.u64_at(32, log.as_mut_ptr() as u64);
    attr.bytes()[48..48 + 13].copy_from_slice(b"sandlot_steer");
    attr.u32_at(68, BPF_SK_LOOKUP);
    attr.call(BPF_PROG_LOAD).map_err(|e| {
        let text = String::from_utf8_lossy(&log[..log.iter().position(|b| *b == 0).unwrap_or(0)]).into_owned();
        let tail: String =
            text.lines().rev().take(6).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join(" | ");
        io::Error::new(e.kind(), format!("loading the socket-lookup program: {e}; verifier: {tail}"))
    })
}

/// One instruction, or a jump whose offset is resolved from a label.
enum Op {
    Insn {
        code: u8,
        dst: u8,
        src: u8,
        off: i16,
        imm: i32,
    },
    Jump {
        code: u8,
        dst: u8,
        imm: i32,
        to: &'static str,
    },
    /// 64-bit immediate load of a map fd (two instruction slots).
    LoadMap {
        dst: u8,
        fd: i32,
    },
    Label(&'static str),
}

// Opcodes (class | op | source).
const MOV64_REG: u8 = 0xbf;
const MOV64_IMM: u8 = 0xb7;
const ADD64_IMM: u8 = 0x07;
const AND64_IMM: u8 = 0x57;
const LDX_W: u8 = 0x61;
const STX_W: u8 = 0x63;
const JEQ_IMM: u8 = 0x15;
const JNE_IMM: u8 = 0x55;
const JA: u8 = 0x05;
const CALL: u8 = 0x85;
const EXIT: u8 = 0x95;
const LD_IMM64: u8 = 0x18;
const PSEUDO_MAP_FD: u8 = 1;

fn i(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Op {
    Op::Insn { code, dst, src, off, imm }
}

fn j(code: u8, dst: u8, imm: i32, to: &'static str) -> Op {
    Op::Jump { code, dst, imm, to }
}

/// The steering program, for the map `map_fd`, the sandbox's own address `own` and the DNS gateway.
fn program(map_fd: i32, own: Ipv4Addr, gateway: Ipv4Addr) -> Vec<u64> {
    // A network-order address as the program loads it (a little-endian u32 of its bytes).
    let own = i32::from_le_bytes(own.octets());
    let gateway = i32::from_le_bytes(gateway.octets());
    let dns_port = i32::from(u16::from_le_bytes(53u16.to_be_bytes()));
    let loopback6_last = i32::from_le_bytes([0, 0, 0, 1]);
    let ops = vec![
        i(MOV64_REG, 6, 1, 0, 0), // r6 = ctx
        i(MOV64_IMM, 7, 0, 0, 0), // r7 = key: 0 for TCP…
        i(LDX_W, 2, 6, CTX_PROTOCOL, 0),
        j(JNE_IMM, 2, libc::IPPROTO_UDP, "family"),
        i(MOV64_IMM, 7, 0, 0, 2), // …2 for UDP
        // A datagram from the gateway's port 53 is the daemon's DNS reply to an unconnected socket of
        // the sandbox (whose address is also local): deliver it, do not steer it back to the daemon.
        i(LDX_W, 3, 6, CTX_REMOTE_PORT, 0),
        j(JNE_IMM, 3, dns_port, "family"),
        i(LDX_W, 3, 6, CTX_REMOTE_IP4, 0),
        j(JEQ_IMM, 3, gateway, "pass"),
        Op::Label("family"),
        i(LDX_W, 2, 6, CTX_FAMILY, 0),
        j(JNE_IMM, 2, libc::AF_INET, "v6"),
        // IPv4: loopback (127/8) and the sandbox's own address stay the sandbox's.
        i(LDX_W, 3, 6, CTX_LOCAL_IP4, 0),
        j(JEQ_IMM, 3, own, "pass"),
        i(AND64_IMM, 3, 0, 0, 0xff),
        j(JEQ_IMM, 3, 127, "pass"),
        j(JA, 0, 0, "lookup"),
        Op::Label("v6"),
        i(ADD64_IMM, 7, 0, 0, 1), // +1 for IPv6
        // IPv6: ::1 stays the sandbox's.
        i(LDX_W, 3, 6, CTX_LOCAL_IP6, 0),
        j(JNE_IMM, 3, 0, "lookup"),
        i(LDX_W, 3, 6, CTX_LOCAL_IP6 + 4, 0),
        j(JNE_IMM, 3, 0, "lookup"),
        i(LDX_W, 3, 6, CTX_LOCAL_IP6 + 8, 0),
        j(JNE_IMM, 3, 0, "lookup"),
        i(LDX_W, 3, 6, CTX_LOCAL_IP6 + 12, 0),
        j(JEQ_IMM, 3, loopback6_last, "pass"),
        Op::Label("lookup"),
        i(STX_W, 10, 7, -4, 0), // *(u32 *)(fp - 4) = key
        i(MOV64_REG, 2, 10, 0, 0),
        i(ADD64_IMM, 2, 0, 0, -4),
        Op::LoadMap { dst: 1, fd: map_fd },
        i(CALL, 0, 0, 0, HELPER_MAP_LOOKUP_ELEM),
        j(JEQ_IMM, 0, 0, "pass"),
        i(MOV64_REG, 8, 0, 0, 0), // r8 = the daemon's socket (a reference we must release)
        i(MOV64_REG, 1, 6, 0, 0),
        i(MOV64_REG, 2, 8, 0, 0),
        i(MOV64_IMM, 3, 0, 0, 0),
        i(CALL, 0, 0, 0, HELPER_SK_ASSIGN),
        i(MOV64_REG, 1, 8, 0, 0),
        i(CALL, 0, 0, 0, HELPER_SK_RELEASE),
        Op::Label("pass"),
        i(MOV64_IMM, 0, 0, 0, SK_PASS),
        i(EXIT, 0, 0, 0, 0),
    ];
    assemble(&ops)
}

fn encode(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
    let mut b = [0u8; 8];
    b[0] = code;
    b[1] = (src << 4) | (dst & 0x0f);
    b[2..4].copy_from_slice(&off.to_le_bytes());
    b[4..8].copy_from_slice(&imm.to_le_bytes());
    u64::from_le_bytes(b)
}

/// Resolves labels to relative jump offsets and encodes the instructions.
fn assemble(ops: &[Op]) -> Vec<u64> {
    let mut labels = std::collections::HashMap::new();
    let mut pc = 0usize;
    for op in ops {
        match op {
            Op::Label(l) => {
                labels.insert(*l, pc);
            }
            Op::LoadMap { .. } => pc += 2,
            _ => pc += 1,
        }
    }
    let mut out = Vec::with_capacity(pc);
    for op in ops {
        match *op {
            Op::Insn { code, dst, src, off, imm } => out.push(encode(code, dst, src, off, imm)),
            Op::Jump { code, dst, imm, to } => {
                let target = labels[to];
                let off = target as i64 - (out.len() as i64 + 1);
                out.push(encode(code, dst, 0, off as i16, imm));
            }
            Op::LoadMap { dst, fd } => {
                out.push(encode(LD_IMM64, dst, PSEUDO_MAP_FD, 0, fd));
                out.push(encode(0, 0, 0, 0, 0));
            }
            Op::Label(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_resolve_forward_past_the_two_slot_map_load() {
        let prog = program(7, Ipv4Addr::new(10, 200, 0, 2), Ipv4Addr::new(10, 200, 0, 1));
        // Every jump lands inside the program, and the program ends in `r0 = SK_PASS; exit`.
        for (pc, insn) in prog.iter().enumerate() {
            let b = insn.to_le_bytes();
            if matches!(b[0], JEQ_IMM | JNE_IMM | JA) {
                let off = i16::from_le_bytes([b[2], b[3]]) as i64;
                let target = pc as i64 + 1 + off;
                assert!(target > pc as i64 && (target as usize) < prog.len(), "jump at {pc} to {target}");
            }
        }
        assert_eq!(prog.last().unwrap().to_le_bytes()[0], EXIT);
        let pass = prog[prog.len() - 2].to_le_bytes();
        assert_eq!((pass[0], i32::from_le_bytes([pass[4], pass[5], pass[6], pass[7]])), (MOV64_IMM, SK_PASS));
        // The map load carries the fd and is followed by its zero second half.
        let at = prog.iter().position(|x| x.to_le_bytes()[0] == LD_IMM64).unwrap();
        assert_eq!(i32::from_le_bytes(prog[at].to_le_bytes()[4..8].try_into().unwrap()), 7);
        assert_eq!(prog[at + 1], 0);
    }

    #[test]
    fn the_kernel_verifier_accepts_the_program() {
        if !crate::running_as_root() {
            eprintln!("skipped: loading BPF needs root");
            return;
        }
        let map = create_sockmap(4).expect("sockmap");
        load(&program(map.as_raw_fd(), Ipv4Addr::new(10, 200, 0, 2), Ipv4Addr::new(10, 200, 0, 1)))
            .expect("verifier accepts the program");
    }
}
