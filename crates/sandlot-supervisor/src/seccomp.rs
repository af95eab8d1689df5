//! The sandbox seccomp profile (`resources/seccomp/sandbox.json`) compiled to classic BPF.
//!
//! Layout of the program, top to bottom:
//! 1. foreign architecture → kill the process; x32-ABI syscall number (bit 30 set) → kill;
//! 2. one block per conditional rule (clone, unshare, clone3, personality, ioctl, ptrace);
//! 3. the allowlist, as `if nr == k: allow` pairs, hottest syscalls first;
//! 4. anything else → EPERM.
//!
//! Every jump is short and forward (BPF offsets are 8-bit), so no trampolines are needed.

use std::collections::BTreeSet;

use serde_json::Value;

const POLICY: &str = include_str!("../../../resources/seccomp/sandbox.json");

const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ERRNO: u32 = 0x0005_0000;
const RET_ALLOW: u32 = 0x7fff_0000;

// Offsets in struct seccomp_data.
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const fn off_arg_low(i: u32) -> u32 {
    16 + 8 * i
}

const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD (0) | BPF_W (0) | BPF_ABS (0x20)
const BPF_JEQ_K: u16 = 0x05 | 0x10; // BPF_JMP | BPF_JEQ | BPF_K
const BPF_JGE_K: u16 = 0x05 | 0x30; // BPF_JMP | BPF_JGE | BPF_K
const BPF_JSET_K: u16 = 0x05 | 0x40; // BPF_JMP | BPF_JSET | BPF_K
const BPF_RET_K: u16 = 0x06;

/// Every namespace flag of clone/unshare.
const NAMESPACE_FLAGS: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | 0x80) as u32; // CLONE_NEWTIME

/// Syscalls that come first in the allowlist because they are the most frequent.
const HOT: [&str; 16] = [
    "read",
    "write",
    "futex",
    "mmap",
    "munmap",
    "close",
    "openat",
    "newfstatat",
    "fstat",
    "lseek",
    "rt_sigprocmask",
    "rt_sigaction",
    "brk",
    "mprotect",
    "epoll_wait",
    "poll",
];

/// A compiled filter, ready for `prctl(PR_SET_SECCOMP)`.
pub struct Filter {
    insns: Vec<libc::sock_filter>,
}

/// Profile problems (a bad JSON file or an unknown syscall name).
#[derive(Debug)]
pub struct PolicyError(pub String);

impl std::fmt::Display for PolicyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "seccomp profile: {}", self.0)
    }
}

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt: 0, jf: 0, k }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

fn names(group: &Value) -> impl Iterator<Item = &str> {
    group["names"].as_array().into_iter().flatten().filter_map(Value::as_str)
}

/// The syscall names the profile allows unconditionally, and those it denies.
pub fn lists() -> Result<(BTreeSet<String>, BTreeSet<String>), PolicyError> {
    let v: Value = serde_json::from_str(POLICY).map_err(|e| PolicyError(e.to_string()))?;
    let collect = |key: &str| -> BTreeSet<String> {
        v[key].as_array().into_iter().flatten().flat_map(names).map(str::to_string).collect()
    };
    Ok((collect("allow"), collect("deny")))
}

impl Filter {
    /// Compiles the built-in profile.
    pub fn sandbox() -> Result<Self, PolicyError> {
        let v: Value = serde_json::from_str(POLICY).map_err(|e| PolicyError(e.to_string()))?;
        // 1. Architecture and x32: kill, since a syscall number of another ABI means nothing below.
        let mut f = vec![
            stmt(BPF_LD_W_ABS, OFF_ARCH),
            jump(BPF_JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
            stmt(BPF_RET_K, RET_KILL_PROCESS),
            stmt(BPF_LD_W_ABS, OFF_NR),
            jump(BPF_JGE_K, X32_SYSCALL_BIT, 0, 1),
            stmt(BPF_RET_K, RET_KILL_PROCESS),
        ];

        // 2. Conditional rules.
        let eperm = RET_ERRNO | libc::EPERM as u32;
        for rule in v["conditional"].as_array().into_iter().flatten() {
            let name = rule["name"].as_str().unwrap_or_default();
            let nr = syscall_nr(name).ok_or_else(|| PolicyError(format!("unknown syscall {name:?}")))?;
            let arg = rule["arg"].as_u64().unwrap_or(0) as u32;
            let body: Vec<libc::sock_filter> = match rule["rule"].as_str().unwrap_or_default() {
                "no_namespace_flags" => vec![
                    stmt(BPF_LD_W_ABS, off_arg_low(arg)),
                    jump(BPF_JSET_K, NAMESPACE_FLAGS, 0, 1),
                    stmt(BPF_RET_K, eperm),
                    stmt(BPF_RET_K, RET_ALLOW),
                ],
                "enosys" => vec![stmt(BPF_RET_K, RET_ERRNO | libc::ENOSYS as u32)],
                "personality_safe" => {
                    // PER_LINUX, PER_LINUX32, UNAME26, UNAME26|PER_LINUX32, and 0xffffffff (query).
                    let ok = [0u32, 0x0008, 0x0002_0000, 0x0002_0008, 0xffff_ffff];
                    let mut b = vec![stmt(BPF_LD_W_ABS, off_arg_low(arg))];
                    for (i, k) in ok.iter().enumerate() {
                        b.push(jump(BPF_JEQ_K, *k, (ok.len() - i) as u8, 0));
                    }
                    b.push(stmt(BPF_RET_K, eperm));
                    b.push(stmt(BPF_RET_K, RET_ALLOW));
                    b
                }
                "no_tty_injection" => vec![
                    stmt(BPF_LD_W_ABS, off_arg_low(arg)),
                    jump(BPF_JEQ_K, libc::TIOCSTI as u32, 1, 0),
                    jump(BPF_JEQ_K, libc::TIOCLINUX as u32, 0, 1),
                    stmt(BPF_RET_K, eperm),
                    stmt(BPF_RET_K, RET_ALLOW),
                ],
                "no_attach" => vec![
                    stmt(BPF_LD_W_ABS, off_arg_low(arg)),
                    jump(BPF_JEQ_K, libc::PTRACE_ATTACH, 1, 0),
                    jump(BPF_JEQ_K, 0x4206, 0, 1), // PTRACE_SEIZE
                    stmt(BPF_RET_K, eperm),
                    stmt(BPF_RET_K, RET_ALLOW),
                ],
                "socket_families" => {
                    // Unix, netlink, and IPv4/IPv6 with the ordinary protocols. Other families (vsock,
                    // packet, bluetooth, …) reach past the network namespace or into rarely used kernel
                    // code; other IP protocols (SCTP, DCCP, UDP-Lite, MPTCP) load modules on first use.
                    let (af_unix, af_inet, af_inet6, af_netlink) = (1u32, 2u32, 10u32, 16u32);
                    let allow_at = 13u8;
                    let mut b = vec![stmt(BPF_LD_W_ABS, off_arg_low(0))];
                    b.push(jump(BPF_JEQ_K, af_unix, allow_at - 2, 0));
                    b.push(jump(BPF_JEQ_K, af_netlink, allow_at - 3, 0));
                    b.push(jump(BPF_JEQ_K, af_inet, 2, 0));
                    b.push(jump(BPF_JEQ_K, af_inet6, 1, 0));
                    b.push(stmt(BPF_RET_K, RET_ERRNO | libc::EAFNOSUPPORT as u32));
                    b.push(stmt(BPF_LD_W_ABS, off_arg_low(2)));
                    let protocols = [0u32, libc::IPPROTO_TCP as u32, libc::IPPROTO_UDP as u32, 1, 58];
                    for (i, p) in protocols.iter().enumerate() {
                        b.push(jump(BPF_JEQ_K, *p, (protocols.len() - i) as u8, 0));
                    }
                    b.push(stmt(BPF_RET_K, RET_ERRNO | libc::EPROTONOSUPPORT as u32));
                    b.push(stmt(BPF_RET_K, RET_ALLOW));
                    debug_assert_eq!(b.len(), allow_at as usize + 1);
                    b
                }
                other => return Err(PolicyError(format!("unknown rule {other:?} for {name}"))),
            };
            // A (the accumulator) still holds the syscall number here: each block ends in a return.
            f.push(jump(BPF_JEQ_K, nr, 0, body.len() as u8));
            f.extend(body);
        }

        // 3. The allowlist, hottest first.
        let (allow, deny) = lists()?;
        if let Some(both) = allow.intersection(&deny).next() {
            return Err(PolicyError(format!("{both} is both allowed and denied")));
        }
        let mut ordered: Vec<&str> = HOT.iter().copied().filter(|n| allow.contains(*n)).collect();
        ordered.extend(allow.iter().map(String::as_str).filter(|n| !HOT.contains(n)));
        for name in ordered {
            let nr = syscall_nr(name).ok_or_else(|| PolicyError(format!("unknown syscall {name:?}")))?;
            f.push(jump(BPF_JEQ_K, nr, 0, 1));
            f.push(stmt(BPF_RET_K, RET_ALLOW));
        }
        // 4. Default.
        f.push(stmt(BPF_RET_K, eperm));
        if f.len() > 4096 {
            return Err(PolicyError(format!("{} instructions, over the kernel's 4096", f.len())));
        }
        Ok(Filter { insns: f })
    }

    /// Installs the filter on the calling thread. Async-signal-safe: for use between fork and exec.
    ///
    /// # Safety
    /// Only a prctl with a pointer to the already-built program; call after no_new_privs.
    pub unsafe fn install(&self) -> i32 {
        let prog = libc::sock_fprog { len: self.insns.len() as u16, filter: self.insns.as_ptr() as *mut _ };
        // SAFETY: prog points at self.insns, alive for the call.
        unsafe { libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog as *const _ as usize, 0, 0) }
    }

    /// Number of BPF instructions.
    pub fn len(&self) -> usize {
        self.insns.len()
    }

    /// Whether the program is empty (never, for a compiled profile).
    pub fn is_empty(&self) -> bool {
        self.insns.is_empty()
    }
}

/// x86_64 syscall numbers of every name the profile mentions (allowed, conditional or denied).
const SYSCALLS: &[(&str, libc::c_long)] = &[
    ("accept", libc::SYS_accept),
    ("accept4", libc::SYS_accept4),
    ("access", libc::SYS_access),
    ("acct", libc::SYS_acct),
    ("add_key", libc::SYS_add_key),
    ("adjtimex", libc::SYS_adjtimex),
    ("alarm", libc::SYS_alarm),
    ("arch_prctl", libc::SYS_arch_prctl),
    ("bind", libc::SYS_bind),
    ("bpf", libc::SYS_bpf),
    ("brk", libc::SYS_brk),
    ("capget", libc::SYS_capget),
    ("capset", libc::SYS_capset),
    ("chdir", libc::SYS_chdir),
    ("chmod", libc::SYS_chmod),
    ("chown", libc::SYS_chown),
    ("chroot", libc::SYS_chroot),
    ("clock_adjtime", libc::SYS_clock_adjtime),
    ("clock_getres", libc::SYS_clock_getres),
    ("clock_gettime", libc::SYS_clock_gettime),
    ("clock_nanosleep", libc::SYS_clock_nanosleep),
    ("clock_settime", libc::SYS_clock_settime),
    ("clone", libc::SYS_clone),
    ("clone3", libc::SYS_clone3),
    ("close", libc::SYS_close),
    ("close_range", libc::SYS_close_range),
    ("connect", libc::SYS_connect),
    ("copy_file_range", libc::SYS_copy_file_range),
    ("creat", libc::SYS_creat),
    ("delete_module", libc::SYS_delete_module),
    ("dup", libc::SYS_dup),
    ("dup2", libc::SYS_dup2),
    ("dup3", libc::SYS_dup3),
    ("epoll_create", libc::SYS_epoll_create),
    ("epoll_create1", libc::SYS_epoll_create1),
    ("epoll_ctl", libc::SYS_epoll_ctl),
    ("epoll_pwait", libc::SYS_epoll_pwait),
    ("epoll_pwait2", libc::SYS_epoll_pwait2),
    ("epoll_wait", libc::SYS_epoll_wait),
    ("eventfd", libc::SYS_eventfd),
    ("eventfd2", libc::SYS_eventfd2),
    ("execve", libc::SYS_execve),
    ("execveat", libc::SYS_execveat),
    ("exit", libc::SYS_exit),
    ("exit_group", libc::SYS_exit_group),
    ("faccessat", libc::SYS_faccessat),
    ("faccessat2", libc::SYS_faccessat2),
    ("fadvise64", libc::SYS_fadvise64),
    ("fallocate", libc::SYS_fallocate),
    ("fanotify_init", libc::SYS_fanotify_init),
    ("fanotify_mark", libc::SYS_fanotify_mark),
    ("fchdir", libc::SYS_fchdir),
    ("fchmod", libc::SYS_fchmod),
    ("fchmodat", libc::SYS_fchmodat),
    ("fchown", libc::SYS_fchown),
    ("fchownat", libc::SYS_fchownat),
    ("fcntl", libc::SYS_fcntl),
    ("fdatasync", libc::SYS_fdatasync),
    ("fgetxattr", libc::SYS_fgetxattr),
    ("finit_module", libc::SYS_finit_module),
    ("flistxattr", libc::SYS_flistxattr),
    ("flock", libc::SYS_flock),
    ("fork", libc::SYS_fork),
    ("fremovexattr", libc::SYS_fremovexattr),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsetxattr", libc::SYS_fsetxattr),
    ("fsmount", libc::SYS_fsmount),
    ("fsopen", libc::SYS_fsopen),
    ("fspick", libc::SYS_fspick),
    ("fstat", libc::SYS_fstat),
    ("fstatfs", libc::SYS_fstatfs),
    ("fsync", libc::SYS_fsync),
    ("ftruncate", libc::SYS_ftruncate),
    ("futex", libc::SYS_futex),
    ("futex_waitv", libc::SYS_futex_waitv),
    ("futimesat", libc::SYS_futimesat),
    ("get_mempolicy", libc::SYS_get_mempolicy),
    ("get_robust_list", libc::SYS_get_robust_list),
    ("get_thread_area", libc::SYS_get_thread_area),
    ("getcpu", libc::SYS_getcpu),
    ("getcwd", libc::SYS_getcwd),
    ("getdents", libc::SYS_getdents),
    ("getdents64", libc::SYS_getdents64),
    ("getegid", libc::SYS_getegid),
    ("geteuid", libc::SYS_geteuid),
    ("getgid", libc::SYS_getgid),
    ("getgroups", libc::SYS_getgroups),
    ("getitimer", libc::SYS_getitimer),
    ("getpeername", libc::SYS_getpeername),
    ("getpgid", libc::SYS_getpgid),
    ("getpgrp", libc::SYS_getpgrp),
    ("getpid", libc::SYS_getpid),
    ("getppid", libc::SYS_getppid),
    ("getpriority", libc::SYS_getpriority),
    ("getrandom", libc::SYS_getrandom),
    ("getresgid", libc::SYS_getresgid),
    ("getresuid", libc::SYS_getresuid),
    ("getrlimit", libc::SYS_getrlimit),
    ("getrusage", libc::SYS_getrusage),
    ("getsid", libc::SYS_getsid),
    ("getsockname", libc::SYS_getsockname),
    ("getsockopt", libc::SYS_getsockopt),
    ("gettid", libc::SYS_gettid),
    ("gettimeofday", libc::SYS_gettimeofday),
    ("getuid", libc::SYS_getuid),
    ("getxattr", libc::SYS_getxattr),
    ("init_module", libc::SYS_init_module),
    ("inotify_add_watch", libc::SYS_inotify_add_watch),
    ("inotify_init", libc::SYS_inotify_init),
    ("inotify_init1", libc::SYS_inotify_init1),
    ("inotify_rm_watch", libc::SYS_inotify_rm_watch),
    ("io_cancel", libc::SYS_io_cancel),
    ("io_destroy", libc::SYS_io_destroy),
    ("io_getevents", libc::SYS_io_getevents),
    ("io_pgetevents", 333),
    ("io_setup", libc::SYS_io_setup),
    ("io_submit", libc::SYS_io_submit),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("ioctl", libc::SYS_ioctl),
    ("ioperm", libc::SYS_ioperm),
    ("iopl", libc::SYS_iopl),
    ("ioprio_get", libc::SYS_ioprio_get),
    ("ioprio_set", libc::SYS_ioprio_set),
    ("kcmp", libc::SYS_kcmp),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("kexec_load", libc::SYS_kexec_load),
    ("keyctl", libc::SYS_keyctl),
    ("kill", libc::SYS_kill),
    ("landlock_add_rule", libc::SYS_landlock_add_rule),
    ("landlock_create_ruleset", libc::SYS_landlock_create_ruleset),
    ("landlock_restrict_self", libc::SYS_landlock_restrict_self),
    ("lchown", libc::SYS_lchown),
    ("lgetxattr", libc::SYS_lgetxattr),
    ("link", libc::SYS_link),
    ("linkat", libc::SYS_linkat),
    ("listen", libc::SYS_listen),
    ("listxattr", libc::SYS_listxattr),
    ("llistxattr", libc::SYS_llistxattr),
    ("lookup_dcookie", libc::SYS_lookup_dcookie),
    ("lremovexattr", libc::SYS_lremovexattr),
    ("lseek", libc::SYS_lseek),
    ("lsetxattr", libc::SYS_lsetxattr),
    ("lstat", libc::SYS_lstat),
    ("madvise", libc::SYS_madvise),
    ("mbind", libc::SYS_mbind),
    ("membarrier", libc::SYS_membarrier),
    ("memfd_create", libc::SYS_memfd_create),
    ("migrate_pages", libc::SYS_migrate_pages),
    ("mincore", libc::SYS_mincore),
    ("mkdir", libc::SYS_mkdir),
    ("mkdirat", libc::SYS_mkdirat),
    ("mknod", libc::SYS_mknod),
    ("mknodat", libc::SYS_mknodat),
    ("mlock", libc::SYS_mlock),
    ("mlock2", libc::SYS_mlock2),
    ("mlockall", libc::SYS_mlockall),
    ("mmap", libc::SYS_mmap),
    ("mount", libc::SYS_mount),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("move_mount", libc::SYS_move_mount),
    ("move_pages", libc::SYS_move_pages),
    ("mprotect", libc::SYS_mprotect),
    ("mq_getsetattr", libc::SYS_mq_getsetattr),
    ("mq_notify", libc::SYS_mq_notify),
    ("mq_open", libc::SYS_mq_open),
    ("mq_timedreceive", libc::SYS_mq_timedreceive),
    ("mq_timedsend", libc::SYS_mq_timedsend),
    ("mq_unlink", libc::SYS_mq_unlink),
    ("mremap", libc::SYS_mremap),
    ("msgctl", libc::SYS_msgctl),
    ("msgget", libc::SYS_msgget),
    ("msgrcv", libc::SYS_msgrcv),
    ("msgsnd", libc::SYS_msgsnd),
    ("msync", libc::SYS_msync),
    ("munlock", libc::SYS_munlock),
    ("munlockall", libc::SYS_munlockall),
    ("munmap", libc::SYS_munmap),
    ("name_to_handle_at", libc::SYS_name_to_handle_at),
    ("nanosleep", libc::SYS_nanosleep),
    ("newfstatat", libc::SYS_newfstatat),
    ("open", libc::SYS_open),
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    ("open_tree", libc::SYS_open_tree),
    ("openat", libc::SYS_openat),
    ("openat2", libc::SYS_openat2),
    ("pause", libc::SYS_pause),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("personality", libc::SYS_personality),
    ("pidfd_getfd", libc::SYS_pidfd_getfd),
    ("pidfd_open", libc::SYS_pidfd_open),
    ("pidfd_send_signal", libc::SYS_pidfd_send_signal),
    ("pipe", libc::SYS_pipe),
    ("pipe2", libc::SYS_pipe2),
    ("pivot_root", libc::SYS_pivot_root),
    ("pkey_alloc", libc::SYS_pkey_alloc),
    ("pkey_free", libc::SYS_pkey_free),
    ("pkey_mprotect", libc::SYS_pkey_mprotect),
    ("poll", libc::SYS_poll),
    ("ppoll", libc::SYS_ppoll),
    ("prctl", libc::SYS_prctl),
    ("pread64", libc::SYS_pread64),
    ("preadv", libc::SYS_preadv),
    ("preadv2", libc::SYS_preadv2),
    ("prlimit64", libc::SYS_prlimit64),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("pselect6", libc::SYS_pselect6),
    ("ptrace", libc::SYS_ptrace),
    ("pwrite64", libc::SYS_pwrite64),
    ("pwritev", libc::SYS_pwritev),
    ("pwritev2", libc::SYS_pwritev2),
    ("quotactl", libc::SYS_quotactl),
    ("read", libc::SYS_read),
    ("readahead", libc::SYS_readahead),
    ("readlink", libc::SYS_readlink),
    ("readlinkat", libc::SYS_readlinkat),
    ("readv", libc::SYS_readv),
    ("reboot", libc::SYS_reboot),
    ("recvfrom", libc::SYS_recvfrom),
    ("recvmmsg", libc::SYS_recvmmsg),
    ("recvmsg", libc::SYS_recvmsg),
    ("remap_file_pages", libc::SYS_remap_file_pages),
    ("removexattr", libc::SYS_removexattr),
    ("rename", libc::SYS_rename),
    ("renameat", libc::SYS_renameat),
    ("renameat2", libc::SYS_renameat2),
    ("request_key", libc::SYS_request_key),
    ("restart_syscall", libc::SYS_restart_syscall),
    ("rmdir", libc::SYS_rmdir),
    ("rseq", libc::SYS_rseq),
    ("rt_sigaction", libc::SYS_rt_sigaction),
    ("rt_sigpending", libc::SYS_rt_sigpending),
    ("rt_sigprocmask", libc::SYS_rt_sigprocmask),
    ("rt_sigqueueinfo", libc::SYS_rt_sigqueueinfo),
    ("rt_sigreturn", libc::SYS_rt_sigreturn),
    ("rt_sigsuspend", libc::SYS_rt_sigsuspend),
    ("rt_sigtimedwait", libc::SYS_rt_sigtimedwait),
    ("rt_tgsigqueueinfo", libc::SYS_rt_tgsigqueueinfo),
    ("sched_get_priority_max", libc::SYS_sched_get_priority_max),
    ("sched_get_priority_min", libc::SYS_sched_get_priority_min),
    ("sched_getaffinity", libc::SYS_sched_getaffinity),
    ("sched_getattr", libc::SYS_sched_getattr),
    ("sched_getparam", libc::SYS_sched_getparam),
    ("sched_getscheduler", libc::SYS_sched_getscheduler),
    ("sched_rr_get_interval", libc::SYS_sched_rr_get_interval),
    ("sched_setaffinity", libc::SYS_sched_setaffinity),
    ("sched_setattr", libc::SYS_sched_setattr),
    ("sched_setparam", libc::SYS_sched_setparam),
    ("sched_setscheduler", libc::SYS_sched_setscheduler),
    ("sched_yield", libc::SYS_sched_yield),
    ("seccomp", libc::SYS_seccomp),
    ("select", libc::SYS_select),
    ("semctl", libc::SYS_semctl),
    ("semget", libc::SYS_semget),
    ("semop", libc::SYS_semop),
    ("semtimedop", libc::SYS_semtimedop),
    ("sendfile", libc::SYS_sendfile),
    ("sendmmsg", libc::SYS_sendmmsg),
    ("sendmsg", libc::SYS_sendmsg),
    ("sendto", libc::SYS_sendto),
    ("set_mempolicy", libc::SYS_set_mempolicy),
    ("set_robust_list", libc::SYS_set_robust_list),
    ("set_thread_area", libc::SYS_set_thread_area),
    ("set_tid_address", libc::SYS_set_tid_address),
    ("setdomainname", libc::SYS_setdomainname),
    ("setfsgid", libc::SYS_setfsgid),
    ("setfsuid", libc::SYS_setfsuid),
    ("setgid", libc::SYS_setgid),
    ("setgroups", libc::SYS_setgroups),
    ("sethostname", libc::SYS_sethostname),
    ("setitimer", libc::SYS_setitimer),
    ("setns", libc::SYS_setns),
    ("setpgid", libc::SYS_setpgid),
    ("setpriority", libc::SYS_setpriority),
    ("setregid", libc::SYS_setregid),
    ("setresgid", libc::SYS_setresgid),
    ("setresuid", libc::SYS_setresuid),
    ("setreuid", libc::SYS_setreuid),
    ("setrlimit", libc::SYS_setrlimit),
    ("setsid", libc::SYS_setsid),
    ("setsockopt", libc::SYS_setsockopt),
    ("settimeofday", libc::SYS_settimeofday),
    ("setuid", libc::SYS_setuid),
    ("setxattr", libc::SYS_setxattr),
    ("shmat", libc::SYS_shmat),
    ("shmctl", libc::SYS_shmctl),
    ("shmdt", libc::SYS_shmdt),
    ("shmget", libc::SYS_shmget),
    ("shutdown", libc::SYS_shutdown),
    ("sigaltstack", libc::SYS_sigaltstack),
    ("signalfd", libc::SYS_signalfd),
    ("signalfd4", libc::SYS_signalfd4),
    ("socket", libc::SYS_socket),
    ("socketpair", libc::SYS_socketpair),
    ("splice", libc::SYS_splice),
    ("stat", libc::SYS_stat),
    ("statfs", libc::SYS_statfs),
    ("statx", libc::SYS_statx),
    ("swapoff", libc::SYS_swapoff),
    ("swapon", libc::SYS_swapon),
    ("symlink", libc::SYS_symlink),
    ("symlinkat", libc::SYS_symlinkat),
    ("sync", libc::SYS_sync),
    ("sync_file_range", libc::SYS_sync_file_range),
    ("syncfs", libc::SYS_syncfs),
    ("sysfs", libc::SYS_sysfs),
    ("sysinfo", libc::SYS_sysinfo),
    ("syslog", libc::SYS_syslog),
    ("tee", libc::SYS_tee),
    ("tgkill", libc::SYS_tgkill),
    ("time", libc::SYS_time),
    ("timer_create", libc::SYS_timer_create),
    ("timer_delete", libc::SYS_timer_delete),
    ("timer_getoverrun", libc::SYS_timer_getoverrun),
    ("timer_gettime", libc::SYS_timer_gettime),
    ("timer_settime", libc::SYS_timer_settime),
    ("timerfd_create", libc::SYS_timerfd_create),
    ("timerfd_gettime", libc::SYS_timerfd_gettime),
    ("timerfd_settime", libc::SYS_timerfd_settime),
    ("times", libc::SYS_times),
    ("tkill", libc::SYS_tkill),
    ("truncate", libc::SYS_truncate),
    ("umask", libc::SYS_umask),
    ("umount2", libc::SYS_umount2),
    ("uname", libc::SYS_uname),
    ("unlink", libc::SYS_unlink),
    ("unlinkat", libc::SYS_unlinkat),
    ("unshare", libc::SYS_unshare),
    ("uselib", libc::SYS_uselib),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("ustat", libc::SYS_ustat),
    ("utime", libc::SYS_utime),
    ("utimensat", libc::SYS_utimensat),
    ("utimes", libc::SYS_utimes),
    ("vfork", libc::SYS_vfork),
    ("vhangup", libc::SYS_vhangup),
    ("vmsplice", libc::SYS_vmsplice),
    ("wait4", libc::SYS_wait4),
    ("waitid", libc::SYS_waitid),
    ("write", libc::SYS_write),
    ("writev", libc::SYS_writev),
];

/// The x86_64 number of a syscall name.
pub fn syscall_nr(name: &str) -> Option<u32> {
    SYSCALLS.iter().find(|(n, _)| *n == name).map(|(_, nr)| *nr as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_compiles_and_fits() {
        let f = Filter::sandbox().expect("profile compiles");
        assert!(f.len() > 300 && f.len() < 4096, "{} instructions", f.len());
    }

    #[test]
    fn no_syscall_is_both_allowed_and_denied_and_dangerous_ones_are_denied() {
        let (allow, deny) = lists().unwrap();
        assert!(allow.is_disjoint(&deny));
        for must in [
            "bpf",
            "kexec_load",
            "init_module",
            "userfaultfd",
            "io_uring_setup",
            "io_setup",
            "io_submit",
            "mount",
            "keyctl",
            "open_by_handle_at",
            "setns",
            "perf_event_open",
        ] {
            assert!(deny.contains(must) && !allow.contains(must), "{must}");
        }
    }

    #[test]
    fn every_allowed_name_is_listed_once() {
        let v: serde_json::Value = serde_json::from_str(POLICY).unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for g in v["allow"].as_array().unwrap() {
            for n in names(g) {
                assert!(seen.insert(n.to_string()), "{n} listed twice (a redundant rule)");
            }
        }
    }
}
