//! `GET /v1/sandboxes/{id}/metrics`: a sandbox's recent samples (the server samples every running
//! sandbox on a fixed interval and keeps a bounded window of them).

use serde::{Deserialize, Serialize};

/// One sample of a running sandbox. Counters (`*_total`, `cpu_usage_usec`) count from the sandbox's
/// (re)start; a figure the host does not offer is absent (`null`), never a made-up zero.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct MetricsSample {
    /// When it was taken, Unix milliseconds.
    pub at_ms: i64,
    /// CPU time used, microseconds.
    pub cpu_usage_usec: Option<u64>,
    /// CPU used since the previous sample, percent of the sandbox's CPU limit (absent on the first
    /// sample after a (re)start).
    pub cpu_used_pct: Option<f64>,
    /// CPU quota periods (100 ms each) in which the sandbox ran.
    pub cpu_periods_total: Option<u64>,
    /// Of those, periods in which it used up its quota and was throttled.
    pub cpu_throttled_periods_total: Option<u64>,
    /// Time its processes spent throttled, microseconds.
    pub cpu_throttled_usec: Option<u64>,
    /// Memory charged now (page cache included, the supervisor's share included), bytes.
    pub memory_bytes: Option<u64>,
    /// Of that, page cache, bytes.
    pub memory_cache_bytes: u64,
    /// Most memory charged at once since the sandbox (re)started, bytes (absent on kernels before 5.19
    /// with cgroup v2).
    pub memory_peak_bytes: Option<u64>,
    /// Processes the kernel's OOM killer has killed in it.
    pub oom_kills_total: Option<u64>,
    /// Processes and threads now (the supervisor's included).
    pub pids: Option<u64>,
    /// Bytes its writable layer references, as btrfs last committed it (absent without the layers
    /// volume; 0 until btrfs first commits the layer; then read every 30 s).
    pub disk_used_bytes: Option<u64>,
    /// Bytes it sent out through the egress proxy.
    pub net_bytes_out_total: u64,
    /// Bytes it received through the egress proxy.
    pub net_bytes_in_total: u64,
    /// TCP connections open through the proxy now.
    pub net_connections: u64,
    /// TCP connections it has opened (allowed or refused).
    pub net_connections_total: u64,
}

/// A sandbox's limits, as the host enforces them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct MetricsLimits {
    /// CPU, cores.
    pub cpu: f64,
    /// Memory of its commands, bytes.
    pub memory_bytes: u64,
    /// Processes and threads of its commands.
    pub pids: u64,
    /// Writable layer, bytes (absent without disk limits).
    pub disk_bytes: Option<u64>,
}

/// Body of `GET /v1/sandboxes/{id}/metrics`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct SandboxSamples {
    /// The sandbox.
    pub id: String,
    /// Its state now.
    pub state: crate::SandboxState,
    /// How often the server samples, milliseconds.
    pub interval_ms: u64,
    /// How far back samples are kept, seconds.
    pub window_s: u64,
    /// Its limits.
    pub limits: MetricsLimits,
    /// Samples taken after `since`, oldest first (none while it is not running).
    pub samples: Vec<MetricsSample>,
}
