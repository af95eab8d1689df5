//! The fairness suite: one tenant's sandbox abuses the server in every way the review found, one at a
//! time, while a sandbox of another tenant measures what it gets — the median exec round trip and a
//! 64 MiB download — against its quiet baseline. The victim must never be starved (within 10× of
//! quiet: a blocked shared loop or a held lock costs seconds, not a ratio), and the daemon's memory
//! and descriptors stay bounded. The ratios themselves are figures, printed and kept in
//! docs/PERFORMANCE.md: on two cores, where the noisy sandbox may spend one core at its quota, they
//! swing from run to run and are no pass/fail line.
//!
//! Timing tests need the machine to themselves: these are `#[ignore]`d in the main run and
//! `scripts/test.sh` runs them alone afterwards (`--run-ignored only --test-threads 1`).

#[path = "../common/mod.rs"]
mod common;
#[path = "../escape/probe.rs"]
#[allow(dead_code)]
mod probe;
#[path = "../escape/server.rs"]
#[allow(dead_code)]
mod server;
mod storage;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use sandlot_client::api::{CreateSandbox, ExecRequest};
use sandlot_client::{Client, Sandbox};

use crate::server::Server;

/// Runs `f` over and over on a thread of its own until this guard is dropped (an abuse that goes on
/// while the victim is measured).
struct Looping(std::sync::Arc<std::sync::atomic::AtomicBool>, Option<std::thread::JoinHandle<()>>);

impl Looping {
    fn start(f: impl Fn() + Send + 'static) -> Looping {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&stop);
        let t = std::thread::spawn(move || {
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                f();
            }
        });
        Looping(stop, Some(t))
    }
}

impl Drop for Looping {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = self.1.take().map(|t| t.join());
    }
}

/// How much worse than quiet the victim may fare under any one abuse before it counts as starved.
/// The worst ratio seen on the 2-core CI machine is 6× (snapshots to the quota, one download).
const STARVED: f64 = 10.0;

/// The victim's view of the server: median exec round trip and the time of a 64 MiB download.
#[derive(Debug, Clone, Copy)]
struct Service {
    exec_ms: f64,
    download_ms: f64,
}

fn measure(victim: &Sandbox) -> Service {
    let mut rtts: Vec<f64> = (0..15)
        .map(|_| {
            let t = Instant::now();
            let r = victim.run(&["true"]).expect("victim exec");
            assert_eq!(r.exit_code, 0);
            t.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    rtts.sort_by(f64::total_cmp);
    let t = Instant::now();
    let n = victim.read_file_to("/home/user/blob", std::io::sink()).expect("victim download");
    assert_eq!(n, 64 << 20);
    Service { exec_ms: rtts[rtts.len() / 2], download_ms: t.elapsed().as_secs_f64() * 1000.0 }
}

/// The median of three rounds of [`measure`], so one lucky or unlucky round does not set a figure.
fn median_service(victim: &Sandbox) -> Service {
    let mut rounds: Vec<Service> = (0..3).map(|_| measure(victim)).collect();
    rounds.sort_by(|a, b| a.exec_ms.total_cmp(&b.exec_ms));
    let exec_ms = rounds[1].exec_ms;
    rounds.sort_by(|a, b| a.download_ms.total_cmp(&b.download_ms));
    Service { exec_ms, download_ms: rounds[1].download_ms }
}

/// The daemon's resident memory (bytes) and open descriptors.
fn daemon_usage(server: &Server) -> (u64, usize) {
    let fds = std::fs::read_dir(format!("/proc/{}/fd", server.pid())).unwrap().count();
    (crate::probe::rss_bytes(server.pid()), fds)
}

/// Starts `shell` in the background in `sb`, with per-stream output cap `cap`.
fn background(sb: &Sandbox, shell: &str, cap: Option<u64>) -> u64 {
    sb.spawn(&ExecRequest { shell: Some(shell.into()), max_output_bytes: cap, ..ExecRequest::default() })
        .unwrap_or_else(|e| panic!("noisy {shell:?}: {e:?}"))
}

/// Holds connections that sent half a request to `path` on the server, until dropped.
fn half_sent(server: &Server, path: &str, count: usize) -> Vec<TcpStream> {
    (0..count)
        .filter_map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", server.port())).ok()?;
            let _ = write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ");
            Some(s)
        })
        .collect()
}

#[test]
#[ignore = "timing: scripts/test.sh runs the fairness suite alone, after the rest"]
fn fairness_a_noisy_tenant_does_not_starve_another() {
    let server = Server::start();
    let admin = server.client();
    let noisy_key = admin.create_key("noisy").unwrap().key;
    let noisy_client = Client::new(server.url(), noisy_key.clone());
    let victim_client = Client::new(server.url(), admin.create_key("victim").unwrap().key);
    let victim = victim_client.create(&CreateSandbox::default()).unwrap();
    let r = victim.shell("head -c 67108864 /dev/urandom > /home/user/blob && echo ok").unwrap();
    assert_eq!(r.stdout, "ok\n");
    let noisy = noisy_client.create(&CreateSandbox { disk_mb: Some(512), ..CreateSandbox::default() }).unwrap();
    let r = noisy.shell("head -c 268435456 /dev/zero > /home/user/big && echo ok").unwrap();
    assert_eq!(r.stdout, "ok\n");

    let _ = measure(&victim); // warm caches
    let quiet = median_service(&victim);
    let (rss0, fds0) = daemon_usage(&server);
    println!(
        "quiet: exec p50 {:.1} ms, 64 MiB download {:.0} ms; daemon {} MiB, {fds0} fds",
        quiet.exec_ms,
        quiet.download_ms,
        rss0 >> 20
    );

    type Abuse<'a> = (&'static str, Box<dyn Fn() -> Box<dyn std::any::Any> + 'a>);
    let abuses: Vec<Abuse> = vec![
        (
            "output flood (2 × yes at the 64 MiB cap)",
            Box::new(|| {
                let pids: Vec<u64> = (0..2).map(|_| background(&noisy, "exec yes", Some(64 << 20))).collect();
                Box::new(pids)
            }),
        ),
        ("CPU (a busy loop at its quota)", Box::new(|| Box::new(background(&noisy, "while :; do :; done", None)))),
        (
            "processes to the pids limit",
            Box::new(|| {
                Box::new(background(&noisy, "for i in $(seq 1 300); do sleep 600 & done 2>/dev/null; wait", None))
            }),
        ),
        (
            "unread TCP buffers (64 loopback connections)",
            Box::new(|| {
                let script = "import socket,time\nl=socket.socket();l.bind(('127.0.0.1',0));l.listen(128)\nk=[]\nfor _ in range(64):\n c=socket.create_connection(l.getsockname());s,_=l.accept();c.setblocking(False);k+=[c,s]\n try:\n  while True: c.send(b'x'*65536)\n except OSError: pass\ntime.sleep(600)\n";
                noisy.write_file("/home/user/tcp.py", script.as_bytes()).unwrap();
                Box::new(background(&noisy, "exec python3 /home/user/tcp.py", None))
            }),
        ),
        (
            "disk fill to its quota",
            Box::new(|| {
                Box::new(background(&noisy, "dd if=/dev/zero of=/home/user/fill bs=1M 2>/dev/null; sleep 600", None))
            }),
        ),
        (
            "exec storm (audit rows)",
            Box::new(|| {
                let sb = noisy.clone();
                Box::new(Looping::start(move || {
                    let _ = sb.run(&["true", &"x".repeat(4096)]);
                }))
            }),
        ),
        (
            "slow readers (8 unread 256 MiB downloads)",
            Box::new(|| {
                let held: Vec<TcpStream> =
                    (0..8).map(|_| server.unread_download(&noisy_key, &noisy, "/home/user/big")).collect();
                Box::new(held)
            }),
        ),
        ("half-sent API requests (1 000)", Box::new(|| Box::new(half_sent(&server, "/healthz", 1000)))),
        (
            "preview flood (150 requests a server holds unanswered)",
            Box::new(|| {
                let hold = "import socket\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\ns.bind(('127.0.0.1',8000));s.listen(1024)\nk=[]\nwhile True:\n c,_=s.accept();k.append(c)\n";
                noisy.write_file("/home/user/hold.py", hold.as_bytes()).unwrap();
                let server_pid = background(&noisy, "exec python3 /home/user/hold.py", None);
                std::thread::sleep(Duration::from_millis(500));
                let port = noisy.expose_port(8000).unwrap();
                let (host, path) = crate::probe::preview(&port.url);
                let held: Vec<TcpStream> = (0..150)
                    .filter_map(|_| {
                        let mut s = TcpStream::connect(("127.0.0.1", server.port())).ok()?;
                        let _ = write!(s, "GET /{path} HTTP/1.1\r\nHost: {host}\r\n\r\n");
                        Some(s)
                    })
                    .collect();
                Box::new((server_pid, held))
            }),
        ),
        (
            "snapshots until the tenant's quota",
            Box::new(|| {
                let mut taken = 0;
                while noisy.snapshot(None).is_ok() {
                    taken += 1;
                    assert!(taken <= 64, "more snapshots than --max-snapshots-per-tenant");
                }
                Box::new(taken)
            }),
        ),
    ];

    let mut worst = Vec::new();
    for (name, start) in &abuses {
        let guard = start();
        std::thread::sleep(Duration::from_millis(500));
        let loaded = median_service(&victim);
        let (rss, fds) = daemon_usage(&server);
        println!(
            "{name}: exec p50 {:.1} ms ({:.1}×), download {:.0} ms ({:.1}×); daemon {} MiB, {fds} fds",
            loaded.exec_ms,
            loaded.exec_ms / quiet.exec_ms,
            loaded.download_ms,
            loaded.download_ms / quiet.download_ms,
            rss >> 20
        );
        worst.push((name, loaded, rss, fds));
        drop(guard);
        // End whatever the abuse left running before the next one.
        for p in noisy.processes().unwrap().into_iter().filter(|p| p.running) {
            let _ = noisy.kill_process(p.pid, None);
            let _ = noisy.wait(p.pid);
        }
        let _ = noisy.shell("rm -f /home/user/fill");
    }
    for (name, loaded, rss, fds) in &worst {
        assert!(
            loaded.exec_ms <= quiet.exec_ms * STARVED,
            "{name}: exec {:.1} ms vs {:.1} quiet",
            loaded.exec_ms,
            quiet.exec_ms
        );
        assert!(
            loaded.download_ms <= quiet.download_ms * STARVED,
            "{name}: download {:.0} ms vs {:.0} quiet",
            loaded.download_ms,
            quiet.download_ms
        );
        assert!(*rss < rss0 + (1 << 30), "{name}: daemon RSS {} MiB (quiet {})", rss >> 20, rss0 >> 20);
        assert!(*fds < fds0 + 4096, "{name}: daemon holds {fds} fds (quiet {fds0})");
    }
}
