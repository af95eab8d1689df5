//! The escape suite: attacks from inside a sandbox, each asserting the specific denial that stops it.
//!
//! Every test starts its own `sandlot serve` (as root, on loopback; see [`server`]), creates a fresh
//! sandbox and runs a small attack program in it (Python 3 or shell; see [`probe`]) that prints one
//! result line per attempt — `bpf: errno=1 EPERM` — which the test compares exactly. A test named after
//! a threat fails when that threat gets through or is stopped by something other than the layer that
//! should stop it.
//!
//! The catalogue:
//! - [`host`]: host files, processes, devices, IPC, sockets, network and cgroups are out of reach.
//! - [`hostside`]: the daemon's own work on sandbox-written trees (fork, snapshots) against planted links.
//! - [`syscalls`]: the seccomp profile, syscall by syscall.
//! - [`privileges`]: capabilities, no_new_privs, ptrace, device nodes, chroot, the supervisor.
//! - [`files`]: the file API against planted symlinks, `..`, tar slips and links; sandbox vs sandbox.
//! - [`limits`]: fork, memory, disk, inode, output, tmpfs, request-size, CPU and time exhaustion.
//! - [`layers`]: each defence layer alone (`--insecure-disable-layer`), and per-sandbox host uid ranges.
//! - [`leaks`]: descriptors that cross from the host side into sandbox code.
//! - [`bounds`]: the daemon's own resources: API connections, host capacity, the audit log, lifetimes.
//! - [`pid1`]: the supervisor under load and odd inputs (connection floods, FIFOs, deep trees, unread
//!   stdin, ptrace stops, /proc through the file API).

#[path = "../common/mod.rs"]
mod common;
mod probe;
mod server;

mod bounds;
mod files;
mod host;
mod hostside;
mod layers;
mod leaks;
mod limits;
mod pid1;
mod privileges;
mod syscalls;
