//! `sandlot serve`: configuration, start-up recovery, the HTTP router and graceful shutdown.

mod app;
mod build;
pub mod config;
mod e2b;
mod error;
mod events;
mod exec;
mod extract;
mod files;
mod images;
mod keys;
mod listener;
mod mcp;
mod metrics;
pub mod openapi;
mod ports;
mod prometheus;
mod pty;
mod sandboxes;
mod snapshots;
mod stream;
mod tenants;
mod tls;
mod ui;

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use axum::extract::{DefaultBodyLimit, State};
use axum::routing::{get, post};
use axum::Router;
use sandlot_control::Control;
use sandlot_driver_linux::{doctor, host, LinuxConfig, LinuxDriver};
use sandlot_engine::{Engine, EngineConfig, NetworkSettings};
use sandlot_store::{SqliteStore, Store};

pub use app::{App, AppState};
pub use error::ApiError;

/// The long help of `sandlot serve` (on the subcommand: its one-line doc comment would replace it).
pub const LONG_ABOUT: &str = "Run the sandlot server: the HTTP API, the sandbox engine and the SQLite state store, in one \
process. It must run as root: it creates namespaces, cgroups and a host uid range per sandbox.\n\n\
On first start it creates an admin API key and writes it to <state-dir>/admin.key (mode 0600).\n\n\
The web dashboard is served at /ui/ on the same listener (http://127.0.0.1:7423/ui/ by default): \
sign in there with an API key.\n\n\
Example:\n  sudo sandlot serve --listen 127.0.0.1:7423\n  export SANDLOT_API_KEY=$(sudo cat /var/lib/sandlot/admin.key)\n  sandlot run -- echo hello";

/// Options of `sandlot serve`.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Read options from this TOML file first: keys are the long option names (`listen = "…"`,
    /// `resolve = ["db.internal=10.20.0.5"]`, `no-disk-quota = true`); the command line wins.
    #[arg(long, env = "SANDLOT_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to listen on. Keep it on loopback unless a TLS-terminating proxy is in front.
    #[arg(long, default_value = sandlot_api::DEFAULT_LISTEN, env = "SANDLOT_LISTEN")]
    pub listen: SocketAddr,
    /// Directory for the database, images and sandbox layers [default: /var/lib/sandlot as root,
    /// else $XDG_DATA_HOME/sandlot].
    #[arg(long, env = "SANDLOT_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Default per-stream output cap of an exec, in bytes (head and tail are kept).
    #[arg(long, default_value_t = 1 << 20)]
    pub max_output_bytes: u64,
    /// Largest file or tar upload accepted, in MiB.
    #[arg(long, default_value_t = 1024)]
    pub max_upload_mb: u64,
    /// Most sandboxes alive at once on this server.
    #[arg(long, default_value_t = 256)]
    pub max_sandboxes: usize,
    /// Domain under which each exposed sandbox port gets an origin of its own:
    /// `http://{port}-{id}.{DOMAIN}:{api port}/` (point `*.DOMAIN` at this server). Browsers then keep
    /// one preview's pages, cookies and storage away from every other preview and from the API.
    /// Default: `localhost` when listening on loopback (browsers and curl resolve `*.localhost` there);
    /// otherwise none, and previews are served under `/v1/sandboxes/{id}/ports/{port}/` with every
    /// response sandboxed by CSP and its cookies dropped. `--preview-domain=` (empty) turns host
    /// routing off.
    #[arg(long)]
    pub preview_domain: Option<String>,
    /// Most snapshots one tenant may keep.
    #[arg(long, default_value_t = 64)]
    pub max_snapshots_per_tenant: u64,
    /// Disk one tenant's snapshots may be charged, in MiB: each is charged what its sandbox's layer
    /// referenced when it was taken (the most it can hold once the sandbox has changed every file).
    #[arg(long, default_value_t = 8192)]
    pub snapshot_quota_mb: u64,
    /// Disk one tenant's images may take, in MiB: their blobs as stored plus what their layers add to
    /// the layers volume (file bytes, 2 KiB of metadata per entry, 1 MiB per layer tree and per image
    /// root). A pull whose layers declare more is refused before anything is fetched; an import or
    /// an unpacking that would pass it is refused and what it stored is collected.
    #[arg(long, default_value_t = 20_480)]
    pub image_quota_mb: u64,
    /// Most images one tenant may keep (public images, the admin's, are not counted).
    #[arg(long, default_value_t = 256)]
    pub max_images_per_tenant: u64,
    /// Most persistent sandboxes one tenant keeps, running or stopped (a stopped one keeps its files,
    /// and so its writable layer on the layers volume, until it is deleted).
    #[arg(long, default_value_t = 64)]
    pub max_persistent_per_tenant: u64,
    /// Disk one tenant's persistent sandboxes may be promised together, running or stopped, in MiB:
    /// each counts its `disk_mb`. Creating or resuming one past it is refused until stopped ones are
    /// deleted.
    #[arg(long, default_value_t = 32_768)]
    pub persistent_disk_quota_mb: u64,
    /// Memory limit of a sandbox when the request names none, in MiB.
    #[arg(long, default_value_t = 512)]
    pub default_memory_mb: u64,
    /// CPU limit of a sandbox when the request names none, in cores.
    #[arg(long, default_value_t = 1.0)]
    pub default_cpu: f64,
    /// Process limit of a sandbox when the request names none.
    #[arg(long, default_value_t = 256)]
    pub default_pids: u64,
    /// Writable-layer size cap of a sandbox when the request names none, in MiB.
    #[arg(long, default_value_t = 1024)]
    pub default_disk_mb: u64,
    /// Size of the btrfs volume (a sparse file in the state directory) that holds every sandbox's
    /// writable layer, in GiB. It takes host disk space only as sandboxes write.
    #[arg(long, default_value_t = 64)]
    pub layers_volume_gb: u64,
    /// Keep writable layers on the state filesystem without any size limit (for hosts without btrfs).
    /// Sandboxes can then fill the host's disk.
    #[arg(long)]
    pub no_disk_quota: bool,
    /// Lifetime of a sandbox when the request names none, in seconds.
    #[arg(long, default_value_t = 300)]
    pub default_timeout_s: u64,
    /// Longest lifetime a request may ask for, in seconds.
    #[arg(long, default_value_t = 86_400)]
    pub max_timeout_s: u64,
    /// Resolve NAME to IP for every sandbox whose policy allows NAME (repeatable). The admin's explicit
    /// mapping: for that name only, the address may be private or loopback (internal services, tests).
    #[arg(long = "resolve", value_name = "NAME=IP")]
    pub resolve: Vec<String>,
    /// Extra CA certificate (PEM) trusted for upstream TLS of brokered hosts, besides the system roots
    /// (repeatable): private PKIs, and test servers.
    #[arg(long = "extra-ca", value_name = "FILE")]
    pub extra_ca: Vec<PathBuf>,
    /// CA certificate (PEM) every sandbox trusts besides the system roots and sandlot's egress CA
    /// (repeatable): a private PKI's root, so code inside reaches internal HTTPS services. Added to
    /// the trust bundles of each image root as it is made (roots made before keep what they had) and
    /// of the `host` image at every start; only the certificates of FILE are copied, never anything
    /// else in it.
    #[arg(long = "sandbox-ca", value_name = "FILE")]
    pub sandbox_ca: Vec<PathBuf>,
    /// Allow plain HTTP to this image registry, `HOST:PORT` (repeatable). Every other registry is
    /// HTTPS only; `--extra-ca` certificates are trusted for registries too.
    #[arg(long = "insecure-registry", value_name = "HOST:PORT")]
    pub insecure_registry: Vec<String>,
    /// Allow pulls from this registry although it resolves to a loopback, private or link-local address,
    /// `HOST:PORT` (repeatable; `--insecure-registry` hosts are allowed too). Others on such addresses
    /// are refused, so a tenant's image reference cannot make the server reach internal services or a
    /// cloud metadata endpoint.
    #[arg(long = "allow-private-registry", value_name = "HOST:PORT")]
    pub allow_private_registry: Vec<String>,
    /// JSON file of credentials the server uses for registries, `{"HOST": {"username": "..",
    /// "password": "..", "tenants": ["alice"]}}`: used by pulls of admin keys and of the tenants listed
    /// (none: admin keys only, so no tenant pulls a private repository by naming the registry); a pull's
    /// own `auth` wins. Keep it readable by root only: it is never logged or returned.
    #[arg(long, value_name = "FILE")]
    pub registry_auth_file: Option<PathBuf>,
    /// The image a create that names none boots: `host` (the host's /usr, no download) or an image
    /// every tenant may use (pulled or imported with `public`).
    #[arg(long, default_value = "host")]
    pub default_image: String,
    /// E2B compatibility: boot IMAGE for E2B template NAME (repeatable). `base` is always the default
    /// image; `code-interpreter-v1` (the code-interpreter SDKs' default) maps to `code-interpreter`
    /// unless this names it; any other template is the tenant's image of that name.
    #[arg(long = "e2b-template", value_name = "NAME=IMAGE")]
    pub e2b_template: Vec<String>,
    /// E2B compatibility: requests to host `{port}-{id}.DOMAIN` go to that sandbox's port (49983:
    /// envd), as the SDKs send them when E2B_SANDBOX_URL is unset; the SDKs learn DOMAIN from create
    /// and connect answers. Point `*.DOMAIN` at this server; serve it over TLS (`--e2b-tls-listen`),
    /// which the SDKs require.
    #[arg(long = "e2b-domain", value_name = "DOMAIN")]
    pub e2b_domain: Option<String>,
    /// E2B compatibility: also serve the API, TLS, on this address (e.g. `0.0.0.0:443`), with the
    /// certificate of `--e2b-tls-cert`/`--e2b-tls-key`, or else one for `*.DOMAIN` and DOMAIN issued at
    /// every start by the server's own CA (`<state>/ca/ca.pem`; `sandlot e2b env` hands it to clients).
    /// Needs `--e2b-domain`; the connection caps are shared with `--listen`.
    #[arg(long = "e2b-tls-listen", value_name = "ADDR")]
    pub e2b_tls_listen: Option<SocketAddr>,
    /// The TLS listener's certificate chain (PEM), for `*.DOMAIN`.
    #[arg(long = "e2b-tls-cert", value_name = "FILE")]
    pub e2b_tls_cert: Option<PathBuf>,
    /// The key (PEM) of `--e2b-tls-cert`.
    #[arg(long = "e2b-tls-key", value_name = "FILE")]
    pub e2b_tls_key: Option<PathBuf>,
    /// Longest one image pull may take, in seconds; a registry that trickles its bytes is cut off.
    #[arg(long, default_value_t = 1800, value_parser = clap::value_parser!(u64).range(1..))]
    pub pull_timeout_s: u64,
    /// Longest one image's layers may take to unpack once one of the server's two unpack places is
    /// theirs, in seconds (pulls, imports, builds); past it the image is refused and what it unpacked
    /// is collected. A small compressed layer can take minutes of CPU to expand.
    #[arg(long, default_value_t = 900, value_parser = clap::value_parser!(u64).range(1..))]
    pub unpack_timeout_s: u64,
    /// Largest image archive `sandlot image import` takes, in MiB.
    #[arg(long, default_value_t = 16_384)]
    pub max_import_mb: u64,
    /// Bytes all uploads being received (import archives, build contexts) may hold on disk together,
    /// in MiB; an upload that would pass it is refused as `server_full` (retryable). Each upload is also
    /// charged to its tenant's image quota as it arrives.
    #[arg(long, default_value_t = 32_768, value_parser = clap::value_parser!(u64).range(1..))]
    pub spool_budget_mb: u64,
    /// Audit rows older than this many days are deleted (hourly, and at start-up).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=36_500))]
    pub audit_retention_days: u64,
    /// How far the memory and disk limits of running sandboxes together may exceed the host's memory
    /// and layers volume: limits are ceilings that most sandboxes never reach, and an overrun costs the
    /// sandboxes (an OOM kill in one, ENOSPC on the volume), not the host. pids are never overcommitted
    /// (sandboxes together get three quarters of pid_max).
    #[arg(long, default_value_t = 1.5, value_parser = parse_overcommit)]
    pub overcommit: f64,
    /// Most API connections open at once, all clients together; more are answered 503 and closed
    /// [default: an eighth of the daemon's descriptor limit].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_api_connections: Option<u64>,
    /// Most API connections open at once from one client address [default: a quarter of
    /// --max-api-connections, at most 256]. Behind a reverse proxy every client shares its address:
    /// raise this to --max-api-connections there.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_api_connections_per_ip: Option<u64>,
    /// Lifecycle events (`GET /v1/events`) older than this are deleted, in seconds [default: 7 days].
    #[arg(long, default_value_t = 7 * 86_400, value_parser = clap::value_parser!(u64).range(1..))]
    pub events_retention_s: u64,
    /// Most events kept per tenant: past it, the oldest go first.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_events_per_tenant: u64,
    /// Most webhooks one tenant may register.
    #[arg(long, default_value_t = 10)]
    pub max_webhooks_per_tenant: u64,
    /// Let webhooks target loopback, private (RFC 1918, ULA), link-local (cloud metadata), CGNAT and
    /// other non-public addresses. Off, such URLs are refused at registration, and a name that
    /// resolves only to such addresses fails its deliveries: a tenant cannot make the server call
    /// internal services.
    #[arg(long)]
    pub webhook_allow_private: bool,
    /// Extra CA certificate (PEM) trusted for `https://` webhooks, besides the system roots (repeatable).
    #[arg(long = "webhook-extra-ca", value_name = "FILE")]
    pub webhook_extra_ca: Vec<PathBuf>,
    /// Attempts to deliver one event to a webhook; between them the wait doubles, with jitter, from
    /// --webhook-retry-base-ms (the default: 6 attempts, the last ~10 minutes after the first).
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub webhook_attempts: u32,
    /// The wait before a webhook's second attempt, in ms (tests shorten it).
    #[arg(long, default_value_t = 20_000, hide = true)]
    pub webhook_retry_base_ms: u64,
    /// Longest one webhook attempt may take (connect, TLS, request, answer), in seconds.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=300))]
    pub webhook_timeout_s: u64,
    /// Seconds between two samples of every running sandbox's CPU, memory, processes, disk and
    /// network (`GET /v1/sandboxes/{id}/metrics`, `GET /metrics`). One pass reads them all, one after
    /// the other, on one thread.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=300))]
    pub metrics_interval_s: u64,
    /// Seconds of samples kept per sandbox (at most 3600 intervals); a deleted sandbox's go at the
    /// next pass.
    #[arg(long, default_value_t = 3600)]
    pub metrics_window_s: u64,
    /// File holding a token (16 characters or more) that authorises `GET /metrics` besides the admin
    /// key, for a Prometheus scraper: `Authorization: Bearer <token>`. Keep it readable by root only.
    #[arg(long, value_name = "PATH")]
    pub metrics_token_file: Option<PathBuf>,
    /// The network proxy refuses to dial anything outside loopback (and logs it as a bug), for test
    /// suites on machines that must send nothing to other hosts. Never in production.
    #[arg(long, help_heading = "Testing only")]
    pub test_loopback_only: bool,
    /// TESTING ONLY (with --test-loopback-only): a connection the policy allowed to FROM is dialled to
    /// TO (a loopback address; same port), so a suite can stand local servers in for internet
    /// addresses such as 1.1.1.1 (repeatable).
    #[arg(long = "test-dial-redirect", value_name = "FROM=TO", hide = true)]
    pub test_dial_redirect: Vec<String>,
    /// TESTING ONLY: switch off a defence layer (seccomp, landlock) for every sandbox, so the escape
    /// suite can show what each remaining layer stops on its own. Never use in production.
    #[arg(long = "insecure-disable-layer", value_name = "LAYER", hide = true)]
    pub disable_layers: Vec<String>,
    /// TESTING ONLY: the start-up host checks read the daemon's cgroup membership from FILE instead of
    /// /proc/self/cgroup, so a test can show the refusal a shared cgroup gets.
    #[arg(long, value_name = "FILE", hide = true)]
    pub test_proc_self_cgroup: Option<PathBuf>,
}

impl ServeArgs {
    /// The state directory: `--state-dir`, else the default for this user.
    pub fn state_dir(&self) -> PathBuf {
        self.state_dir.clone().unwrap_or_else(default_state_dir)
    }

    /// The defence layers in force, after `--insecure-disable-layer`.
    fn defence_layers(&self) -> anyhow::Result<sandlot_driver_linux::DefenceLayers> {
        let mut layers = sandlot_driver_linux::DefenceLayers::default();
        for l in &self.disable_layers {
            match l.as_str() {
                "seccomp" => layers.seccomp = false,
                "landlock" => layers.landlock = false,
                other => bail!("--insecure-disable-layer: unknown layer {other:?} (seccomp, landlock)"),
            }
        }
        Ok(layers)
    }

    /// What the host checks need to know of these options: which features they make required.
    pub fn doctor_options(&self) -> anyhow::Result<doctor::Options> {
        Ok(doctor::Options {
            state_dir: self.state_dir(),
            disk_quota: !self.no_disk_quota,
            layers: self.defence_layers()?,
            max_sandboxes: self.max_sandboxes as u64,
            default_memory_mb: self.default_memory_mb,
            default_pids: self.default_pids,
            overcommit: self.overcommit,
            proc_self_cgroup: self.test_proc_self_cgroup.clone(),
        })
    }

    /// The control layer's settings, validated.
    fn control_config(&self) -> anyhow::Result<sandlot_control::Config> {
        let cfg = sandlot_control::Config {
            defaults: sandlot_control::Defaults {
                memory_mb: self.default_memory_mb,
                cpu: self.default_cpu,
                pids: self.default_pids,
                disk_mb: self.default_disk_mb,
                timeout_s: self.default_timeout_s,
            },
            max_timeout_s: self.max_timeout_s,
            max_output_bytes: self.max_output_bytes,
            max_upload_bytes: self.max_upload_mb << 20,
            max_sandboxes: self.max_sandboxes,
            max_snapshots_per_tenant: self.max_snapshots_per_tenant,
            snapshot_quota_bytes: self.snapshot_quota_mb << 20,
            image_quota_bytes: self.image_quota_mb << 20,
            max_images_per_tenant: self.max_images_per_tenant,
            persistent: sandlot_control::capacity::PersistentQuota {
                count: self.max_persistent_per_tenant,
                disk_mb: self.persistent_disk_quota_mb,
            },
            audit_retention_days: self.audit_retention_days,
            overcommit: self.overcommit,
            default_image: self.default_image.clone(),
            degraded: Vec::new(),
            events: self.events_config()?,
            metrics: self.metrics_config()?,
        };
        Ok(cfg.validate()?)
    }

    /// The sampler's settings, with the scrape token read from `--metrics-token-file`.
    fn metrics_config(&self) -> anyhow::Result<sandlot_control::MetricsConfig> {
        let scrape_token = match &self.metrics_token_file {
            None => None,
            Some(f) => {
                let text =
                    std::fs::read_to_string(f).with_context(|| format!("--metrics-token-file {}", f.display()))?;
                Some(text.trim().to_string())
            }
        };
        Ok(sandlot_control::MetricsConfig {
            interval: Duration::from_secs(self.metrics_interval_s),
            window: Duration::from_secs(self.metrics_window_s),
            scrape_token,
        })
    }
}

impl ServeArgs {
    /// The settings of events and webhooks.
    fn events_config(&self) -> anyhow::Result<sandlot_control::events::EventsConfig> {
        let mut pem = Vec::new();
        for f in &self.webhook_extra_ca {
            pem.extend(std::fs::read(f).with_context(|| format!("--webhook-extra-ca {}", f.display()))?);
            pem.push(b'\n');
        }
        Ok(sandlot_control::events::EventsConfig {
            retention_s: self.events_retention_s,
            max_per_tenant: self.max_events_per_tenant,
            max_webhooks_per_tenant: self.max_webhooks_per_tenant,
            webhook_allow_private: self.webhook_allow_private,
            webhook_attempts: self.webhook_attempts,
            webhook_base_delay_ms: self.webhook_retry_base_ms,
            webhook_timeout_ms: self.webhook_timeout_s * 1000,
            webhook_extra_roots_pem: pem,
            ..Default::default()
        })
    }
}

fn default_state_dir() -> PathBuf {
    if host::running_as_root() {
        return PathBuf::from("/var/lib/sandlot");
    }
    std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."))
        .join("sandlot")
}

/// Runs the server until SIGINT or SIGTERM.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("SANDLOT_LOG").unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        // Colour only for a terminal: a log file or journal gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    if !host::running_as_root() {
        bail!(
            "must run as root: each sandbox gets its own namespaces, cgroup and host uid range. \
             Start it with `sudo sandlot serve`"
        );
    }
    let fd_limit = match host::raise_fd_limit() {
        Ok(n) => {
            tracing::debug!("descriptor limit {n}");
            n
        }
        Err(e) => {
            tracing::warn!("could not raise the descriptor limit: {e}; assuming {FALLBACK_FD_LIMIT}");
            FALLBACK_FD_LIMIT
        }
    };
    // Before anything touches the host (the state directory, cgroups, the layers volume, a namespace):
    // what `sandlot doctor` checks.
    let degraded = check_host(&args)?;
    let state_dir = args.state_dir();
    std::fs::create_dir_all(&state_dir).with_context(|| format!("creating {}", state_dir.display()))?;
    // Sandbox uids must traverse it to reach their layers; nobody may list or read it.
    std::fs::set_permissions(&state_dir, std::fs::Permissions::from_mode(0o711))?;
    // Before any thread exists: the layers volume is mounted in a mount namespace of the daemon's own,
    // so it never shows on the host and vanishes with the daemon, however it ends.
    host::enter_private_mount_namespace().context("creating the daemon's mount namespace")?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let r = runtime.block_on(serve(args, state_dir, fd_limit, degraded));
    // Sandboxes are gone by now; a blocking-pool task still running (a host name lookup for a sandbox's
    // DNS query can outlive the proxy's 5 s wait) must not hold the exit, as a plain drop would.
    runtime.shutdown_timeout(Duration::from_secs(2));
    r
}

/// Runs the host checks of `sandlot doctor`: refuses, in the doctor's words, when a required feature is
/// missing; logs a warning for each degraded one and returns their names (for `/healthz`).
fn check_host(args: &ServeArgs) -> anyhow::Result<Vec<String>> {
    let report = doctor::examine(&args.doctor_options()?);
    let missing = report.with(doctor::Verdict::Missing);
    if !missing.is_empty() {
        bail!(
            "this host lacks what sandlot needs; nothing was changed. What is missing, and what to do \
             (`sandlot doctor` shows every check):\n{}",
            doctor::table(&missing).trim_end()
        );
    }
    let degraded = report.with(doctor::Verdict::Degraded);
    for c in &degraded {
        tracing::warn!("DEGRADED {}: {}; to fix: {}", c.name, c.found, c.fix);
    }
    Ok(degraded.iter().map(|c| c.name.to_string()).collect())
}

/// The descriptor limit assumed when it cannot be read: the usual soft default.
const FALLBACK_FD_LIMIT: u64 = 1024;

/// The image side of the control layer: the blob store under the state directory and a registry
/// client trusting the system roots and `--extra-ca`.
fn image_store(args: &ServeArgs, state_dir: &std::path::Path) -> anyhow::Result<sandlot_control::images::Images> {
    let mut extra_roots_pem = Vec::new();
    for f in &args.extra_ca {
        extra_roots_pem.extend(std::fs::read(f).with_context(|| format!("--extra-ca {}", f.display()))?);
        extra_roots_pem.push(b'\n');
    }
    let mut credentials = std::collections::HashMap::new();
    if let Some(f) = &args.registry_auth_file {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Entry {
            username: String,
            password: String,
            #[serde(default)]
            tenants: Vec<String>,
        }
        let text = std::fs::read_to_string(f).with_context(|| format!("--registry-auth-file {}", f.display()))?;
        let entries: std::collections::HashMap<String, Entry> = serde_json::from_str(&text).with_context(|| {
            format!(
                "--registry-auth-file {}: expected {{\"HOST\": {{\"username\": .., \"password\": .., \"tenants\": [..]}}}}",
                f.display()
            )
        })?;
        for (host, e) in entries {
            let credentials_of = sandlot_oci::Credentials { username: e.username, password: e.password };
            credentials.insert(
                host,
                sandlot_control::images::ConfiguredCredentials { credentials: credentials_of, tenants: e.tenants },
            );
        }
    }
    let registry = sandlot_oci::Registry::new(sandlot_oci::RegistryOptions {
        extra_roots_pem,
        insecure: args.insecure_registry.clone(),
        // Which pulls may use the configured credentials is the control layer's decision.
        credentials: Default::default(),
        user_agent: concat!("sandlot/", env!("CARGO_PKG_VERSION")).into(),
        private: args.allow_private_registry.clone(),
        pull_timeout: Some(Duration::from_secs(args.pull_timeout_s)),
    })
    .map_err(|e| anyhow::anyhow!("the registry client: {e}"))?;
    let blobs = state_dir.join("blobs");
    sandlot_control::images::Images::new(registry, blobs.clone(), args.max_import_mb << 20, credentials)
        .map(|images| {
            images
                .with_spool_budget(args.spool_budget_mb << 20)
                .with_unpack_timeout(Duration::from_secs(args.unpack_timeout_s))
        })
        .with_context(|| format!("opening the blob store {}", blobs.display()))
}

async fn serve(args: ServeArgs, state_dir: PathBuf, fd_limit: u64, degraded: Vec<String>) -> anyhow::Result<()> {
    let control_cfg = sandlot_control::Config { degraded, ..args.control_config()? };
    let db = state_dir.join("sandlot.db");
    let store: Box<dyn Store> = Box::new(SqliteStore::open(&db).with_context(|| format!("opening {}", db.display()))?);
    store.integrity_check()?;
    for f in ["sandlot.db", "sandlot.db-wal", "sandlot.db-shm"] {
        let _ = std::fs::set_permissions(state_dir.join(f), std::fs::Permissions::from_mode(0o600));
    }
    write_admin_key(store.as_ref(), &state_dir)?;

    let layers = args.defence_layers()?;
    for l in &args.disable_layers {
        tracing::warn!("INSECURE: the {l} layer is off for every sandbox of this server");
    }
    let settings = NetworkSettings {
        ca_dir: state_dir.join("ca"),
        resolve: parse_resolve(&args.resolve)?,
        extra_ca: args.extra_ca.clone(),
        loopback_only: args.test_loopback_only,
        test_redirect: parse_redirect(&args.test_dial_redirect, args.test_loopback_only)?,
        fd_limit,
    };
    let (net, egress_ca_pem) = sandlot_engine::network::shared(
        &settings,
        sandlot_driver_linux::host_networks(),
        sandlot_driver_linux::GATEWAY_ADDR,
    )?;
    let ca_pem = egress_ca_pem + &sandbox_cas(&args.sandbox_ca)?;
    tracing::info!("proxied connections: at most {} open, all sandboxes together", net.max_open_total);
    let driver = LinuxDriver::new(LinuxConfig {
        state_dir: state_dir.clone(),
        layers,
        layers_volume_gb: (!args.no_disk_quota).then_some(args.layers_volume_gb),
        ca_pem: Some(ca_pem),
    })
    .context("starting the sandbox engine")?;
    let engine = Engine::new(
        Arc::new(driver),
        EngineConfig { net, start_timeout: Duration::from_secs(15) },
        sandlot_driver_linux::daemon_output_bytes(),
    );
    tracing::info!("always denied to sandboxes, as the host's own: {}", engine.host_networks().join(", "));
    if args.no_disk_quota {
        tracing::warn!("--no-disk-quota: sandbox writable layers have no size limit and can fill the host's disk");
    }
    let host = sandlot_control::capacity::Host::from(
        engine
            .host_capacity()
            .context("reading the host's capacity (/proc/meminfo, /proc/sys/kernel/pid_max, the state filesystem)")?,
    );
    tracing::info!(
        "host capacity: {} MiB of memory, pid_max {}, {:?} MiB for layers; overcommit {}",
        host.memory_mb,
        host.pid_max,
        host.disk_mb,
        args.overcommit
    );
    let images = image_store(&args, &state_dir)?;
    let control = Control::new(Arc::clone(&engine), store, control_cfg, host, Some(images));
    control.recover().await?;
    // Blobs and trees a crash left unnamed (a pull cut short) go before anything new is stored.
    control.collect_images().await;

    let mut e2b_settings =
        e2b::E2bSettings::new(&args.e2b_template, args.e2b_domain.as_deref()).map_err(anyhow::Error::msg)?;
    let preview = app::preview_domain(args.preview_domain.as_deref(), args.listen);
    if e2b_settings.domain.is_some() && e2b_settings.domain == preview {
        bail!("--e2b-domain and --preview-domain are both {preview:?}: give the E2B surface a domain of its own");
    }
    let e2b_tls = match (args.e2b_tls_listen, e2b_settings.domain.clone()) {
        (None, _) => {
            if args.e2b_tls_cert.is_some() || args.e2b_tls_key.is_some() {
                bail!("--e2b-tls-cert/--e2b-tls-key need --e2b-tls-listen ADDR");
            }
            None
        }
        (Some(_), None) => bail!("--e2b-tls-listen needs --e2b-domain DOMAIN (the certificate's and host routing's)"),
        (Some(addr), Some(domain)) => {
            let setup = tls::setup(
                &domain,
                args.e2b_tls_cert.as_deref(),
                args.e2b_tls_key.as_deref(),
                &tls::ca_dir(&state_dir),
            )?;
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("listening on {addr} (--e2b-tls-listen)"))?;
            let port = listener.local_addr()?.port();
            e2b_settings.reported_domain = Some(if port == 443 { domain.clone() } else { format!("{domain}:{port}") });
            e2b_settings.ca_pem = setup.issued_by_ca.clone();
            tracing::info!(
                "E2B over TLS on {}: https://PORT-ID.{domain}:{port}/ ({})",
                listener.local_addr()?,
                if setup.issued_by_ca.is_some() {
                    "certificate from the server's CA"
                } else {
                    "the admin's certificate"
                }
            );
            Some((listener, setup.acceptor))
        }
    };
    if let Some(preview) = &preview {
        e2b_settings.use_preview_domain(preview, args.listen.port());
    }
    let app = Arc::new(App {
        control: Arc::clone(&control),
        preview_domain: preview,
        listen: args.listen,
        spool_dir: state_dir.join("blobs"),
        e2b: e2b_settings,
        mcp_shutdown: tokio_util::sync::CancellationToken::new(),
        http_metrics: Default::default(),
        streams: Default::default(),
    });
    let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
    let services = control.start_services(shutdown_rx.clone());

    let listener =
        tokio::net::TcpListener::bind(args.listen).await.with_context(|| format!("listening on {}", args.listen))?;
    tracing::info!("sandlot listening on http://{} (state in {})", args.listen, state_dir.display());
    tracing::info!("dashboard: http://{}/ui/ (sign in with an API key)", args.listen);
    match app.preview_domain() {
        Some(d) => tracing::info!("preview URLs: http://PORT-ID.{d}:{}/", args.listen.port()),
        None => tracing::warn!(
            "no --preview-domain: preview URLs share the API's origin (pages are CSP-sandboxed, their cookies dropped); \
             set --preview-domain to give each sandbox port an origin of its own"
        ),
    }
    let router = router(Arc::clone(&app));
    let mut rx = shutdown_rx.clone();
    let caps = listener::Caps::new(
        fd_limit,
        args.max_api_connections.map(|n| n as usize),
        args.max_api_connections_per_ip.map(|n| n as usize),
    );
    tracing::info!(
        "API connections: at most {} open, {} per client address; request heads within {:?}",
        caps.total,
        caps.per_ip,
        listener::HEADER_READ_TIMEOUT
    );
    let shared = listener::Shared::default();
    let tls_served = e2b_tls.map(|(tls_listener, acceptor)| {
        let (router, shared, mut rx) = (router.clone(), shared.clone(), shutdown_rx.clone());
        tokio::spawn(listener::serve(tls_listener, router, caps, Some(acceptor), shared, async move {
            let _ = rx.changed().await;
        }))
    });
    let mcp_shutdown = app.mcp_shutdown.clone();
    listener::serve(listener, router, caps, None, shared, async move {
        shutdown_signal().await;
        let _ = shutdown_tx.send(true);
        // MCP event streams stay open until their session ends: end them, or the listener would wait.
        mcp_shutdown.cancel();
        let _ = rx.changed().await;
    })
    .await?;
    if let Some(t) = tls_served {
        t.await.context("the E2B TLS listener")??;
    }
    tracing::info!("shutting down: stopping persistent sandboxes, deleting ephemeral ones");
    control.shutdown().await;
    services.finish().await;
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// `--overcommit`: a ratio between 0.1 and 10.
fn parse_overcommit(s: &str) -> Result<f64, String> {
    let r: f64 = s.parse().map_err(|e| format!("{s:?} is not a number: {e}"))?;
    if !(0.1..=10.0).contains(&r) {
        return Err(format!("{r} is out of range: give a ratio between 0.1 and 10 (1 = no overcommit)"));
    }
    Ok(r)
}

/// The certificates of the `--sandbox-ca` files as PEM, each re-encoded from its DER, so nothing else a
/// file holds (a private key put there by mistake) reaches a sandbox.
fn sandbox_cas(files: &[PathBuf]) -> anyhow::Result<String> {
    use base64::Engine;
    use rustls_pki_types::pem::PemObject;
    let mut out = String::new();
    for file in files {
        let certs: Vec<rustls_pki_types::CertificateDer<'static>> =
            rustls_pki_types::CertificateDer::pem_file_iter(file)
                .and_then(|certs| certs.collect::<Result<_, _>>())
                .with_context(|| format!("--sandbox-ca {}: expected PEM certificates", file.display()))?;
        if certs.is_empty() {
            bail!(
                "--sandbox-ca {}: no certificate in it (expected -----BEGIN CERTIFICATE----- blocks)",
                file.display()
            );
        }
        for cert in certs {
            let b64 = base64::engine::general_purpose::STANDARD.encode(cert.as_ref());
            out.push_str("\n-----BEGIN CERTIFICATE-----\n");
            for line in b64.as_bytes().chunks(64) {
                out.push_str(std::str::from_utf8(line).expect("base64 is ascii"));
                out.push('\n');
            }
            out.push_str("-----END CERTIFICATE-----\n");
        }
    }
    Ok(out)
}

/// `FROM=TO` pairs of `--test-dial-redirect`: TO on loopback, and only beside `--test-loopback-only`.
fn parse_redirect(
    pairs: &[String],
    loopback_only: bool,
) -> anyhow::Result<std::collections::HashMap<std::net::IpAddr, std::net::IpAddr>> {
    if !pairs.is_empty() && !loopback_only {
        bail!("--test-dial-redirect is for test suites and needs --test-loopback-only");
    }
    let mut out = std::collections::HashMap::new();
    for p in pairs {
        let parsed = p.split_once('=').and_then(|(from, to)| Some((from.parse().ok()?, to.parse().ok()?)));
        let Some((from, to)) = parsed else { bail!("--test-dial-redirect {p:?}: expected FROM=TO, two IP addresses") };
        if !std::net::IpAddr::is_loopback(&to) {
            bail!("--test-dial-redirect {p:?}: {to} is not a loopback address");
        }
        out.insert(from, to);
    }
    Ok(out)
}

/// `NAME=IP` pairs of `--resolve`.
fn parse_resolve(pairs: &[String]) -> anyhow::Result<std::collections::HashMap<String, Vec<std::net::IpAddr>>> {
    let mut map: std::collections::HashMap<String, Vec<std::net::IpAddr>> = Default::default();
    for p in pairs {
        let Some((name, ip)) = p.split_once('=') else {
            bail!("--resolve {p:?}: expected NAME=IP");
        };
        let ip: std::net::IpAddr =
            ip.parse().with_context(|| format!("--resolve {p:?}: {ip:?} is not an IP address"))?;
        map.entry(name.trim_end_matches('.').to_ascii_lowercase()).or_default().push(ip);
    }
    Ok(map)
}

/// Most bytes of a request body read whole (JSON): uploads stream past it.
pub(crate) const MAX_JSON_BODY: usize = 16 << 20;

/// Creates the bootstrap admin key on first start and writes it where the operator can find it.
fn write_admin_key(store: &dyn Store, state_dir: &Path) -> anyhow::Result<()> {
    let path = state_dir.join("admin.key");
    if let Some(key) = store.ensure_admin_key()? {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("writing {}", path.display()))?;
        writeln!(f, "{key}")?;
        f.sync_all()?;
        tracing::info!(
            "created the admin API key and wrote it to {} (mode 0600); use it as SANDLOT_API_KEY, \
             and make tenant keys with `sandlot keys create --tenant NAME`",
            path.display()
        );
    }
    Ok(())
}

use std::os::unix::fs::OpenOptionsExt;

fn router(app: AppState) -> Router {
    let uploads = Router::new()
        .route("/v1/sandboxes/{id}/files", get(files::read).put(files::write).delete(files::remove))
        .route("/v1/sandboxes/{id}/files/tar", get(files::download_tar).put(files::upload_tar))
        .layer(DefaultBodyLimit::disable());
    Router::new()
        .route("/healthz", get(|State(app): State<AppState>| async move { axum::Json(app.control.health()) }))
        .route("/v1/openapi.json", get(openapi::get))
        .route("/v1/keys", post(keys::create).get(keys::list))
        .route("/v1/keys/{id}", axum::routing::delete(keys::revoke))
        .route("/v1/tenants/{tenant}/network", get(tenants::get_network).put(tenants::set_network))
        .route("/v1/audit", get(tenants::audit))
        .route("/v1/usage", get(tenants::usage))
        .route("/v1/events", get(events::list))
        .route("/v1/webhooks", post(events::create_webhook).get(events::list_webhooks))
        .route("/v1/webhooks/{id}", get(events::get_webhook).delete(events::delete_webhook))
        .route("/v1/webhooks/{id}/deliveries", get(events::deliveries))
        .route("/v1/tenants/{tenant}/usage", get(tenants::tenant_usage))
        .route("/v1/sandboxes", post(sandboxes::create).get(sandboxes::list))
        .route("/v1/sandboxes/{id}", get(sandboxes::get).delete(sandboxes::delete))
        .route("/v1/sandboxes/{id}/exec", post(exec::exec))
        .route("/v1/sandboxes/{id}/stop", post(sandboxes::stop))
        .route("/v1/sandboxes/{id}/resume", post(sandboxes::resume))
        .route("/v1/sandboxes/{id}/pause", post(sandboxes::pause))
        .route("/v1/sandboxes/{id}/timeout", post(sandboxes::set_timeout))
        .route("/v1/sandboxes/{id}/snapshot", post(snapshots::snapshot))
        .route("/v1/sandboxes/{id}/fork", post(snapshots::fork))
        .route("/v1/sandboxes/{id}/network", axum::routing::patch(sandboxes::set_network))
        .route("/v1/sandboxes/{id}/ports", post(ports::expose))
        .route("/v1/sandboxes/{id}/ports/{port}", axum::routing::any(ports::proxy_root))
        .route("/v1/sandboxes/{id}/ports/{port}/", axum::routing::any(ports::proxy_root))
        .route("/v1/sandboxes/{id}/ports/{port}/{*rest}", axum::routing::any(ports::proxy))
        .route("/v1/images", get(images::list))
        .route("/v1/images/pull", post(images::pull))
        .route("/v1/images/import", post(images::import))
        .route("/v1/images/build", post(build::build))
        .route("/v1/snapshots/{id}/image", post(build::from_snapshot))
        .route("/v1/images/{*name}", get(images::get).delete(images::delete))
        .route("/v1/snapshots", get(snapshots::list))
        .route("/v1/snapshots/{id}", axum::routing::delete(snapshots::delete))
        .route("/v1/sandboxes/{id}/processes", get(exec::list))
        .route("/v1/sandboxes/{id}/processes/{pid}/wait", post(exec::wait))
        .route("/v1/sandboxes/{id}/processes/{pid}/kill", post(exec::kill))
        .route("/v1/sandboxes/{id}/processes/{pid}/stdin", post(exec::stdin))
        .route("/v1/sandboxes/{id}/processes/{pid}/resize", post(exec::resize))
        .route("/v1/sandboxes/{id}/processes/{pid}/logs", get(exec::logs))
        .route("/v1/sandboxes/{id}/pty", get(pty::pty))
        .route("/v1/sandboxes/{id}/files/list", get(files::list))
        .route("/v1/sandboxes/{id}/files/stat", get(files::stat))
        .route("/v1/sandboxes/{id}/files/watch", get(files::watch))
        .route("/v1/sandboxes/{id}/files/mkdir", post(files::mkdir))
        .route("/v1/sandboxes/{id}/files/move", post(files::rename))
        .route("/v1/sandboxes/{id}/metrics", get(metrics::samples))
        .route("/metrics", get(metrics::prometheus))
        .merge(uploads)
        .merge(ui::routes())
        .merge(mcp::routes(&app, app.mcp_shutdown.clone()))
        .nest("/e2b", e2b::control_plane())
        .route_layer(axum::middleware::from_fn(metrics::matched_route))
        .fallback(|| async { ApiError::not_found("route") })
        .method_not_allowed_fallback(|| async { error::method_not_allowed() })
        .layer(DefaultBodyLimit::max(MAX_JSON_BODY))
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&app), ports::by_host))
        // Outermost: a request naming an E2B sandbox never reaches the native routes.
        .layer(axum::middleware::from_fn_with_state(e2b::Routers::new(&app), e2b::by_sandbox))
        // Outside even that: every request's latency, by the route template the inner layer found.
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&app.http_metrics), metrics::observe))
        .with_state(app)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_cas_copy_the_certificates_and_nothing_else_of_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let ca = sandlot_netproxy::broker::Ca::load_or_create(&dir.path().join("ca")).unwrap();
        let key = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIKeyKeyKeyKeyKeyKeyKeyKeyKeyKeyKeyKeyKeyKeyK\n-----END PRIVATE KEY-----\n";
        let file = dir.path().join("bundle.pem");
        std::fs::write(&file, format!("{}{key}", ca.cert_pem())).unwrap();
        let pem = sandbox_cas(std::slice::from_ref(&file)).unwrap();
        assert_eq!(pem.matches("BEGIN CERTIFICATE").count(), 1, "{pem}");
        assert!(!pem.contains("PRIVATE KEY"), "{pem}");
        let squash = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
        assert_eq!(squash(&pem), squash(ca.cert_pem()));

        let only_key = dir.path().join("key.pem");
        std::fs::write(&only_key, key).unwrap();
        let err = sandbox_cas(&[only_key]).unwrap_err().to_string();
        assert!(err.contains("no certificate"), "{err}");
        assert!(sandbox_cas(&[dir.path().join("missing.pem")]).is_err());
    }

    #[test]
    fn dial_redirects_go_to_loopback_and_only_in_test_mode() {
        let m = parse_redirect(&["1.1.1.1=127.0.0.9".into()], true).unwrap();
        assert_eq!(m[&"1.1.1.1".parse().unwrap()], "127.0.0.9".parse::<std::net::IpAddr>().unwrap());
        assert!(parse_redirect(&["1.1.1.1=127.0.0.9".into()], false).is_err());
        assert!(parse_redirect(&["1.1.1.1=10.0.0.1".into()], true).is_err());
        assert!(parse_redirect(&["1.1.1.1".into()], true).is_err());
    }
}
