//! `network`: throughput and request latency through a sandbox's network, beside curl on the host,
//! against loopback HTTP and HTTPS servers this module starts.

use std::io::Read;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use sandlot_client::api::{CreateSandbox, ExecRequest};
use sandlot_client::Client;

use super::report::{figure, Figure};
use super::PrivateServer;

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
pub(super) struct HttpsServer {
    pub(super) port: u16,
    pub(super) ca_file: PathBuf,
}

pub(super) fn bench_https_server(dir: &std::path::Path) -> anyhow::Result<HttpsServer> {
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
pub(super) fn figures(client: &Client, server: &PrivateServer, n: usize) -> anyhow::Result<Vec<Figure>> {
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
        figs.push(Figure {
            name: name.into(),
            concurrency: 1,
            samples: v.len(),
            p50_ms: m,
            p90_ms: m,
            p99_ms: m,
            mean_ms: m,
            vs: None,
        });
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
