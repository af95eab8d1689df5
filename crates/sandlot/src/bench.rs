//! `sandlot bench`: latency figures through the public HTTP API, beside bubblewrap doing the same work.
//!
//! Measured: create→first output (create a sandbox, stream `echo`, stop at the first stdout byte) at
//! concurrency 1 and 16; exec round trip in a running sandbox; delete. The baseline is `bwrap` (Debian's
//! bubblewrap) starting a namespace sandbox over the host /usr and running the same `echo`.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::lock;
use sandlot_client::api::{CreateSandbox, ExecEvent, ExecRequest};
use sandlot_client::Client;

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
    /// Measure only these groups, comma separated: start, exec, lifecycle, network, baseline.
    #[arg(long, value_delimiter = ',', value_parser = ["start", "exec", "lifecycle", "network", "baseline"])]
    only: Vec<String>,
}

impl BenchArgs {
    fn wants(&self, group: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|g| g == group)
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

fn start_private_server() -> anyhow::Result<(PrivateServer, Client)> {
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

#[derive(serde::Serialize)]
struct Figure {
    name: String,
    concurrency: usize,
    samples: usize,
    p50_ms: f64,
    p99_ms: f64,
    mean_ms: f64,
}

fn figure(name: &str, concurrency: usize, mut samples: Vec<Duration>) -> Figure {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let pct = |p: f64| ms(samples[((samples.len() as f64 * p).ceil() as usize).clamp(1, samples.len()) - 1]);
    let mean = samples.iter().map(|d| ms(*d)).sum::<f64>() / samples.len() as f64;
    Figure {
        name: name.into(),
        concurrency,
        samples: samples.len(),
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
        mean_ms: mean,
    }
}

/// Runs `work` `total` times spread over `concurrency` threads; returns every sample.
fn parallel(
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

fn echo_request() -> ExecRequest {
    ExecRequest { argv: Some(vec!["/bin/echo".into(), "ready".into()]), ..Default::default() }
}

/// Create a sandbox, stream `echo ready`, stop the clock at the first stdout event; delete untimed.
fn create_to_first_output(client: &Client) -> anyhow::Result<Duration> {
    let t0 = Instant::now();
    let sb = client.create(&CreateSandbox::default())?;
    let mut first = None;
    for ev in sb.exec_stream(&echo_request())? {
        if let ExecEvent::Stdout { .. } = ev? {
            first.get_or_insert_with(|| t0.elapsed());
        }
    }
    sb.delete()?;
    first.context("the command printed nothing")
}

fn bwrap_available() -> bool {
    Command::new("bwrap")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// bwrap over the host /usr with every namespace unshared, to the first byte of `echo`'s output.
fn bwrap_first_output() -> anyhow::Result<Duration> {
    let t0 = Instant::now();
    let mut child = Command::new("bwrap")
        .args(["--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr"])
        .args(["--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64"])
        .args(["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--", "/bin/echo", "ready"])
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .context("running bwrap")?;
    let mut byte = [0u8; 1];
    child.stdout.take().expect("piped").read_exact(&mut byte)?;
    let d = t0.elapsed();
    child.wait()?;
    Ok(d)
}

fn timed(f: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<Duration> {
    let t0 = Instant::now();
    f()?;
    Ok(t0.elapsed())
}

/// Pause→resume→first exec, stop→resume→first exec, snapshot of a 100 MiB tree, fork of 10.
fn lifecycle(client: &Client, n: usize) -> anyhow::Result<Vec<Figure>> {
    let spec = CreateSandbox { persistent: Some(true), ..Default::default() };
    let sb = client.create(&spec)?;
    let t = ExecRequest { argv: Some(vec!["/bin/true".into()]), ..Default::default() };
    let mut pause = Vec::new();
    let mut stop = Vec::new();
    for _ in 0..n {
        sb.pause()?;
        pause.push(timed(|| {
            sb.resume()?;
            sb.exec(&t)?;
            Ok(())
        })?);
    }
    for _ in 0..n.min(20) {
        sb.stop()?;
        stop.push(timed(|| {
            sb.resume()?;
            sb.exec(&t)?;
            Ok(())
        })?);
    }
    // 100 files of 1 MiB.
    let fill = ExecRequest {
        shell: Some(
            "mkdir -p ~/tree && for i in $(seq 100); do head -c 1048576 /dev/urandom > ~/tree/f$i; done".into(),
        ),
        timeout_s: Some(120.0),
        ..Default::default()
    };
    sb.exec(&fill)?;
    let mut snaps = Vec::new();
    let mut snapshot_ids = Vec::new();
    for _ in 0..5 {
        snaps.push(timed(|| {
            snapshot_ids.push(sb.snapshot(None)?.id);
            Ok(())
        })?);
    }
    for id in snapshot_ids {
        client.delete_snapshot(&id)?;
    }
    let mut forks = Vec::new();
    for _ in 0..3 {
        let mut copies = Vec::new();
        forks.push(timed(|| {
            copies = sb.fork(10)?;
            Ok(())
        })?);
        for c in copies {
            c.delete()?;
        }
    }
    sb.delete()?;
    Ok(vec![
        figure("sandlot pause→resume→first exec", 1, pause),
        figure("sandlot stop→resume→first exec", 1, stop),
        figure("sandlot snapshot of a 100 MiB tree", 1, snaps),
        figure("sandlot fork ×10 (100 MiB tree)", 1, forks),
    ])
}

/// A loopback HTTP server: `/big` answers 256 MiB, anything else 2 bytes.
fn bench_http_server() -> anyhow::Result<u16> {
    use std::io::{BufRead, BufReader, Write as _};
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = l.local_addr()?.port();
    // Filled before the first request can arrive: writing 256 MiB takes longer than a request.
    let big: Arc<[u8]> = vec![b'x'; 256 << 20].into();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let big = Arc::clone(&big);
            std::thread::spawn(move || {
                let mut s = s;
                let mut r = BufReader::new(match s.try_clone() {
                    Ok(c) => c,
                    Err(_) => return,
                });
                let mut first = String::new();
                let _ = r.read_line(&mut first);
                let mut line = String::new();
                while r.read_line(&mut line).map(|n| n > 0).unwrap_or(false) && line != "\r\n" {
                    line.clear();
                }
                let body: &[u8] = if first.contains("/big") { &big } else { b"ok" };
                // Head and a small body in one write, and no Nagle: the figure is the stack's, not a
                // delayed ACK's.
                let _ = s.set_nodelay(true);
                let mut out = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len())
                    .into_bytes();
                if body.len() < 4096 {
                    out.extend_from_slice(body);
                    let _ = s.write_all(&out);
                } else {
                    let _ = s.write_all(&out);
                    let _ = s.write_all(body);
                }
            });
        }
    });
    Ok(port)
}

/// A loopback HTTPS server for `tls.bench.test` (HTTP/1.1 keep-alive), with a certificate of a CA made
/// for this run.
struct HttpsServer {
    port: u16,
    ca_file: PathBuf,
}

fn bench_https_server(dir: &std::path::Path) -> anyhow::Result<HttpsServer> {
    use std::io::Write as _;
    let ca_key = rcgen::KeyPair::generate()?;
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "sandlot bench CA");
    let ca = ca_params.self_signed(&ca_key)?;
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate()?;
    let leaf = rcgen::CertificateParams::new(vec!["tls.bench.test".to_string(), "pass.bench.test".to_string()])?
        .signed_by(&key, &issuer)?;
    let ca_file = dir.join("bench-ca.pem");
    std::fs::write(&ca_file, ca.pem())?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )?;
    let config = Arc::new(config);
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = l.local_addr()?.port();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let config = Arc::clone(&config);
            std::thread::spawn(move || -> anyhow::Result<()> {
                let _ = s.set_nodelay(true);
                let conn = rustls::ServerConnection::new(config)?;
                let mut tls = rustls::StreamOwned::new(conn, s);
                // Keep-alive, as API servers are: requests are answered until the client closes.
                let mut pending = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                        pending.drain(..end + 4);
                        tls.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")?;
                        tls.flush()?;
                    }
                    let n = tls.read(&mut buf)?;
                    if n == 0 {
                        break;
                    }
                    pending.extend_from_slice(&buf[..n]);
                }
                Ok(())
            });
        }
    });
    Ok(HttpsServer { port, ca_file })
}

/// Where a sandbox finds the daemon's egress CA (alone, so curl loads one certificate, as on the host).
const CA_IN_SANDBOX: &str = "/etc/sandlot/ca.pem";

/// curl's own timers (process start excluded).
struct CurlTimes {
    /// Name lookup, seconds.
    lookup: f64,
    /// From the end of the name lookup to the end of the transfer, seconds.
    after_lookup: f64,
    /// Download speed, bytes per second.
    speed: f64,
}

const CURL_FORMAT: &str = "%{time_namelookup} %{time_total} %{speed_download}";

fn curl_times(out: &str) -> anyhow::Result<CurlTimes> {
    let v: Vec<f64> = out.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    match v[..] {
        [lookup, total, speed] => Ok(CurlTimes { lookup, after_lookup: total - lookup, speed }),
        _ => bail!("unexpected curl output {out:?}"),
    }
}

/// Throughput and request latency through a sandbox's network stack, beside curl on the host itself.
fn network(client: &Client, server: &PrivateServer, n: usize) -> anyhow::Result<Vec<Figure>> {
    let port = bench_http_server()?;
    let fmt = CURL_FORMAT;
    // tls.bench.test has a header rule: its connections are TLS-terminated and re-originated.
    let spec = CreateSandbox {
        network: Some(serde_json::from_str(
            r#"{"mode":"allowlist","allow":["bench.test","tls.bench.test","pass.bench.test"],
                "rules":{"tls.bench.test":{"headers":{"authorization":"Bearer bench-secret"}}}}"#,
        )?),
        ..Default::default()
    };
    let sb = client.create(&spec)?;
    let run_in = |url: &str| -> anyhow::Result<CurlTimes> {
        let r = sb.exec(&ExecRequest {
            shell: Some(format!("curl -s -o /dev/null -w '{fmt}' {url}")),
            ..Default::default()
        })?;
        curl_times(&r.stdout)
    };
    let run_host = |args: &[&str]| -> anyhow::Result<CurlTimes> {
        let out = Command::new("curl").args(["-s", "-o", "/dev/null", "-w", fmt]).args(args).output()?;
        curl_times(&String::from_utf8_lossy(&out.stdout))
    };
    // Request latency is taken after the name lookup: the host side asks for an address, not a name.
    // The sandbox's lookups (through the daemon's DNS) are a figure of their own.
    let secs = Duration::from_secs_f64;
    let mut small = (Vec::new(), Vec::new());
    let mut lookups = Vec::new();
    for _ in 0..n {
        let t = run_in(&format!("http://bench.test:{port}/small"))?;
        small.0.push(secs(t.after_lookup));
        lookups.push(secs(t.lookup));
        small.1.push(secs(run_host(&[&format!("http://127.0.0.1:{port}/small")])?.after_lookup));
    }
    let tls_port = server.tls.port;
    let ca = server.tls.ca_file.display().to_string();
    // pass.bench.test is the same server without a rule: TLS passes through the proxy untouched, so
    // brokered minus passthrough is what terminating and re-originating TLS costs.
    sb.write_file("/tmp/bench-ca.pem", &std::fs::read(&server.tls.ca_file)?)?;
    let mut tls = (Vec::new(), Vec::new());
    let mut passthrough = Vec::new();
    for _ in 0..n {
        let url = format!("https://pass.bench.test:{tls_port}/small");
        passthrough.push(secs(run_in(&format!("--cacert /tmp/bench-ca.pem {url}"))?.after_lookup));
        let url = format!("https://tls.bench.test:{tls_port}/small");
        tls.0.push(secs(run_in(&format!("--cacert {} {url}", CA_IN_SANDBOX))?.after_lookup));
        let resolve = format!("tls.bench.test:{tls_port}:127.0.0.1");
        tls.1.push(secs(run_host(&["--cacert", &ca, "--resolve", &resolve, &url])?.after_lookup));
    }
    let relay = splice_relay(port)?;
    let mut speed = (Vec::new(), Vec::new(), Vec::new());
    // Interleaved, so a busy moment of the machine costs every side alike.
    for _ in 0..9 {
        speed.0.push(run_in(&format!("http://bench.test:{port}/big"))?.speed);
        speed.1.push(run_host(&[&format!("http://127.0.0.1:{port}/big")])?.speed);
        speed.2.push(run_host(&[&format!("http://127.0.0.1:{relay}/big")])?.speed);
    }
    sb.delete()?;
    let mbps = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2] / 1e6
    };
    let mut figs = vec![
        figure("sandlot net: DNS lookup (curl)", 1, lookups),
        figure("sandlot net: HTTP request (connect+reply)", 1, small.0),
        figure("host loopback: HTTP request", 1, small.1),
        figure("sandlot net: brokered HTTPS request", 1, tls.0),
        figure("sandlot net: HTTPS, TLS passed through", 1, passthrough),
        figure("host loopback: HTTPS request", 1, tls.1),
    ];
    // Throughput is reported in the mean/p50 columns as MB/s, in a figure of its own.
    for (name, v) in [
        ("sandlot net: 256 MiB download MB/s", &speed.0),
        ("host loopback: 256 MiB download MB/s", &speed.1),
        ("host via a splice relay: 256 MiB MB/s", &speed.2),
    ] {
        let m = mbps(v);
        figs.push(Figure { name: name.into(), concurrency: 1, samples: v.len(), p50_ms: m, p99_ms: m, mean_ms: m });
    }
    Ok(figs)
}

/// A bare TCP relay on the host (127.0.0.1:returned port → 127.0.0.1:`to`) moving bytes the way the
/// sandbox proxy does (splice), without any sandbox: the cost of one proxy hop on its own.
fn splice_relay(to: u16) -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = l.local_addr()?.port();
    l.set_nonblocking(true)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    std::thread::spawn(move || {
        rt.block_on(async move {
            let Ok(l) = tokio::net::TcpListener::from_std(l) else { return };
            while let Ok((a, _)) = l.accept().await {
                tokio::spawn(async move {
                    let Ok(b) = tokio::net::TcpStream::connect(("127.0.0.1", to)).await else { return };
                    let (x, y) = (std::sync::atomic::AtomicU64::new(0), std::sync::atomic::AtomicU64::new(0));
                    let _ = sandlot_netproxy::splice::bidirectional(&a, &b, &x, &y).await;
                });
            }
        })
    });
    Ok(port)
}

/// Runs the benchmark and prints the figures.
pub fn run(args: BenchArgs) -> anyhow::Result<i32> {
    let (server, client) = match &args.url {
        Some(url) => {
            let key = args.api_key.clone().context("--url needs --api-key or SANDLOT_API_KEY")?;
            (None, Client::new(url.clone(), key))
        }
        None => {
            let (s, c) = start_private_server()?;
            (Some(s), c)
        }
    };
    let n = args.iterations.max(1);
    let mut figures = Vec::new();
    // Warm-up: image skeleton, page cache, connection setup.
    for _ in 0..3 {
        create_to_first_output(&client)?;
    }
    if args.wants("start") {
        for &c in &args.concurrency {
            let cl = client.clone();
            figures.push(figure(
                "sandlot create→first output",
                c,
                parallel(n, c, move || create_to_first_output(&cl))?,
            ));
        }
    }
    if args.wants("exec") {
        let sb = client.create(&CreateSandbox::default())?;
        let t = ExecRequest { argv: Some(vec!["/bin/true".into()]), ..Default::default() };
        let samples = (0..n)
            .map(|_| {
                let t0 = Instant::now();
                sb.exec(&t).map(|_| t0.elapsed())
            })
            .collect::<Result<Vec<_>, _>>()?;
        figures.push(figure("sandlot exec round trip (/bin/true)", 1, samples));
        // A file out of the sandbox through the API: supervisor read, credit-windowed frames, HTTP.
        let fill = "head -c 67108864 /dev/zero > /home/user/blob";
        sb.exec(&ExecRequest { shell: Some(fill.into()), ..Default::default() })?;
        let samples = (0..n.min(20))
            .map(|_| {
                let t0 = Instant::now();
                sb.read_file_to("/home/user/blob", std::io::sink()).map(|_| t0.elapsed())
            })
            .collect::<Result<Vec<_>, _>>()?;
        figures.push(figure("sandlot 64 MiB file download (API)", 1, samples));
        sb.delete()?;
    }
    if args.wants("lifecycle") {
        let deletes = (0..n.min(50))
            .map(|_| {
                let sb = client.create(&CreateSandbox::default())?;
                let t0 = Instant::now();
                sb.delete().map(|_| t0.elapsed()).map_err(anyhow::Error::from)
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        figures.push(figure("sandlot delete", 1, deletes));
        figures.extend(lifecycle(&client, n.min(50))?);
    }
    if args.wants("network") {
        match &server {
            Some(server) => figures.extend(network(&client, server, n.min(30))?),
            None => eprintln!("network figures skipped: they need the private server (no --url)"),
        }
    }
    if args.wants("baseline") {
        if bwrap_available() {
            for &c in &args.concurrency {
                figures.push(figure("bwrap spawn→first output", c, parallel(n, c, bwrap_first_output)?));
            }
        } else {
            eprintln!("bwrap not found: install Debian's bubblewrap for the baseline (apt-get install bubblewrap)");
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&figures)?);
    } else {
        println!("{:<40} {:>5} {:>8} {:>9} {:>9} {:>9}", "figure", "conc", "samples", "p50 ms", "p99 ms", "mean ms");
        for f in &figures {
            println!(
                "{:<40} {:>5} {:>8} {:>9.2} {:>9.2} {:>9.2}",
                f.name, f.concurrency, f.samples, f.p50_ms, f.p99_ms, f.mean_ms
            );
        }
    }
    Ok(0)
}
