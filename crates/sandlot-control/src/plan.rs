//! A create request turned, once, into what the engine runs: the validated limits, the record in
//! state `creating`, the layer source and the compiled network policy. The policy is compiled here, so
//! a bad spec is refused before anything is recorded, and used when the sandbox boots, under its lock
//! after its record exists, unless the tenant's exemptions changed in between (see
//! `Control::start_record`).

use std::collections::BTreeMap;

use sandlot_api::{CreateSandbox, Limits, SandboxInfo, SandboxState, TimeoutAction};
use sandlot_engine::LayerSource;
use sandlot_store::{now_ms, SandboxRecord};

use crate::config::{MIN_DISK_MB, MIN_MEMORY_MB, MIN_PIDS};
use crate::network::CompiledPolicy;
use crate::{Caller, Control, Error, Result};

const MAX_METADATA: usize = 64;
/// Metadata keys sandlot sets itself: `build` marks an image build step's sandbox (whose start
/// command is not run) and `build_line` its Dockerfile line. A user setting one could switch off a
/// sandbox's start command, so requests may not.
pub(crate) const RESERVED_METADATA: [&str; 2] = ["build", "build_line"];
/// Seconds a sandbox paused by expiry stays paused before it is stopped, by default.
pub(crate) const DEFAULT_STOP_AFTER_S: u64 = 600;
/// Longest idle timeout.
const MAX_IDLE_S: u64 = 7 * 86_400;
const MAX_ENV: usize = 256;
/// Bytes of all names and values of an `env` together: what a kernel takes for a whole
/// environment and argument list is far more, but a sandbox's environment is stored in its record
/// and sent with every command.
const MAX_ENV_BYTES: usize = 128 << 10;

/// A validated create: what to record and what to boot.
pub(crate) struct Plan {
    /// The record, in state `creating`.
    pub rec: SandboxRecord,
    /// Where its writable layer comes from.
    pub source: LayerSource,
    /// Its network policy, when the plan compiled it (else the boot does).
    pub policy: Option<CompiledPolicy>,
}

/// A random id with `prefix` (20 characters of [a-z0-9] from the OS RNG: 103 bits).
pub(crate) fn random_id(prefix: &str) -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rngs::OsRng;
    let body: String = (0..20).map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char).collect();
    format!("{prefix}{body}")
}

/// Names of sandboxes and snapshots: 1-64 characters of letters, digits, `-`, `_`, `.`.
pub(crate) fn check_name(n: &str) -> Result<()> {
    if n.is_empty() || n.len() > 64 || !n.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
        return Err(Error::invalid(format!("name {n:?}: use 1-64 characters of A-Z a-z 0-9 - _ .")));
    }
    Ok(())
}

/// Checks a text value that will cross into the sandbox (argv, env, paths): no NUL bytes.
pub(crate) fn no_nul(what: &str, s: &str) -> Result<()> {
    if s.contains('\0') {
        return Err(Error::invalid(format!("{what} contains a NUL byte")));
    }
    Ok(())
}

/// Checks environment names and values (shared by create and exec).
pub(crate) fn check_env(env: &BTreeMap<String, String>) -> Result<()> {
    if env.len() > MAX_ENV {
        return Err(Error::invalid(format!("env: at most {MAX_ENV} variables")));
    }
    let bytes: usize = env.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
    if bytes > MAX_ENV_BYTES {
        return Err(Error::invalid(format!(
            "env: {bytes} bytes of names and values, more than {} KiB; pass large data as a file instead",
            MAX_ENV_BYTES >> 10
        )));
    }
    for (k, v) in env {
        if k.is_empty() || k.contains('=') || k.contains('\0') {
            return Err(Error::invalid(format!("env: invalid variable name {k:?} (no `=`, no NUL, not empty)")));
        }
        no_nul(&format!("env {k}"), v)?;
    }
    Ok(())
}

/// A new record in state `creating`.
pub(crate) fn new_record(tenant: &str, image: &str, limits: Limits, env: &BTreeMap<String, String>) -> SandboxRecord {
    let now = now_ms();
    SandboxRecord {
        info: SandboxInfo {
            id: random_id("sb_"),
            state: SandboxState::Creating,
            reason: None,
            image: image.to_string(),
            expires_at_ms: now + limits.timeout_s as i64 * 1000,
            limits,
            metadata: BTreeMap::new(),
            created_at_ms: now,
            name: None,
            persistent: false,
            auto_resume: false,
            idle_timeout_s: None,
            on_timeout: TimeoutAction::Delete,
            stop_after_s: DEFAULT_STOP_AFTER_S,
            last_active_at_ms: now,
            snapshot: None,
            network: Default::default(),
        },
        tenant: tenant.to_string(),
        env: env.clone(),
        slot: 0,
        network: Default::default(),
        image_key: None,
    }
}

impl Control {
    /// The limits a request gets: its own, or the server's defaults, each within the host's bounds.
    pub(crate) fn limits(&self, req: &CreateSandbox) -> Result<Limits> {
        let d = &self.cfg.defaults;
        let cpu = req.cpu.unwrap_or(d.cpu);
        let host_cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        if !(cpu.is_finite() && cpu >= 0.01 && cpu <= host_cpus) {
            return Err(Error::invalid(format!(
                "cpu must be between 0.01 and {host_cpus} (this host's cores), got {cpu}"
            )));
        }
        // The upper bounds are the host's (checked below, with the maximum in the message).
        let memory_mb = req.memory_mb.unwrap_or(d.memory_mb);
        if memory_mb < MIN_MEMORY_MB {
            return Err(Error::invalid(format!("memory_mb must be at least {MIN_MEMORY_MB}, got {memory_mb}")));
        }
        let pids = req.pids.unwrap_or(d.pids);
        if pids < MIN_PIDS {
            return Err(Error::invalid(format!("pids must be at least {MIN_PIDS}, got {pids}")));
        }
        let disk_mb = match (req.disk_mb, self.engine.disk_limits()) {
            (_, false) => None,
            (disk, true) => {
                let disk = disk.unwrap_or(d.disk_mb);
                if disk < MIN_DISK_MB {
                    return Err(Error::invalid(format!("disk_mb must be at least {MIN_DISK_MB}, got {disk}")));
                }
                Some(disk)
            }
        };
        let timeout_s = req.timeout_s.unwrap_or(d.timeout_s);
        self.check_timeout(timeout_s)?;
        let limits = Limits { cpu, memory_mb, pids, disk_mb, timeout_s };
        crate::capacity::check_against_host(self.ledger.host(), &limits)?;
        Ok(limits)
    }

    /// A lifetime a request may ask for.
    pub(crate) fn check_timeout(&self, timeout_s: u64) -> Result<()> {
        if timeout_s == 0 || timeout_s > self.cfg.max_timeout_s {
            return Err(Error::invalid(format!(
                "timeout_s must be between 1 and {} (the server's --max-timeout-s), got {timeout_s}",
                self.cfg.max_timeout_s
            )));
        }
        Ok(())
    }

    /// Validates `req` for `caller` and builds its plan; nothing is recorded yet.
    pub(crate) fn plan(&self, caller: &Caller, req: &CreateSandbox) -> Result<Plan> {
        let (mut image, mut image_key) = match &req.snapshot {
            // A snapshot's sandbox boots the root the snapshot was taken over (below).
            Some(_) => (String::new(), None),
            None => self.resolve_image(caller, req.image.as_deref())?,
        };
        let limits = self.limits(req)?;
        check_env(&req.env)?;
        if req.metadata.len() > MAX_METADATA {
            return Err(Error::invalid(format!("metadata: at most {MAX_METADATA} entries")));
        }
        if let Some(k) = req.metadata.keys().find(|k| RESERVED_METADATA.contains(&k.as_str())) {
            return Err(Error::invalid(format!(
                "metadata: the key {k:?} is sandlot's own (it marks image build sandboxes): name yours otherwise"
            )));
        }
        for (k, v) in &req.metadata {
            if k.is_empty() || k.len() > 256 || v.len() > 4096 {
                return Err(Error::invalid("metadata: keys must be 1-256 bytes and values at most 4096 bytes"));
            }
        }
        if req.idle_timeout_s.is_some_and(|t| t == 0 || t > MAX_IDLE_S) {
            return Err(Error::invalid(format!("idle_timeout_s must be between 1 and {MAX_IDLE_S}")));
        }
        if req.stop_after_s.is_some_and(|t| t > MAX_IDLE_S) {
            return Err(Error::invalid(format!("stop_after_s must be at most {MAX_IDLE_S}")));
        }
        if req.persistent == Some(true) && !self.engine.disk_limits() {
            return Err(Error::invalid(
                "persistent sandboxes need the layers volume; this server runs with --no-disk-quota",
            ));
        }
        let mut source = LayerSource::Fresh;
        if let Some(snap) = &req.snapshot {
            let (info, owner) = self
                .store
                .get_snapshot(&caller.tenant, snap)?
                .ok_or_else(|| Error::not_found(&format!("snapshot {snap}")))?;
            if req.image.as_ref().is_some_and(|i| *i != info.image) {
                return Err(Error::invalid(format!("snapshot {snap} is of image {:?}; leave `image` out", info.image)));
            }
            image_key = self.store.snapshot_image_key(&info.id)?;
            if image_key.as_ref().is_some_and(|k| !self.engine.has_image(k)) {
                return Err(Error::internal(format!("the image root of snapshot {snap} is missing on this host")));
            }
            image = info.image;
            source = LayerSource::Snapshot { id: info.id, owner };
        }
        let persistent = req.persistent.unwrap_or(false);
        let mut rec = new_record(&caller.tenant, &image, limits, &req.env);
        rec.info.metadata = req.metadata.clone();
        rec.image_key = image_key;
        rec.info.name = req.name.clone();
        rec.info.persistent = persistent;
        rec.info.auto_resume = req.auto_resume.unwrap_or(persistent);
        rec.info.idle_timeout_s = req.idle_timeout_s;
        rec.info.on_timeout =
            req.on_timeout.unwrap_or(if persistent { TimeoutAction::Pause } else { TimeoutAction::Delete });
        rec.info.stop_after_s = req.stop_after_s.unwrap_or(DEFAULT_STOP_AFTER_S);
        if let Some(net) = &req.network {
            rec.network = net.clone();
            rec.info.network = net.info(0, 0);
        }
        let policy = self.compile_policy(&caller.tenant, &rec.network)?;
        rec.info.snapshot = match &source {
            LayerSource::Snapshot { id, .. } => Some(id.clone()),
            _ => None,
        };
        Ok(Plan { rec, source, policy: Some(policy) })
    }
}
