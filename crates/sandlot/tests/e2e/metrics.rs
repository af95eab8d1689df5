//! Metrics: the sampler's figures move when a sandbox burns CPU, holds memory, starts threads, is
//! OOM-killed or talks to the network; samples are the owner's alone; `GET /metrics` answers the admin
//! key and the scrape token only, with per-sandbox series.

use std::process::Command;
use std::time::Duration;

use sandlot_client::api::{CreateSandbox, MetricsSample, SandboxSamples};
use sandlot_client::Sandbox;

use crate::harness::{argv, eventually, expect_error, sh, Server};

/// A server sampling every second.
fn server(extra: &[&str]) -> Server {
    let mut args = vec!["--metrics-interval-s", "1"];
    args.extend_from_slice(extra);
    Server::start_with(&args)
}

/// Waits (up to 60 s: the VM test runs this under emulation) until the sandbox's samples satisfy
/// `cond`; panics with the last ones otherwise.
#[track_caller]
fn samples_until(sb: &Sandbox, what: &str, cond: impl Fn(&SandboxSamples) -> bool) -> SandboxSamples {
    let mut last = None;
    let ok = eventually(Duration::from_secs(60), || {
        let got = sb.metrics(None).expect("GET metrics");
        let done = cond(&got);
        last = Some(got);
        done
    });
    let last = last.unwrap();
    assert!(
        ok,
        "{what}: not seen in 60 s; the last samples: {:#?}",
        last.samples.iter().rev().take(3).collect::<Vec<_>>()
    );
    last
}

fn max_of(s: &SandboxSamples, f: impl Fn(&MetricsSample) -> Option<u64>) -> u64 {
    s.samples.iter().filter_map(f).max().unwrap_or(0)
}

/// A busy loop, 200 MiB held by python and 20 sleeping threads each show in the samples: CPU time and
/// throttling (at a 0.5-core limit), memory now and at its peak, processes; the owner's CLI shows them,
/// another tenant gets 404.
#[test]
fn samples_move_when_a_sandbox_burns_cpu_memory_and_processes() {
    let server = server(&[]);
    let sb = server.create(&CreateSandbox { cpu: Some(0.5), memory_mb: Some(512), ..Default::default() });
    let first = samples_until(&sb, "a first sample", |s| !s.samples.is_empty());
    assert_eq!((first.interval_ms, first.window_s), (1000, 3600));
    assert_eq!((first.limits.cpu, first.limits.memory_bytes), (0.5, 512 << 20));
    let base = first.samples[0].clone();
    assert!(base.cpu_usage_usec.is_some() && base.memory_bytes.is_some() && base.pids.is_some(), "{base:?}");
    // The layer's size is read from the first sample on (0 until btrfs commits sandlot's few files).
    assert!(base.disk_used_bytes.is_some_and(|b| b < 1 << 20), "{base:?}");

    sb.spawn(&sh("timeout 4 sh -c 'while :; do :; done'")).unwrap();
    sb.spawn(&sh("python3 -c 'import time; b = bytearray(200 << 20); time.sleep(6)'")).unwrap();
    let threads = "import threading, time\nfor _ in range(20): threading.Thread(target=time.sleep, args=(6,)).start()";
    sb.spawn(&argv(&["python3", "-c", threads])).unwrap();

    let base_cpu = base.cpu_usage_usec.unwrap();
    let got = samples_until(&sb, "CPU, memory and processes moving", |s| {
        max_of(s, |x| x.cpu_usage_usec) > base_cpu + 500_000
            && max_of(s, |x| x.memory_bytes) > 150 << 20
            && max_of(s, |x| x.pids) >= base.pids.unwrap() + 20
            && max_of(s, |x| x.cpu_throttled_periods_total) > base.cpu_throttled_periods_total.unwrap_or(0)
    });
    let busy = got.samples.iter().filter_map(|x| x.cpu_used_pct).fold(0.0, f64::max);
    // Well under the 100 % a busy loop takes on an idle host: the VM test runs this under emulation.
    assert!(busy > 25.0, "a busy loop used at most {busy}% of its 0.5 cores");
    assert!(max_of(&got, |x| x.memory_peak_bytes) >= 150 << 20 || max_of(&got, |x| x.memory_peak_bytes) == 0);
    assert!(got.samples.windows(2).all(|w| w[0].at_ms < w[1].at_ms), "samples out of order");

    // Once the processes end, memory and processes fall back; the peak stays.
    let after = samples_until(&sb, "memory and processes falling back", |s| {
        let l = s.samples.last().unwrap();
        l.memory_bytes.unwrap_or(u64::MAX) < 100 << 20 && l.pids.unwrap_or(u64::MAX) < base.pids.unwrap() + 5
    });
    let last = after.samples.last().unwrap();
    if let Some(peak) = last.memory_peak_bytes {
        assert!(peak >= 150 << 20, "the peak did not keep the 200 MiB: {peak}");
    }

    // `since` is exclusive: only newer samples.
    let since = sb.metrics(Some(last.at_ms)).unwrap();
    assert!(since.samples.iter().all(|x| x.at_ms > last.at_ms), "{since:?}");

    // Another tenant's sandbox answers like a missing one.
    let bob = server.tenant_client("bob");
    expect_error(bob.sandbox(sb.id()).metrics(None), 404, "not_found");

    // The CLI, as JSON and as a table.
    let cli = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_sandlot"))
            .args(["sandbox", "metrics", sb.id()])
            .args(args)
            .env("SANDLOT_URL", server.url())
            .env("SANDLOT_API_KEY", server.admin_key())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let json: SandboxSamples = serde_json::from_str(&cli(&["--json"])).unwrap();
    assert_eq!(json.id, sb.id());
    assert!(json.samples.len() >= after.samples.len(), "{} < {}", json.samples.len(), after.samples.len());
    let table = cli(&["--since", "10m"]);
    assert!(table.contains("limits 0.5 cpu, 512 MB memory") && table.contains("TIME"), "{table}");
    sb.delete().unwrap();
}

/// `GET /metrics`: 401 without a key or with a wrong one, 403 for a tenant's key, the text format for the
/// admin key and the scrape token; an OOM kill is counted in the sandbox's series.
#[test]
fn prometheus_endpoint_is_for_the_admin_and_the_scrape_token_and_counts_oom_kills() {
    let token = "metrics-scrape-token-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let server = server(&["--metrics-token-file", token_file.to_str().unwrap()]);
    let sb = server.create(&CreateSandbox { memory_mb: Some(64), ..Default::default() });

    let r = server.raw("GET", "/metrics", None, &[], b"");
    assert!(r.assert_error(401, "unauthenticated").contains("admin key or the contents of --metrics-token-file"));
    server.raw("GET", "/metrics", Some("not-the-token"), &[], b"").assert_error(401, "unauthenticated");
    let bob = server.client().create_key("bob").unwrap();
    let msg = server.raw("GET", "/metrics", Some(&bob.key), &[], b"").assert_error(403, "forbidden");
    assert!(msg.contains("\"bob\"") && msg.contains("scrape token"), "{msg}");

    let r = sb.run(&["python3", "-c", "b = bytearray(256 << 20)"]).unwrap();
    assert_eq!(r.status, sandlot_client::api::ExitStatus::Oom, "{r:?}");
    samples_until(&sb, "the OOM kill", |s| s.samples.last().and_then(|x| x.oom_kills_total).unwrap_or(0) >= 1);

    for key in [token, server.admin_key()] {
        let r = server.raw("GET", "/metrics", Some(key), &[], b"");
        assert_eq!(r.status, 200, "{r:?}");
        assert!(r.head.to_ascii_lowercase().contains("content-type: text/plain; version=0.0.4"), "{}", r.head);
        let labels = format!("{{sandbox=\"{}\",tenant=\"admin\"}}", sb.id());
        let value = |name: &str| -> f64 {
            let prefix = format!("{name}{labels} ");
            let line =
                r.body.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("no {prefix} in\n{}", r.body));
            line[prefix.len()..].parse().unwrap()
        };
        assert!(value("sandlot_sandbox_oom_kills_total") >= 1.0);
        assert_eq!(value("sandlot_sandbox_memory_limit_bytes"), (64 << 20) as f64);
        assert!(value("sandlot_sandbox_memory_bytes") > 0.0);
        assert!(r.body.contains("# TYPE sandlot_http_request_duration_seconds histogram"));
        assert!(r.body.contains("route=\"/v1/sandboxes/{id}/metrics\",method=\"GET\",status=\"2xx\""), "{}", r.body);
        assert!(r.body.contains("sandlot_sandboxes{state=\"running\"} 1\n"));
        assert!(r.body.contains("sandlot_tenant_sandboxes{tenant=\"admin\",state=\"running\"} 1\n"));
    }
    sb.delete().unwrap();
}

/// Egress through the proxy shows in the samples and in `/metrics`: bytes each way and connections
/// opened (allowed or refused). "The internet" is a server on loopback reached through `--resolve`.
#[test]
fn network_bytes_and_connections_are_counted() {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut line = String::new();
            while r.read_line(&mut line).map(|n| n > 0).unwrap_or(false) && line != "\r\n" {
                line.clear();
            }
            let body = "x".repeat(10_000);
            let _ = write!(s, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
        }
    });
    let server =
        Server::builder().loopback_only().resolve("web.test=127.0.0.1").args(&["--metrics-interval-s", "1"]).start();
    let spec = serde_json::from_str(r#"{"mode":"allowlist","allow":["web.test"]}"#).unwrap();
    let sb = server.create(&CreateSandbox { network: Some(spec), ..Default::default() });
    let out = sb
        .shell(&format!(
            "for i in 1 2 3; do curl -sS -m 5 -o /dev/null -w '%{{size_download}} ' http://web.test:{port}/; done; \
             curl -sS -m 5 http://203.0.113.5:{port}/ >/dev/null 2>&1; echo refused=$?"
        ))
        .unwrap();
    assert!(out.stdout.starts_with("10000 10000 10000 ") && !out.stdout.contains("refused=0"), "{out:?}");
    let got = samples_until(&sb, "network counters", |s| {
        s.samples.last().is_some_and(|l| {
            l.net_bytes_in_total >= 30_000 && l.net_bytes_out_total > 0 && l.net_connections_total >= 4
        })
    });
    let last = got.samples.last().unwrap();
    assert_eq!(last.net_connections, 0, "{last:?}");
    let r = server.raw("GET", "/metrics", Some(server.admin_key()), &[], b"");
    let line = format!("sandlot_sandbox_network_receive_bytes_total{{sandbox=\"{}\",tenant=\"admin\"}} ", sb.id());
    let received: f64 = r.body.lines().find_map(|l| l.strip_prefix(&line)).expect("no receive series").parse().unwrap();
    assert!(received >= 30_000.0, "{received}");
    sb.delete().unwrap();
}
