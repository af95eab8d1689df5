//! Landlock, by raw syscalls: the sandbox's supervisor restricts itself (and so every process it will
//! start) to the sandbox's own file tree, without device-node creation, and scopes abstract unix sockets
//! and signals to the sandbox where the kernel's ABI allows.
//!
//! The rules are path-beneath rules on the sandbox root, so access through anything not reached from
//! that root (a host directory fd that leaked in, a bind mount added later) is denied.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const SYS_CREATE_RULESET: libc::c_long = 444;
const SYS_ADD_RULE: libc::c_long = 445;
const SYS_RESTRICT_SELF: libc::c_long = 446;
const CREATE_RULESET_VERSION: u32 = 1;
const RULE_PATH_BENEATH: u32 = 1;

const EXECUTE: u64 = 1 << 0;
const MAKE_CHAR: u64 = 1 << 6;
const MAKE_BLOCK: u64 = 1 << 11;
const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// What was enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Enforced {
    /// Landlock ABI version of the kernel (0 = unsupported).
    pub abi: i64,
    /// Abstract unix sockets and signals are scoped.
    pub scoped: bool,
}

/// Filesystem rights each ABI version knows: v1 has 13, v2 adds REFER, v3 TRUNCATE, v5 IOCTL_DEV.
fn fs_rights(abi: i64) -> u64 {
    let bits = match abi {
        1 => 13,
        2 => 14,
        3 | 4 => 15,
        _ => 16,
    };
    (1u64 << bits) - 1
}

/// The kernel's Landlock ABI version, 0 when Landlock is absent or disabled.
pub fn abi() -> i64 {
    // SAFETY: the version query takes no attribute pointer.
    let v = unsafe { libc::syscall(SYS_CREATE_RULESET, std::ptr::null::<RulesetAttr>(), 0, CREATE_RULESET_VERSION) };
    v.max(0)
}

/// Restricts the calling process (and its future children) to `root`'s tree. Best effort: on a kernel
/// without Landlock it returns `abi: 0` and the caller logs a warning.
pub fn restrict_to(root: &str) -> io::Result<Enforced> {
    let abi = abi();
    if abi == 0 {
        return Ok(Enforced { abi: 0, scoped: false });
    }
    let handled = fs_rights(abi);
    let scoped = if abi >= 6 { SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL } else { 0 };
    let attr = RulesetAttr { handled_access_fs: handled, handled_access_net: 0, scoped };
    // Older kernels reject a struct larger than they know: pass only the fields of this ABI.
    let size = if abi >= 6 {
        24
    } else if abi >= 4 {
        16
    } else {
        8
    };
    // SAFETY: attr is a valid ruleset_attr of at least `size` bytes.
    let fd = unsafe { libc::syscall(SYS_CREATE_RULESET, &attr as *const RulesetAttr, size, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd returned by landlock_create_ruleset.
    let ruleset = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let dir = std::fs::File::open(root)?;
    let rule = PathBeneathAttr {
        // Everything in the tree, except creating device nodes.
        allowed_access: handled & !(MAKE_CHAR | MAKE_BLOCK) | EXECUTE,
        parent_fd: dir.as_raw_fd(),
    };
    // SAFETY: rule is a valid path_beneath_attr; ruleset and dir are open fds.
    let rc = unsafe {
        libc::syscall(SYS_ADD_RULE, ruleset.as_raw_fd(), RULE_PATH_BENEATH, &rule as *const PathBeneathAttr, 0)
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: restrict_self on a valid ruleset fd; the process holds CAP_SYS_ADMIN in its namespace.
    let rc = unsafe { libc::syscall(SYS_RESTRICT_SELF, ruleset.as_raw_fd(), 0) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Enforced { abi, scoped: scoped != 0 })
}
