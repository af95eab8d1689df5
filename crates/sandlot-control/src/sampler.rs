//! The metrics sampler: a service that reads every running sandbox's cgroup, layer and network
//! counters on a fixed interval and keeps a bounded window of samples per sandbox, for
//! `GET /v1/sandboxes/{id}/metrics` and the Prometheus endpoint.
//!
//! Bounds: one pass at a time (the next waits for the previous to end, never overlaps it), on one
//! blocking thread (the engine reads every sandbox one after the other, so a pass never takes the
//! runtime's workers or more than one blocking thread); at most [`MAX_SAMPLES`] samples per sandbox
//! (window ÷ interval, checked at start-up); a sandbox's samples are dropped at the first pass after it
//! is deleted or failed, and those of a stopped or paused one as they age out of the window.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sandlot_api::{MetricsLimits, MetricsSample, SandboxSamples, SandboxState};
use sandlot_engine::{NetCounters, Usage};
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use crate::{lock, Caller, Control, Error, Kind, Result};

/// Most samples kept per sandbox (window ÷ interval may not exceed it): 720 at the defaults. A sample
/// is 208 bytes, so 256 sandboxes at this cap hold about 183 MiB; at the defaults, 37 MiB.
pub const MAX_SAMPLES: u64 = 3600;

/// How often the writable layer's size is read: btrfs commits its accounting every 30 s, and reading
/// it spawns `btrfs qgroup show`, the one costly read of a pass.
const DISK_EVERY: Duration = Duration::from_secs(30);

/// Most sandboxes with series of their own on the Prometheus endpoint; the rest are counted in
/// `sandlot_metrics_sandboxes_left_out` (their tenants' totals still include them).
pub const MAX_SANDBOX_SERIES: usize = 256;

/// Most tenants with series of their own on the Prometheus endpoint (keys are made by the admin, so
/// this is a safety net, not a limit anyone should meet).
pub const MAX_TENANT_SERIES: usize = 1024;

/// The sampler's settings.
#[derive(Clone, PartialEq)]
pub struct MetricsConfig {
    /// Time between two passes.
    pub interval: Duration,
    /// How long samples are kept.
    pub window: Duration,
    /// A secret that authorises `GET /metrics` besides the admin key (`--metrics-token-file`).
    pub scrape_token: Option<String>,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig { interval: Duration::from_secs(5), window: Duration::from_secs(3600), scrape_token: None }
    }
}

impl std::fmt::Debug for MetricsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsConfig")
            .field("interval", &self.interval)
            .field("window", &self.window)
            .field("scrape_token", &self.scrape_token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl MetricsConfig {
    /// Samples kept per sandbox.
    pub fn capacity(&self) -> usize {
        (self.window.as_millis() / self.interval.as_millis().max(1)) as usize + 1
    }

    /// Checks the settings (the options' names are the server's).
    pub fn validate(&self) -> std::result::Result<(), crate::ConfigError> {
        let bad = |option, problem: String| Err(crate::ConfigError { option, problem });
        let (i, w) = (self.interval.as_secs(), self.window.as_secs());
        if !(1..=300).contains(&i) {
            return bad("--metrics-interval-s", format!("{i} must be between 1 and 300"));
        }
        if w < i || w / i > MAX_SAMPLES {
            return bad(
                "--metrics-window-s",
                format!(
                    "{w} must be at least --metrics-interval-s ({i}) and at most {MAX_SAMPLES} intervals ({} s): \
                     each sandbox keeps window / interval samples",
                    i * MAX_SAMPLES
                ),
            );
        }
        if self.scrape_token.as_ref().is_some_and(|t| t.len() < 16) {
            return bad("--metrics-token-file", "the token is shorter than 16 characters; use a random one".into());
        }
        Ok(())
    }
}

/// A fixed-capacity ring of samples, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Ring {
    cap: usize,
    buf: VecDeque<MetricsSample>,
}

impl Ring {
    pub(crate) fn new(cap: usize) -> Ring {
        Ring { cap: cap.max(1), buf: VecDeque::new() }
    }

    /// Adds `s`, dropping the oldest when full.
    pub(crate) fn push(&mut self, s: MetricsSample) {
        if self.buf.len() == self.cap {
            self.buf.pop_front();
        }
        self.buf.push_back(s);
    }

    /// Drops the samples taken before `oldest_ms`.
    pub(crate) fn prune(&mut self, oldest_ms: i64) {
        while self.buf.front().is_some_and(|s| s.at_ms < oldest_ms) {
            self.buf.pop_front();
        }
    }

    /// Copies of the samples taken after `since_ms`, oldest first.
    pub(crate) fn since(&self, since_ms: i64) -> Vec<MetricsSample> {
        let start = self.buf.partition_point(|s| s.at_ms <= since_ms);
        self.buf.range(start..).cloned().collect()
    }

    pub(crate) fn last(&self) -> Option<&MetricsSample> {
        self.buf.back()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

/// One sandbox's samples and what the next sample is computed from.
#[derive(Debug)]
pub(crate) struct Series {
    ring: Ring,
    /// The previous sample's CPU reading: (Unix ms, microseconds).
    prev_cpu: Option<(i64, u64)>,
    /// The layer size last read (read every [`DISK_EVERY`]).
    disk: Option<u64>,
}

/// What the last pass cost.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PassStats {
    /// When it ended, Unix ms (0: no pass yet).
    pub at_ms: i64,
    /// How long it took.
    pub duration: Duration,
    /// Running sandboxes it read.
    pub sandboxes: usize,
    /// Whether it read the layers' sizes.
    pub disk: bool,
}

/// Every sandbox's samples (owned by [`Control`]).
#[derive(Debug, Default)]
pub(crate) struct Samples {
    series: Mutex<HashMap<String, Series>>,
    last: Mutex<PassStats>,
}

/// What a tenant's running sandboxes use together, from their latest samples.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TenantTotals {
    /// Its sandboxes that are not deleted, by state.
    pub sandboxes: BTreeMap<&'static str, u64>,
    /// CPU time of its running sandboxes since they started, microseconds.
    pub cpu_usec: u64,
    /// Memory they hold now, bytes.
    pub memory_bytes: u64,
    /// Processes and threads now.
    pub pids: u64,
    /// Bytes their layers reference.
    pub disk_bytes: u64,
    /// Bytes they sent through the egress proxy since they started.
    pub net_bytes_out: u64,
    /// Bytes they received.
    pub net_bytes_in: u64,
}

/// One running sandbox's latest sample, for a per-sandbox series.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxGauges {
    /// Sandbox id.
    pub id: String,
    /// Its tenant.
    pub tenant: String,
    /// Its limits.
    pub limits: MetricsLimits,
    /// Its latest sample.
    pub last: MetricsSample,
}

/// What `GET /metrics` shows, gathered by the control layer (the surface only formats it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricsReport {
    /// Sandboxes that are not deleted, by state (every state named, zeros included).
    pub sandboxes_by_state: Vec<(&'static str, u64)>,
    /// Per tenant, in name order, at most [`MAX_TENANT_SERIES`].
    pub tenants: BTreeMap<String, TenantTotals>,
    /// Tenants left out over [`MAX_TENANT_SERIES`].
    pub tenants_left_out: usize,
    /// Running sandboxes with a sample, in id order, at most [`MAX_SANDBOX_SERIES`].
    pub sandboxes: Vec<SandboxGauges>,
    /// Running sandboxes left out over [`MAX_SANDBOX_SERIES`].
    pub sandboxes_left_out: usize,
    /// The last sampler pass.
    pub last_pass: PassStats,
    /// The sampler's interval.
    pub interval: Duration,
}

/// The limits of record `info`, as the host enforces them.
fn limits_of(l: &sandlot_api::Limits) -> MetricsLimits {
    MetricsLimits {
        cpu: l.cpu,
        memory_bytes: l.memory_mb << 20,
        pids: l.pids,
        disk_bytes: l.disk_mb.map(|mb| mb << 20),
    }
}

/// The sample for `usage` and `net` taken at `at_ms`, given the series' previous CPU reading.
fn sample(at_ms: i64, usage: &Usage, net: &NetCounters, prev_cpu: Option<(i64, u64)>, cpu_limit: f64) -> MetricsSample {
    let cpu_used_pct = match (prev_cpu, usage.cpu_usec) {
        // A counter that went down is a restarted sandbox: no rate across it.
        (Some((t0, u0)), Some(u1)) if u1 >= u0 && at_ms > t0 => {
            let pct = (u1 - u0) as f64 / ((at_ms - t0) as f64 * 1000.0) / cpu_limit.max(0.01) * 100.0;
            Some((pct * 100.0).round() / 100.0)
        }
        _ => None,
    };
    MetricsSample {
        at_ms,
        cpu_usage_usec: usage.cpu_usec,
        cpu_used_pct,
        cpu_periods_total: usage.cpu_periods,
        cpu_throttled_periods_total: usage.cpu_throttled_periods,
        cpu_throttled_usec: usage.cpu_throttled_usec,
        memory_bytes: usage.memory_bytes,
        memory_cache_bytes: usage.cache_bytes,
        memory_peak_bytes: usage.memory_peak_bytes,
        oom_kills_total: usage.oom_kills,
        pids: usage.pids,
        disk_used_bytes: usage.disk_bytes,
        net_bytes_out_total: net.bytes_out,
        net_bytes_in_total: net.bytes_in,
        net_connections: net.connections_open,
        net_connections_total: net.connections,
    }
}

/// Whether `given` is the scrape token, compared in constant time (both are hashed first, so neither
/// their contents nor their lengths show in the time taken).
fn token_matches(given: &str, token: &str) -> bool {
    crate::access::same_bytes(&Sha256::digest(given.as_bytes()), &Sha256::digest(token.as_bytes()))
}

impl Control {
    /// One sampler pass: reads every running sandbox, adds a sample to each one's ring, drops the
    /// samples of sandboxes that are gone and those older than the window. `disk`: read the layers'
    /// sizes too (otherwise a sandbox's last size read is carried; one without any, or 0, is read now).
    pub async fn sample_pass(&self, disk: bool) -> PassStats {
        let t0 = Instant::now();
        // A layer btrfs has not committed yet reads 0: read again until it shows bytes (at most one
        // commit interval, 30 s, after a start).
        let sized: std::collections::HashSet<String> = lock(&self.samples.series)
            .iter()
            .filter(|(_, s)| s.disk.is_some_and(|b| b > 0))
            .map(|(id, _)| id.clone())
            .collect();
        let readings = self.engine.usage_all(|id| disk || !sized.contains(id)).await;
        let Ok(live) = self.store.live_sandboxes() else { return PassStats::default() };
        let live: HashMap<&str, &sandlot_store::SandboxRecord> = live.iter().map(|r| (r.info.id.as_str(), r)).collect();
        let now = sandlot_store::now_ms();
        let cfg = &self.cfg.metrics;
        let oldest = now - cfg.window.as_millis() as i64;
        let mut series = lock(&self.samples.series);
        let mut read = 0;
        for (id, usage, net) in &readings {
            let Some(rec) = live.get(id.as_str()) else { continue };
            read += 1;
            let s = series.entry(id.clone()).or_insert_with(|| Series {
                ring: Ring::new(cfg.capacity()),
                prev_cpu: None,
                disk: None,
            });
            if disk || s.disk.unwrap_or(0) == 0 {
                s.disk = usage.disk_bytes;
            }
            let usage = Usage { disk_bytes: s.disk, ..*usage };
            let taken = sample(now, &usage, net, s.prev_cpu, rec.info.limits.cpu);
            s.prev_cpu = usage.cpu_usec.map(|u| (now, u));
            s.ring.push(taken);
        }
        let running: std::collections::HashSet<&str> = readings.iter().map(|(id, ..)| id.as_str()).collect();
        series.retain(|id, s| {
            if !running.contains(id.as_str()) {
                // Not running now: the next start's first sample has no rate.
                s.prev_cpu = None;
            }
            s.ring.prune(oldest);
            live.contains_key(id.as_str()) && !s.ring.is_empty()
        });
        drop(series);
        let stats = PassStats { at_ms: now, duration: t0.elapsed(), sandboxes: read, disk };
        *lock(&self.samples.last) = stats;
        stats
    }

    /// `GET /v1/sandboxes/{id}/metrics`: the caller's sandbox's samples taken after `since_ms` (Unix
    /// ms; all that are kept without it).
    pub fn sandbox_samples(&self, caller: &Caller, id: &str, since_ms: Option<i64>) -> Result<SandboxSamples> {
        let rec = self.record(caller, id)?;
        let cfg = &self.cfg.metrics;
        let samples =
            lock(&self.samples.series).get(id).map(|s| s.ring.since(since_ms.unwrap_or(i64::MIN))).unwrap_or_default();
        Ok(SandboxSamples {
            id: rec.info.id.clone(),
            state: rec.info.state,
            interval_ms: cfg.interval.as_millis() as u64,
            window_s: cfg.window.as_secs(),
            limits: limits_of(&rec.info.limits),
            samples,
        })
    }

    /// Authorises a scrape of `GET /metrics` with `key`: the admin key, or the scrape token. A tenant's
    /// key is refused (`forbidden`), anything else is `unauthenticated`.
    pub fn authorize_scrape(&self, key: &str) -> Result<()> {
        if let Some(token) = &self.cfg.metrics.scrape_token {
            if token_matches(key, token) {
                return Ok(());
            }
        }
        match self.authenticate(key) {
            Ok(c) if c.admin => Ok(()),
            Ok(c) => Err(Error::new(
                Kind::Forbidden,
                format!(
                    "the key of tenant {:?} may not read /metrics: send the admin key or the scrape token \
                     (--metrics-token-file)",
                    c.tenant
                ),
            )),
            Err(_) => Err(Error::new(
                Kind::Unauthenticated,
                "neither the admin key nor the scrape token: send `Authorization: Bearer <admin key or the \
                 contents of --metrics-token-file>`",
            )),
        }
    }

    /// What `GET /metrics` shows (call [`Control::authorize_scrape`] first).
    pub fn metrics_report(&self) -> Result<MetricsReport> {
        let live = self.store.live_sandboxes()?;
        const STATES: [SandboxState; 5] = [
            SandboxState::Creating,
            SandboxState::Running,
            SandboxState::Paused,
            SandboxState::Stopped,
            SandboxState::Failed,
        ];
        let mut by_state: Vec<(&'static str, u64)> = STATES.iter().map(|s| (s.as_str(), 0)).collect();
        let mut tenants: BTreeMap<String, TenantTotals> = BTreeMap::new();
        let mut sandboxes = Vec::new();
        let series = lock(&self.samples.series);
        for rec in &live {
            let state = rec.info.state.as_str();
            if let Some(n) = by_state.iter_mut().find(|(s, _)| *s == state) {
                n.1 += 1;
            }
            let t = tenants.entry(rec.tenant.clone()).or_default();
            *t.sandboxes.entry(state).or_default() += 1;
            if rec.info.state != SandboxState::Running {
                continue;
            }
            let Some(last) = series.get(&rec.info.id).and_then(|s| s.ring.last()) else { continue };
            t.cpu_usec += last.cpu_usage_usec.unwrap_or(0);
            t.memory_bytes += last.memory_bytes.unwrap_or(0);
            t.pids += last.pids.unwrap_or(0);
            t.disk_bytes += last.disk_used_bytes.unwrap_or(0);
            t.net_bytes_out += last.net_bytes_out_total;
            t.net_bytes_in += last.net_bytes_in_total;
            sandboxes.push(SandboxGauges {
                id: rec.info.id.clone(),
                tenant: rec.tenant.clone(),
                limits: limits_of(&rec.info.limits),
                last: last.clone(),
            });
        }
        drop(series);
        for t in tenants.values_mut() {
            for s in STATES {
                t.sandboxes.entry(s.as_str()).or_default();
            }
        }
        sandboxes.sort_by(|a, b| a.id.cmp(&b.id));
        let sandboxes_left_out = sandboxes.len().saturating_sub(MAX_SANDBOX_SERIES);
        sandboxes.truncate(MAX_SANDBOX_SERIES);
        let tenants_left_out = tenants.len().saturating_sub(MAX_TENANT_SERIES);
        let tenants = tenants.into_iter().take(MAX_TENANT_SERIES).collect();
        Ok(MetricsReport {
            sandboxes_by_state: by_state,
            tenants,
            tenants_left_out,
            sandboxes,
            sandboxes_left_out,
            last_pass: *lock(&self.samples.last),
            interval: self.cfg.metrics.interval,
        })
    }
}

#[cfg(test)]
impl Control {
    pub(crate) fn samples_for_tests(&self) -> &Mutex<HashMap<String, Series>> {
        &self.samples.series
    }
}

/// Samples every running sandbox every interval until `shutdown` changes. A pass that overruns the
/// interval delays the next one instead of queueing passes.
pub(crate) async fn sampler_service(control: std::sync::Arc<Control>, mut shutdown: watch::Receiver<bool>) {
    let interval = control.cfg.metrics.interval;
    let disk_every = (DISK_EVERY.as_millis() / interval.as_millis().max(1)).max(1) as u64;
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut n: u64 = 0;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        let stats = control.sample_pass(n % disk_every == 0).await;
        n += 1;
        if stats.duration > interval / 2 {
            tracing::warn!(
                "metrics: a pass over {} sandboxes took {:?}, over half the {:?} interval (--metrics-interval-s)",
                stats.sandboxes,
                stats.duration,
                interval
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> MetricsSample {
        MetricsSample { at_ms: ms, ..Default::default() }
    }

    #[test]
    fn the_ring_keeps_the_newest_and_answers_since() {
        let mut r = Ring::new(3);
        for t in [10, 20, 30, 40] {
            r.push(at(t));
        }
        let times = |v: Vec<MetricsSample>| v.iter().map(|s| s.at_ms).collect::<Vec<_>>();
        assert_eq!(times(r.since(i64::MIN)), [20, 30, 40], "the oldest went when full");
        assert_eq!(times(r.since(20)), [30, 40], "since is exclusive");
        assert_eq!(times(r.since(25)), [30, 40]);
        assert_eq!(times(r.since(40)), Vec::<i64>::new());
        r.prune(35);
        assert_eq!(times(r.since(i64::MIN)), [40]);
        assert_eq!(r.last().map(|s| s.at_ms), Some(40));
        r.prune(100);
        assert!(r.is_empty());
    }

    #[test]
    fn cpu_percent_is_of_the_limit_between_two_samples_and_none_across_a_restart() {
        let u = |usec| Usage { cpu_usec: Some(usec), ..Default::default() };
        let net = NetCounters::default();
        // 0.5 s of CPU in 1 s on a 0.5-core limit: 100 %.
        assert_eq!(sample(2000, &u(1_500_000), &net, Some((1000, 1_000_000)), 0.5).cpu_used_pct, Some(100.0));
        assert_eq!(sample(2000, &u(1_250_000), &net, Some((1000, 1_000_000)), 1.0).cpu_used_pct, Some(25.0));
        assert_eq!(sample(2000, &u(5), &net, Some((1000, 1_000_000)), 1.0).cpu_used_pct, None, "restarted");
        assert_eq!(sample(2000, &u(5), &net, None, 1.0).cpu_used_pct, None, "first sample");
    }

    #[test]
    fn the_window_bounds_the_samples_kept() {
        let cfg = MetricsConfig::default();
        assert_eq!(cfg.capacity(), 721);
        assert!(cfg.validate().is_ok());
        let too_long =
            MetricsConfig { interval: Duration::from_secs(1), window: Duration::from_secs(7200), ..cfg.clone() };
        let e = too_long.validate().unwrap_err();
        assert_eq!(e.option, "--metrics-window-s");
        assert!(e.problem.contains("at most 3600 intervals"), "{}", e.problem);
        let zero = MetricsConfig { interval: Duration::ZERO, ..cfg.clone() };
        assert_eq!(zero.validate().unwrap_err().option, "--metrics-interval-s");
        let weak = MetricsConfig { scrape_token: Some("short".into()), ..cfg.clone() };
        assert_eq!(weak.validate().unwrap_err().option, "--metrics-token-file");
        assert!(!format!("{weak:?}").contains("short"), "the token shows in Debug");
    }

    #[test]
    fn a_sample_is_as_small_as_the_documented_bound_says() {
        assert_eq!(std::mem::size_of::<MetricsSample>(), 208, "update MAX_SAMPLES' and ARCHITECTURE.md's figures");
    }

    #[test]
    fn tokens_compare_whole() {
        let token = "0123456789abcdef0123";
        assert!(token_matches(token, token));
        assert!(!token_matches("0123456789abcdef012", token), "a prefix");
        assert!(!token_matches("0123456789abcdef01234", token), "longer");
        assert!(!token_matches("", token));
    }
}
