//! The server's settings the control layer acts on, validated once at start.

/// What a sandbox gets when its request names nothing.
#[derive(Debug, Clone, PartialEq)]
pub struct Defaults {
    /// Memory limit, MiB.
    pub memory_mb: u64,
    /// CPU limit, cores.
    pub cpu: f64,
    /// Process limit.
    pub pids: u64,
    /// Writable-layer cap, MiB.
    pub disk_mb: u64,
    /// Lifetime, seconds.
    pub timeout_s: u64,
}

/// The control layer's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// What a sandbox gets when its request names nothing.
    pub defaults: Defaults,
    /// Longest lifetime (and exec timeout) a request may ask for, seconds.
    pub max_timeout_s: u64,
    /// Default per-stream output cap of an exec, bytes.
    pub max_output_bytes: u64,
    /// Largest file or tar upload, bytes.
    pub max_upload_bytes: u64,
    /// Most sandboxes alive at once.
    pub max_sandboxes: usize,
    /// Most snapshots one tenant may keep.
    pub max_snapshots_per_tenant: u64,
    /// Bytes one tenant's snapshots may be charged.
    pub snapshot_quota_bytes: u64,
    /// Bytes one tenant's images may take: their blobs as stored plus what their layers add to the
    /// layers volume.
    pub image_quota_bytes: u64,
    /// Most images one tenant may keep.
    pub max_images_per_tenant: u64,
    /// What one tenant's persistent sandboxes may hold, running or stopped.
    pub persistent: crate::capacity::PersistentQuota,
    /// Audit rows older than this many days are pruned.
    pub audit_retention_days: u64,
    /// How far running sandboxes' memory and disk limits may exceed the host's capacity.
    pub overcommit: f64,
    /// The image a create that names none boots (`host`, or an image every tenant may use).
    pub default_image: String,
    /// Names of the host features the start-up checks (`sandlot doctor`) found degraded, for
    /// `/healthz`.
    pub degraded: Vec<String>,
    /// Lifecycle events and webhooks.
    pub events: crate::events::EventsConfig,
    /// The metrics sampler's interval and window, and the scrape token.
    pub metrics: crate::MetricsConfig,
}

/// A setting that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{option}: {problem}")]
pub struct ConfigError {
    /// The option, as the admin names it.
    pub option: &'static str,
    /// What is wrong and what would work.
    pub problem: String,
}

/// Smallest memory, disk and process limits a sandbox can start with.
pub(crate) const MIN_MEMORY_MB: u64 = 16;
pub(crate) const MIN_DISK_MB: u64 = 16;
pub(crate) const MIN_PIDS: u64 = 8;
/// Bounds of an exec's per-stream output cap: below 1 KiB nothing useful is kept; above 64 MiB one
/// exec would take a quarter of its sandbox's output budget per stream.
pub(crate) const OUTPUT_CAP_RANGE: std::ops::RangeInclusive<u64> = 1024..=64 << 20;

impl Config {
    /// Checks that every default is one a request could ask for itself, so a request that names
    /// nothing never fails on the server's own defaults. (The disk default is checked per request:
    /// it means nothing on a server without disk quotas.)
    pub fn validate(self) -> Result<Config, ConfigError> {
        let bad = |option, problem: String| Err(ConfigError { option, problem });
        let d = &self.defaults;
        if !(d.cpu.is_finite() && d.cpu >= 0.01) {
            return bad("--default-cpu", format!("{} is not a CPU share; give at least 0.01 cores", d.cpu));
        }
        if d.memory_mb < MIN_MEMORY_MB {
            return bad("--default-memory-mb", format!("{} is below the minimum of {MIN_MEMORY_MB}", d.memory_mb));
        }
        if d.pids < MIN_PIDS {
            return bad("--default-pids", format!("{} is below the minimum of {MIN_PIDS}", d.pids));
        }
        if self.max_timeout_s == 0 {
            return bad("--max-timeout-s", "must be at least 1".into());
        }
        if d.timeout_s == 0 || d.timeout_s > self.max_timeout_s {
            return bad(
                "--default-timeout-s",
                format!("{} must be between 1 and --max-timeout-s ({})", d.timeout_s, self.max_timeout_s),
            );
        }
        if !OUTPUT_CAP_RANGE.contains(&self.max_output_bytes) {
            return bad(
                "--max-output-bytes",
                format!(
                    "{} must be between {} and {}",
                    self.max_output_bytes,
                    OUTPUT_CAP_RANGE.start(),
                    OUTPUT_CAP_RANGE.end()
                ),
            );
        }
        if self.max_sandboxes == 0 {
            return bad("--max-sandboxes", "must be at least 1".into());
        }
        self.events.validate()?;
        self.metrics.validate()?;
        Ok(self)
    }
}

#[cfg(test)]
pub(crate) fn test_config() -> Config {
    Config {
        defaults: Defaults { memory_mb: 512, cpu: 1.0, pids: 256, disk_mb: 1024, timeout_s: 300 },
        max_timeout_s: 86_400,
        max_output_bytes: 1 << 20,
        max_upload_bytes: 1 << 30,
        max_sandboxes: 256,
        max_snapshots_per_tenant: 64,
        snapshot_quota_bytes: 8 << 30,
        image_quota_bytes: 20 << 30,
        max_images_per_tenant: 256,
        persistent: Default::default(),
        audit_retention_days: 30,
        overcommit: 1.5,
        default_image: "host".into(),
        degraded: Vec::new(),
        events: Default::default(),
        metrics: Default::default(),
    }
}
