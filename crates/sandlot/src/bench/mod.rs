//! `sandlot bench`: latency figures through the public HTTP API, beside bubblewrap doing the same work.
//!
//! Measured: create→first output (create a sandbox, stream `echo`, stop at the first stdout byte) at
//! concurrency 1 and 16; exec round trip in a running sandbox; delete. The baseline is `bwrap` (Debian's
//! bubblewrap) starting a namespace sandbox over the host /usr and running the same `echo`. Image pulls
//! are measured beside `skopeo copy` + `umoci unpack` from the bench's own registry.
//!
//! One module per group of `--only`: [`start`], [`exec`], [`lifecycle`], [`network`], [`images`]
//! (with its [`registry`] and [`source_image`]), [`e2b`] (the official E2B Python SDK), [`baseline`]; [`report`] turns samples into figures
//! and prints them.

mod baseline;
mod e2b;
mod exec;
mod images;
mod lifecycle;
mod network;
mod registry;
mod report;
mod source_image;
mod start;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use sandlot_client::Client;

use crate::lock;
use network::{bench_https_server, HttpsServer};

/// Options of `sandlot bench`.
#[derive(clap::Args, Debug)]
#[command(long_about = "Measure sandlot's latencies through its HTTP API and print them beside bubblewrap \
(bwrap) doing the same work on this machine.\n\nWithout --url it starts a private server (as root) on a \
free loopback port with a temporary state directory, and removes it afterwards.\n\nExample:\n  sudo sandlot bench --iterations 200")]
pub struct BenchArgs {
    /// Server to measure (default: start a private one).
    #[arg(long)]
    url: Option<String>,
    /// API key for --url.
    #[arg(long, env = "SANDLOT_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Samples per figure.
    #[arg(long, default_value_t = 100)]
    iterations: usize,
    /// Concurrency levels for create→first output, comma separated.
    #[arg(long, default_value = "1,16", value_delimiter = ',')]
    concurrency: Vec<usize>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Measure only these groups, comma separated: start, exec, lifecycle, network, images, e2b,
    /// baseline.
    #[arg(long, value_delimiter = ',', value_parser = ["start", "exec", "lifecycle", "network", "images", "e2b", "baseline"])]
    only: Vec<String>,
    /// Python with the E2B SDK installed (`pip install -r tests/e2b/requirements.txt`), for the `e2b`
    /// figures: the official SDK against this server beside the native API.
    #[arg(long, value_name = "PYTHON", default_value = "python3")]
    e2b_python: PathBuf,
}

impl BenchArgs {
    fn wants(&self, group: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|g| g == group)
    }

    fn named(&self, group: &str) -> bool {
        self.only.iter().any(|g| g == group)
    }
}

struct PrivateServer {
    child: Child,
    dir: PathBuf,
    tls: HttpsServer,
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts `sandlot serve` on a free loopback port; `registry` (`127.0.0.1:PORT`) is a plain-HTTP
/// registry it may pull from.
fn start_private_server(registry: Option<&str>) -> anyhow::Result<(PrivateServer, Client)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let dir = std::env::temp_dir().join(format!("sandlot-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let tls = bench_https_server(&dir)?;
    let child = Command::new(std::env::current_exe()?)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--state-dir"])
        .arg(dir.join("state"))
        // The network figures fetch from servers on this host's loopback under these names; the HTTPS
        // one has a certificate of the bench's own CA.
        .args(["--resolve", "bench.test=127.0.0.1", "--resolve", "tls.bench.test=127.0.0.1"])
        .args(["--resolve", "pass.bench.test=127.0.0.1", "--extra-ca"])
        .arg(&tls.ca_file)
        .args(registry.iter().flat_map(|r| ["--insecure-registry", r]))
        .env("SANDLOT_LOG", "warn")
        .stdin(Stdio::null())
        .spawn()
        .context("starting a private server")?;
    let server = PrivateServer { child, dir: dir.clone(), tls };
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(key) = std::fs::read_to_string(dir.join("state/admin.key")) {
            let client = Client::new(url.clone(), key.trim());
            if client.health().is_ok() {
                return Ok((server, client));
            }
        }
        if Instant::now() > deadline {
            bail!("the private server did not become ready within 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `work` `total` times spread over `concurrency` threads; returns every sample.
pub(super) fn parallel(
    total: usize,
    concurrency: usize,
    work: impl Fn() -> anyhow::Result<Duration> + Send + Sync + 'static,
) -> anyhow::Result<Vec<Duration>> {
    let work = Arc::new(work);
    let samples = Arc::new(Mutex::new(Vec::with_capacity(total)));
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let threads: Vec<_> = (0..concurrency)
        .map(|_| {
            let (work, samples, next) = (Arc::clone(&work), Arc::clone(&samples), Arc::clone(&next));
            std::thread::spawn(move || -> anyhow::Result<()> {
                while next.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < total {
                    let d = work()?;
                    lock(&samples).push(d);
                }
                Ok(())
            })
        })
        .collect();
    for t in threads {
        t.join().map_err(|_| anyhow::anyhow!("bench thread panicked"))??;
    }
    let v = std::mem::take(&mut *lock(&samples));
    Ok(v)
}

/// Runs the benchmark and prints the figures.
pub fn run(args: BenchArgs) -> anyhow::Result<i32> {
    // The image figures' registry comes first: the private server is told to pull from it over HTTP.
    let registry = match (&args.url, args.wants("images")) {
        (None, true) => match images::check_tools().and_then(|()| registry::BenchRegistry::start()) {
            Ok(r) => Some(r),
            Err(e) if args.named("images") => return Err(e),
            Err(e) => {
                eprintln!("image figures skipped: {e:#}");
                None
            }
        },
        (Some(_), true) => {
            eprintln!("image figures skipped: they need the private server (no --url), which may pull from the bench's plain-HTTP registry");
            None
        }
        (_, false) => None,
    };
    let (server, client) = match &args.url {
        Some(url) => {
            let key = args.api_key.clone().context("--url needs --api-key or SANDLOT_API_KEY")?;
            (None, Client::new(url.clone(), key))
        }
        None => {
            let (s, c) = start_private_server(registry.as_ref().map(|r| r.host()).as_deref())?;
            (Some(s), c)
        }
    };
    let n = args.iterations.max(1);
    let mut figures = Vec::new();
    // Warm-up: image skeleton, page cache, connection setup.
    for _ in 0..3 {
        start::create_to_first_output(&client)?;
    }
    if args.wants("start") {
        figures.extend(start::figures(&client, &args.concurrency, n)?);
    }
    if args.wants("exec") {
        figures.extend(exec::figures(&client, n)?);
    }
    if args.wants("lifecycle") {
        figures.extend(lifecycle::figures(&client, n)?);
    }
    if args.wants("network") {
        match &server {
            Some(server) => figures.extend(network::figures(&client, server, n.min(30))?),
            None => eprintln!("network figures skipped: they need the private server (no --url)"),
        }
    }
    if let Some(registry) = &registry {
        figures.extend(images::figures(&client, registry, n)?);
    }
    if args.wants("e2b") {
        match e2b::check_python(&args.e2b_python) {
            Ok(()) => figures.extend(e2b::figures(&client, &args.e2b_python, n)?),
            Err(e) if args.named("e2b") => return Err(e),
            Err(e) => eprintln!("E2B SDK figures skipped: {e:#}"),
        }
    }
    if args.wants("baseline") {
        figures.extend(baseline::figures(&args.concurrency, n)?);
    }
    report::print(&figures, args.json)?;
    Ok(0)
}
