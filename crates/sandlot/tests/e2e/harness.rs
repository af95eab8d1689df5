//! The harness: one `sandlot serve` per test, with its own state dir, loopback port and cgroup.
//!
//! Each server runs in a cgroup of its own (one per v1 controller the daemon uses; on a pure v2 host, the
//! test's own), so that a daemon's start-up sweep of `<its cgroup>/sandlot-*/` can never touch the
//! sandboxes of another test's server (or of a developer's daemon on the same machine), and so that
//! leftovers can be attributed to exactly one server. Dropping a [`Server`] stops it with SIGTERM and then
//! checks that nothing of its sandboxes is left on the host: no cgroup, no layer directory, no mount.
//!
//! Layers live on the server's btrfs layers volume, mounted only in the daemon's private mount namespace;
//! the harness looks at them through `/proc/<daemon>/root` while the daemon runs ([`Server::assert_clean`]).
//! Once the daemon has exited that volume is out of sight, so a clean shutdown is checked by restarting on
//! the same state dir and finding that the start-up sweep has nothing to remove.
//!
//! The launcher itself is the shared [`crate::common::server`]; this file adds the suite's defaults and
//! the leftovers it checks.

use std::fs;
use std::path::{Path, PathBuf};

use sandlot_client::api::ExecRequest;
use sandlot_client::Client;

pub use crate::common::http::RawResponse;
use crate::common::server::Builder;
pub use crate::common::server::TestServer as Server;
pub use crate::common::{alive, eventually, signal};
pub use crate::common::{expect_error, sh, sh_ok};

impl Server {
    /// A server of this suite: in a cgroup of its own, checked for leftovers when dropped.
    pub fn builder() -> Builder {
        Builder::new("e2e").own_cgroup().check_on_drop(no_leftovers)
    }

    /// Starts a server with its default options (so the btrfs layers volume, in the daemon's private
    /// mount namespace) on a fresh state dir, and waits until it serves.
    pub fn start() -> Server {
        Server::builder().start()
    }

    /// Starts a server with `args` added to `serve` (`&[]`: the server's defaults).
    pub fn start_with(args: &[&str]) -> Server {
        Server::builder().args(args).start()
    }

    /// Starts a second server with its own state dir in the *same* cgroup as `other` (as two daemons
    /// started from one service or shell would be). Its sandboxes' cgroups are not checked on drop.
    pub fn start_beside(other: &Server) -> Server {
        Server::builder().cgroup_of(other).start()
    }

    /// Starts the daemon again on the state dir, cgroup and options of `previous`, which must have been
    /// stopped (see [`Server::kill9`] and [`Server::terminate`]); leftovers of a crash are its start-up
    /// sweep's to find.
    pub fn restart_on(mut previous: Server) -> Server {
        previous.restart_on_a_new_port();
        previous
    }

    /// Directories that hold sandbox layers, as seen from the host: `<state>/sandboxes` and, while the
    /// daemon runs, the btrfs layers volume it mounts in its private mount namespace.
    fn layer_parents(&self) -> Vec<PathBuf> {
        let mut parents = vec![self.state_dir().join("sandboxes")];
        if self.is_running() {
            let inside = self.state_dir().join("layers").join("sandboxes");
            let via_proc = format!("/proc/{}/root{}", self.pid(), inside.display());
            parents.push(PathBuf::from(via_proc));
        }
        parents
    }

    /// The layer directory of sandbox `id`, as reachable from the host.
    pub fn layer_dir(&self, id: &str) -> PathBuf {
        let parents = self.layer_parents();
        parents.iter().map(|p| p.join(id)).find(|p| p.exists()).unwrap_or_else(|| parents[0].join(id))
    }

    /// `(controller, base)`: the directories the daemon keeps its sandbox cgroups in, beneath its own
    /// cgroup (`sandlot-<instance>`, named by `<state>/instance-id`; plain `sandlot` in older builds).
    fn cgroup_bases(&self) -> Vec<(String, PathBuf)> {
        let Some(dirs) = self.test_cgroup() else { return Vec::new() };
        let instance = fs::read_to_string(self.state_dir().join("instance-id")).ok().map(|s| s.trim().to_string());
        dirs.iter()
            .flat_map(|(ctrl, d)| {
                subdirs(d)
                    .into_iter()
                    .filter(|n| match &instance {
                        Some(i) => *n == format!("sandlot-{i}"),
                        None => n == "sandlot" || n.starts_with("sandlot-"),
                    })
                    .map(move |n| (ctrl.clone(), d.join(n)))
            })
            .collect()
    }

    /// The cgroup directories of sandbox `id`, one per controller.
    pub fn cgroup_dirs(&self, id: &str) -> Vec<PathBuf> {
        self.cgroup_bases().into_iter().map(|(_, base)| base.join(id)).collect()
    }

    /// The cgroup directory of sandbox `id` for `controller` (`memory`, `pids`, `cpu`; `unified` on v2).
    pub fn cgroup_dir(&self, id: &str, controller: &str) -> Option<PathBuf> {
        self.cgroup_bases().into_iter().find(|(c, _)| c == controller || c == "unified").map(|(_, b)| b.join(id))
    }

    /// Host pids of every process in sandbox `id`'s cgroup right now: in its own directory (v1 cpu and
    /// freezer) and in its supervisor and command leaves (v1 memory and pids; every process on v2).
    pub fn sandbox_pids(&self, id: &str) -> Vec<i32> {
        let mut pids: Vec<i32> = self
            .cgroup_dirs(id)
            .iter()
            .flat_map(|d| [d.clone(), d.join("sup"), d.join("work")])
            .filter_map(|d| fs::read_to_string(d.join("cgroup.procs")).ok())
            .flat_map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect::<Vec<i32>>())
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// What the host still holds for this server's sandboxes.
    pub fn leftovers(&self) -> Leftovers {
        let mut cgroups: Vec<String> = self
            .cgroup_bases()
            .into_iter()
            .flat_map(|(ctrl, base)| subdirs(&base).into_iter().map(move |n| format!("{ctrl}:{n}")))
            .collect();
        cgroups.sort();
        let layers = self
            .layer_parents()
            .iter()
            .filter_map(|p| fs::read_dir(p).ok())
            .flat_map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect();
        let state = self.state_dir().to_string_lossy().into_owned();
        let mounts = fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(&state))
            .map(str::to_string)
            .collect();
        Leftovers { cgroups, layers, mounts }
    }

    /// Asserts that no sandbox of this server left a cgroup, a layer directory or a host mount.
    #[track_caller]
    pub fn assert_clean(&self) {
        let left = self.leftovers();
        assert!(left.is_empty(), "leftovers on the host: {left:#?}\n--- server log ---\n{}", self.log_text());
    }

    /// `GET path_and_query` over raw HTTP with the admin key.
    pub fn get(&self, path_and_query: &str) -> RawResponse {
        self.raw("GET", path_and_query, Some(self.admin_key()), &[], b"")
    }

    /// Sends `request` verbatim (head and any body) and reads the answer.
    pub fn raw_request(&self, request: &[u8]) -> RawResponse {
        crate::common::http::request_bytes(self.port(), request).unwrap_or_else(|e| panic!("raw request: {e}"))
    }
}

/// The suite's drop check: after shutdown no sandbox of the server left anything on the host.
fn no_leftovers(server: &Server) -> Result<(), String> {
    let left = server.leftovers();
    if left.is_empty() {
        Ok(())
    } else {
        Err(format!("leftovers on the host after shutdown: {left:#?}"))
    }
}

/// What a server's sandboxes left on the host.
#[derive(Debug, Default)]
pub struct Leftovers {
    /// `controller:sandbox-id` of every sandbox cgroup still present.
    pub cgroups: Vec<String>,
    /// Entries of `<state>/sandboxes`.
    pub layers: Vec<String>,
    /// Host mountinfo lines that mention the state dir.
    pub mounts: Vec<String>,
}

impl Leftovers {
    /// Nothing is left.
    pub fn is_empty(&self) -> bool {
        self.cgroups.is_empty() && self.layers.is_empty() && self.mounts.is_empty()
    }
}

fn subdirs(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// An exec request for `argv` (no shell).
pub fn argv(args: &[&str]) -> ExecRequest {
    ExecRequest { argv: Some(args.iter().map(|s| s.to_string()).collect()), ..ExecRequest::default() }
}

/// Asserts that sandbox `id` is gone for `client`: `get` is 404 or reports `deleted`, and commands and
/// file operations are refused (404 `not_found`, or 409 `conflict` naming the deleted state).
#[track_caller]
pub fn assert_deleted(client: &Client, id: &str) {
    match client.get(id) {
        Err(e) => assert_eq!((e.status(), e.code()), (Some(404), Some("not_found")), "{e:?}"),
        Ok(info) => assert_eq!(info.state, sandlot_client::api::SandboxState::Deleted, "{info:?}"),
    }
    let sb = client.sandbox(id);
    for err in [sb.run(&["true"]).map(|_| ()).unwrap_err(), sb.read_file("/etc/hostname").map(|_| ()).unwrap_err()] {
        match err.status() {
            Some(404) => assert_eq!(err.code(), Some("not_found"), "{err:?}"),
            Some(409) => {
                assert_eq!(err.code(), Some("conflict"), "{err:?}");
                assert!(err.to_string().contains("deleted"), "{err:?}");
            }
            _ => panic!("a deleted sandbox answered {err:?}"),
        }
    }
    assert!(client.list().unwrap().iter().all(|s| s.id != id), "a deleted sandbox is listed");
}
