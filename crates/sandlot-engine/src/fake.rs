//! A driver for tests that need no root: each "sandbox" is a thread that speaks the real supervisor
//! protocol over a socketpair, so everything above the driver (the supervisor link, processes, the
//! control layer's state machine) runs as it does in production. It records what it was asked, and
//! can be told to fail a launch or to let a supervisor die.
//!
//! The in-process supervisor understands a few programs: `true`, `false`, `echo ARGS…` (prints the
//! arguments), `exit N`, and `sleep` (runs until signalled). Anything else exits 127. File operations
//! and inbound connections are refused.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use sandlot_protocol::{read_frame, write_frame, Event, FileErrorKind, Request, Termination, VERSION};

use crate::driver::{Driver, Egress, Instance, LaunchSpec, Launched, SnapshotTaken};
use crate::{lock, wait, EngineError, LayerSource, SweepReport};

/// One thing the fake driver was asked to do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// A launch of sandbox `id` from this layer source.
    Launch(String, LayerSource),
    /// A freeze (`true`) or thaw.
    Freeze(String, bool),
    /// A kill of every process.
    Kill(String),
    /// A teardown; `true` when the layer went too.
    Teardown(String, bool),
    /// Leftovers of a sandbox that was not running removed.
    Remove(String),
    /// A layer synced after a stop.
    Sync(String),
    /// A snapshot of sandbox `.0` named `.1`.
    Snapshot(String, String),
    /// A snapshot deleted.
    DeleteSnapshot(String),
    /// An image root made from this many layers.
    PrepareImage(String, usize),
    /// Image roots and chains removed by a collection.
    RemoveImages(Vec<String>),
    /// A writable layer exported as a tar.
    ExportLayer(crate::driver::ExportFrom),
}

/// What the fake host holds.
#[derive(Default)]
struct Host {
    calls: Vec<Call>,
    /// Sandboxes with a layer (made by a launch, kept by a stop, gone with a removal).
    layers: HashSet<String>,
    snapshots: HashSet<String>,
    /// Image roots made (by key) and the layer chains they used.
    images: HashSet<String>,
    chains: HashSet<String>,
    /// Launches left to fail, with the reason.
    fail_launches: Vec<String>,
    /// Running instances by sandbox, to crash them from a test.
    running: BTreeMap<String, Arc<Peer>>,
    /// OOM kills by sandbox, as a test reports them.
    ooms: BTreeMap<String, u64>,
    /// The host's own addresses and networks, as a test sets them.
    host_networks: Vec<(std::net::IpAddr, u8)>,
}

/// The fake driver (see the module's documentation).
#[derive(Default, Clone)]
pub struct FakeDriver {
    host: Arc<Mutex<Host>>,
    next_slot: Arc<AtomicU32>,
    next_pid: Arc<AtomicU32>,
}

impl FakeDriver {
    /// A fake host with nothing on it.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes `nets` the fake host's own addresses and networks (read by `Engine::refresh_host_networks`).
    pub fn set_host_networks(&self, nets: Vec<(std::net::IpAddr, u8)>) {
        lock(&self.host).host_networks = nets;
    }

    /// Everything asked so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        lock(&self.host).calls.clone()
    }

    /// Sandboxes that have a layer on the fake host.
    pub fn layers(&self) -> HashSet<String> {
        lock(&self.host).layers.clone()
    }

    /// Snapshots on the fake host.
    pub fn snapshots(&self) -> HashSet<String> {
        lock(&self.host).snapshots.clone()
    }

    /// Puts a layer on the fake host as a previous daemon would have left it.
    pub fn leave_layer(&self, id: &str) {
        lock(&self.host).layers.insert(id.to_string());
    }

    /// Makes the next launch fail with `reason`.
    pub fn fail_next_launch(&self, reason: &str) {
        lock(&self.host).fail_launches.push(reason.to_string());
    }

    /// Ends sandbox `id`'s supervisor as a crash would: the engine sees its connection close.
    /// `false` when it is not running.
    pub fn crash(&self, id: &str) -> bool {
        let peer = lock(&self.host).running.remove(id);
        match peer {
            Some(peer) => {
                peer.end("killed by SIGSEGV");
                true
            }
            None => false,
        }
    }

    /// Counts an OOM kill in sandbox `id`, as the kernel would in its cgroup.
    pub fn oom_kill(&self, id: &str) {
        *lock(&self.host).ooms.entry(id.to_string()).or_default() += 1;
    }

    fn record(&self, call: Call) {
        lock(&self.host).calls.push(call);
    }
}

impl Driver for FakeDriver {
    fn has_image(&self, image: &str) -> bool {
        image == "host" || lock(&self.host).images.contains(image)
    }

    fn prepare_image(
        &self,
        key: &str,
        layers: &[crate::driver::LayerBlob],
        _max_bytes: u64,
        _deadline: std::time::Instant,
        events: &mut dyn FnMut(crate::driver::PrepareEvent),
    ) -> Result<u64, EngineError> {
        self.record(Call::PrepareImage(key.to_string(), layers.len()));
        let chains = crate::driver::chain_ids(&layers.iter().map(|l| l.diff_id.clone()).collect::<Vec<_>>());
        for (index, chain) in chains.into_iter().enumerate() {
            let fresh = lock(&self.host).chains.insert(chain);
            events(crate::driver::PrepareEvent::Unpacked { index, report: fresh.then(Default::default) });
        }
        lock(&self.host).images.insert(key.to_string());
        Ok(0)
    }

    fn image_user(&self, _key: &str, spec: &str) -> Result<crate::driver::ImageUser, EngineError> {
        // The fake host's images have no files: a numeric USER resolves as it would without a passwd.
        let uid = spec.parse().map_err(|_| EngineError::Io(std::io::Error::other(format!("no user {spec:?}"))))?;
        Ok(crate::driver::ImageUser { uid, gid: 0, name: spec.to_string(), home: "/".into() })
    }

    fn remove_unused_images(
        &self,
        keep_roots: &HashSet<String>,
        keep_chains: &HashSet<String>,
        keep_blobs: &HashSet<String>,
    ) -> Vec<String> {
        let _ = keep_blobs;
        let mut host = lock(&self.host);
        let mut gone: Vec<String> = host.images.iter().filter(|k| !keep_roots.contains(*k)).cloned().collect();
        gone.extend(host.chains.iter().filter(|k| !keep_chains.contains(*k)).cloned());
        host.images.retain(|k| keep_roots.contains(k));
        host.chains.retain(|k| keep_chains.contains(k));
        gone.sort();
        host.calls.push(Call::RemoveImages(gone.clone()));
        gone
    }

    fn disk_limits(&self) -> bool {
        true
    }

    fn launch(&self, spec: &LaunchSpec<'_>) -> Result<Launched, EngineError> {
        let id = spec.id.to_string();
        self.record(Call::Launch(id.clone(), spec.source.clone()));
        {
            let mut host = lock(&self.host);
            if !host.fail_launches.is_empty() {
                let reason = host.fail_launches.remove(0);
                return Err(EngineError::StartFailed(reason));
            }
            match spec.source {
                LayerSource::Existing if !host.layers.contains(&id) => return Err(EngineError::LayerMissing(id)),
                LayerSource::Snapshot { id: snap, .. } if !host.snapshots.contains(snap) => {
                    return Err(EngineError::Io(std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        format!("snapshot {snap} is missing"),
                    )))
                }
                _ => {}
            }
            host.layers.insert(id.clone());
        }
        let (daemon_end, supervisor_end) = UnixStream::pair()?;
        let slot = spec.preferred_slot.unwrap_or_else(|| self.next_slot.fetch_add(1, Ordering::SeqCst));
        let peer = Arc::new(Peer { ended: Mutex::new(None), wake: Condvar::new(), sock: supervisor_end.try_clone()? });
        lock(&self.host).running.insert(id.clone(), Arc::clone(&peer));
        let serving = Arc::clone(&peer);
        std::thread::Builder::new().name(format!("fake-{id}")).spawn(move || serving.serve(supervisor_end))?;
        Ok(Launched {
            // A new pid per launch, as on a real host: a resumed sandbox's supervisor is another
            // process than the one that died before, and the death handling must tell them apart.
            pid: 1_000_000 + self.next_pid.fetch_add(1, Ordering::SeqCst) as i32,
            control: daemon_end,
            log: None,
            instance: Box::new(FakeInstance { id, slot, peer, driver: self.clone(), frozen: AtomicBool::new(false) }),
        })
    }

    fn remove(&self, id: &str) -> Result<(), EngineError> {
        self.record(Call::Remove(id.to_string()));
        lock(&self.host).layers.remove(id);
        Ok(())
    }

    fn sync(&self, id: &str) -> Result<(), EngineError> {
        self.record(Call::Sync(id.to_string()));
        Ok(())
    }

    fn snapshot(&self, id: &str, slot: u32, snap: &str) -> Result<SnapshotTaken, EngineError> {
        self.record(Call::Snapshot(id.to_string(), snap.to_string()));
        let mut host = lock(&self.host);
        if !host.layers.contains(id) {
            return Err(EngineError::LayerMissing(id.to_string()));
        }
        host.snapshots.insert(snap.to_string());
        Ok(SnapshotTaken { bytes: 1 << 20, owner: slot })
    }

    fn delete_snapshot(&self, snap: &str) -> Result<(), EngineError> {
        self.record(Call::DeleteSnapshot(snap.to_string()));
        lock(&self.host).snapshots.remove(snap);
        Ok(())
    }

    fn export_layer(
        &self,
        from: &crate::driver::ExportFrom,
        out: &mut dyn std::io::Write,
    ) -> Result<crate::driver::Exported, EngineError> {
        use crate::driver::ExportFrom;
        self.record(Call::ExportLayer(from.clone()));
        let host = lock(&self.host);
        let present = match from {
            ExportFrom::Sandbox { id, .. } => host.layers.contains(id),
            ExportFrom::Snapshot { id, .. } => host.snapshots.contains(id),
        };
        if !present {
            return Err(EngineError::LayerMissing(format!("{from:?}")));
        }
        // The fake host keeps no files: a layer is an empty tar (its two end-of-archive blocks).
        out.write_all(&[0u8; 1024])?;
        Ok(crate::driver::Exported::default())
    }

    fn sweep(&self, keep: &HashSet<String>, running: &HashSet<String>) -> SweepReport {
        let mut host = lock(&self.host);
        let gone: Vec<String> =
            host.layers.iter().filter(|l| !keep.contains(*l) && !running.contains(*l)).cloned().collect();
        for l in &gone {
            host.layers.remove(l);
        }
        SweepReport { cgroups: Vec::new(), layers: gone }
    }

    fn sweep_snapshots(&self, keep: &HashSet<String>) -> Vec<String> {
        let mut host = lock(&self.host);
        let gone: Vec<String> = host.snapshots.iter().filter(|s| !keep.contains(*s)).cloned().collect();
        for s in &gone {
            host.snapshots.remove(s);
        }
        gone
    }

    fn host_networks(&self) -> Vec<(std::net::IpAddr, u8)> {
        lock(&self.host).host_networks.clone()
    }

    /// A host of 16 GiB with a 100 GB layers volume (tests of capacity give the control layer theirs).
    fn capacity(&self) -> std::io::Result<crate::HostCapacity> {
        Ok(crate::HostCapacity { memory_bytes: 16 << 30, pid_max: 1 << 22, layers_bytes: Some(100 << 30) })
    }

    /// As many as the Linux driver's supervisor holds, so the ledger's sums are the same.
    fn supervisor_pids(&self) -> u64 {
        160
    }

    fn tls_env(&self) -> &'static [(&'static str, &'static str)] {
        &[("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt")]
    }

    fn shutdown(&self) {}
}

/// The in-process supervisor of one fake sandbox.
struct Peer {
    /// How it ended, once it has.
    ended: Mutex<Option<String>>,
    wake: Condvar,
    /// Its end of the socket, to close it from outside (kill, crash).
    sock: UnixStream,
}

impl Peer {
    fn end(&self, how: &str) {
        let mut ended = lock(&self.ended);
        if ended.is_none() {
            *ended = Some(how.to_string());
        }
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
        self.wake.notify_all();
    }

    /// Answers the daemon until the socket closes.
    fn serve(&self, sock: UnixStream) {
        let mut rd = match sock.try_clone() {
            Ok(s) => s,
            Err(_) => return,
        };
        let wr = Mutex::new(sock);
        let send = |ev: &Event, payload: &[u8]| {
            let mut w = lock(&wr);
            let _ = write_frame(&mut *w, ev, payload).and_then(|_| w.flush().map_err(Into::into));
        };
        send(&Event::Ready { version: VERSION }, &[]);
        // Processes that run until signalled (`sleep`).
        let mut sleeping = HashSet::new();
        while let Ok(frame) = read_frame::<Request, _>(&mut rd) {
            match frame.header {
                Request::Spawn(spawn) => {
                    let proc = spawn.proc;
                    send(&Event::Started { proc, pid: 2 }, &[]);
                    let args = &spawn.argv[1..];
                    let code = match spawn.argv[0].as_str() {
                        "true" => Some(0),
                        "false" => Some(1),
                        "exit" => Some(args.first().and_then(|c| c.parse().ok()).unwrap_or(0)),
                        "echo" => {
                            send(&Event::Output { proc, fd: 1 }, format!("{}\n", args.join(" ")).as_bytes());
                            Some(0)
                        }
                        "sleep" => None,
                        _ => {
                            send(&Event::Output { proc, fd: 2 }, b"fake supervisor: no such program\n");
                            Some(127)
                        }
                    };
                    match code {
                        Some(code) => send(&Event::Exited { proc, end: Termination::Exited { code } }, &[]),
                        None => {
                            sleeping.insert(proc);
                        }
                    }
                }
                Request::Signal { proc, signal } if sleeping.remove(&proc) => {
                    send(&Event::Exited { proc, end: Termination::Signaled { signal } }, &[]);
                }
                Request::File { req, .. } => send(
                    &Event::Failed {
                        req,
                        kind: FileErrorKind::Invalid,
                        message: "the fake supervisor has no file system".into(),
                    },
                    &[],
                ),
                Request::Watch { id, .. } => send(
                    &Event::WatchFailed {
                        id,
                        kind: FileErrorKind::Invalid,
                        message: "the fake supervisor has no file system to watch".into(),
                    },
                    &[],
                ),
                Request::Connect { conn, port } => send(
                    &Event::ConnectFailed { conn, message: format!("nothing listens on port {port}"), busy: false },
                    &[],
                ),
                _ => {}
            }
        }
        self.end("exit status 0");
    }
}

/// One fake sandbox, as the engine sees it.
struct FakeInstance {
    id: String,
    slot: u32,
    peer: Arc<Peer>,
    driver: FakeDriver,
    frozen: AtomicBool,
}

impl Instance for FakeInstance {
    fn slot(&self) -> u32 {
        self.slot
    }

    fn oom_kills(&self) -> u64 {
        lock(&self.driver.host).ooms.get(&self.id).copied().unwrap_or(0)
    }

    fn usage(&self, _disk: bool) -> crate::driver::Usage {
        // A fake sandbox runs nothing: it uses nothing, and says so rather than inventing figures.
        crate::driver::Usage::default()
    }

    fn freeze(&self, frozen: bool) -> Result<(), EngineError> {
        self.driver.record(Call::Freeze(self.id.clone(), frozen));
        self.frozen.store(frozen, Ordering::SeqCst);
        Ok(())
    }

    fn kill(&self) {
        self.driver.record(Call::Kill(self.id.clone()));
        self.peer.end("killed by SIGKILL");
    }

    fn wait(&self) -> String {
        let mut ended = lock(&self.peer.ended);
        while ended.is_none() {
            ended = wait(&self.peer.wake, ended);
        }
        ended.clone().unwrap_or_default()
    }

    fn teardown(&self, remove_layer: bool) {
        self.driver.record(Call::Teardown(self.id.clone(), remove_layer));
        let mut host = lock(&self.driver.host);
        host.running.remove(&self.id);
        if remove_layer {
            host.layers.remove(&self.id);
        }
    }

    fn attach_egress(&self) -> Result<Egress, EngineError> {
        Err(EngineError::Io(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "the fake driver gives sandboxes no network",
        )))
    }
}
