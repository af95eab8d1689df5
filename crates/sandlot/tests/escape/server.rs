//! The launcher: one `sandlot serve` per test, on a fresh state dir and a free loopback port, with
//! `--test-loopback-only` (no attack needs to reach anything: the proxy refuses, and logs, any
//! non-loopback dial).
//!
//! Each server writes its admin key to `<state>/admin.key`, names its cgroups after a random instance id
//! kept in the state dir (so parallel servers never sweep each other's sandboxes), and mounts its layers
//! volume in a mount namespace of its own. Dropping a [`Server`] sends SIGTERM (the server deletes its
//! sandboxes) and waits for it; a server that does not exit in time is killed. The launcher itself is the
//! shared [`crate::common::server`]; this file adds the suite's defaults and the supervisors' view.

use std::fs;
use std::io::Write;
use std::net::TcpStream;

use sandlot_client::Sandbox;

use crate::common::server::Builder;
pub use crate::common::server::TestServer as Server;

/// A sandbox's pid 1 seen from the host.
#[derive(Debug, Clone)]
pub struct Supervisor {
    /// Host pid.
    pub pid: i32,
    /// Host uids from `/proc/<pid>/status`: real, effective, saved, filesystem.
    pub uids: [u32; 4],
    /// Host cgroup paths of the process (`/proc/<pid>/cgroup`), which name its sandbox.
    pub cgroup: String,
}

impl Server {
    /// A server of this suite (every defence layer on, loopback only); add `disable_layer`, `fd_limit`,
    /// `inherit_dir` or `serve` arguments, then `start()`.
    pub fn builder() -> Builder {
        Builder::new("escape").loopback_only()
    }

    /// A server with every defence layer on.
    pub fn start() -> Server {
        Server::builder().start()
    }

    /// A server with `layers` switched off (test-only flag of the server).
    pub fn without(layers: &[&str]) -> Server {
        layers.iter().fold(Server::builder(), |b, layer| b.disable_layer(layer)).start()
    }

    /// Asks for a download of `path` from `sb` with `key` over a raw connection that never reads the
    /// answer: the server's side of it fills and waits (a slow or stalled client).
    pub fn unread_download(&self, key: &str, sb: &Sandbox, path: &str) -> TcpStream {
        let mut s = TcpStream::connect(("127.0.0.1", self.port())).expect("connecting to the server");
        write!(
            s,
            "GET /v1/sandboxes/{}/files?path={path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n\r\n",
            sb.id()
        )
        .expect("sending the request");
        s
    }

    /// The supervisors (pid 1 of each sandbox) this daemon started, read from the host's /proc.
    pub fn supervisors(&self) -> Vec<Supervisor> {
        let daemon = self.pid();
        let mut found = Vec::new();
        for entry in fs::read_dir("/proc").expect("reading /proc").flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if cmdline != b"sandlot\0__supervisor\0" {
                continue;
            }
            let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let field = |name: &str| -> Vec<u32> {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(|rest| rest.split_whitespace().filter_map(|n| n.parse().ok()).collect())
                    .unwrap_or_default()
            };
            if field("PPid:") != [daemon as u32] {
                continue;
            }
            let uid = field("Uid:");
            let uids = [uid[0], uid[1], uid[2], uid[3]];
            let cgroup = fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
            found.push(Supervisor { pid, uids, cgroup });
        }
        found
    }
}
