//! Attacks on the daemon's own resources, from API clients: descriptors (half-sent requests),
//! host capacity (limits beyond the host, many concurrent creates), the audit log (huge argvs) and
//! lifetimes (pause to live forever). Each must end in its stated refusal while others are served.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use sandlot_client::api::{CreateSandbox, SandboxState};

use crate::common::{eventually, expect_error};
use crate::server::Server;

/// Descriptor limit of the daemon in the connection tests: small enough that the attack below would
/// exhaust it without the caps (the API's share is then 128 connections, 32 per address).
const DAEMON_FDS: u64 = 1024;
/// Half-sent requests the attacker holds open: about twice the daemon's descriptor limit.
const ATTACK_CONNECTIONS: usize = 2000;

/// A loopback connection to `port` from source address `from` (any 127/8 address is this host).
fn connect_from(from: Ipv4Addr, port: u16) -> std::io::Result<TcpStream> {
    use nix::sys::socket::{bind, connect, socket, AddressFamily, SockFlag, SockType, SockaddrIn};
    let fd: OwnedFd = socket(AddressFamily::Inet, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
    // The port is picked at connect, not at bind: a bind to port 0 searches the port space for a port
    // free for every destination, which grows slow over thousands of sockets.
    let one: libc::c_int = 1;
    // SAFETY: setsockopt reads an int of the given size from a valid pointer, on a descriptor we own.
    unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            &one as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &SockaddrIn::from(SocketAddrV4::new(from, 0)))?;
    connect(std::os::fd::AsRawFd::as_raw_fd(&fd), &SockaddrIn::from(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)))?;
    Ok(TcpStream::from(fd))
}

/// `GET /healthz` from `from`; the status line, or the error.
fn healthz_from(from: Ipv4Addr, port: u16) -> Result<String, String> {
    let mut s = connect_from(from, port).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    write!(s, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").map_err(|e| format!("write: {e}"))?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).map_err(|e| format!("read: {e}"))?;
    Ok(answer.lines().next().unwrap_or_default().to_string())
}

/// Raises this test process's own descriptor limit to its hard limit (the attacker needs 2000).
fn raise_own_fd_limit() {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit read and write a valid rlimit on the stack.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        r.rlim_cur = r.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &r);
    }
    assert!(r.rlim_cur as usize > ATTACK_CONNECTIONS + 100, "this test needs {ATTACK_CONNECTIONS}+ descriptors");
}

/// 2,000 half-sent requests from one address do not stop another client's `/healthz`: that address
/// gets its per-address share and the rest are answered 503 and closed, so the daemon never reaches
/// its descriptor limit.
#[test]
fn bounds_half_sent_requests_from_one_peer_do_not_stop_another_clients_healthz() {
    raise_own_fd_limit();
    let server = Server::builder().fd_limit(DAEMON_FDS).start();
    let attacker = Ipv4Addr::new(127, 0, 0, 2);
    let t0 = Instant::now();
    let mut held = Vec::new();
    for _ in 0..ATTACK_CONNECTIONS {
        let mut s = connect_from(attacker, server.port()).expect("the attacker's connect");
        let _ = s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n");
        held.push(s);
        if held.len() == 100 {
            // Past its share, well within the header timeout (which frees places): refused at once,
            // with a 503 that says why.
            let mut s = connect_from(attacker, server.port()).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            let mut answer = String::new();
            let _ = s.read_to_string(&mut answer);
            assert!(answer.starts_with("HTTP/1.1 503"), "over the per-address cap: {answer:?}");
            assert!(answer.contains("\"unavailable\"") && answer.contains("maximum of 32 API connections"), "{answer}");
        }
    }
    eprintln!("{ATTACK_CONNECTIONS} half-sent requests opened in {:?}", t0.elapsed());
    let victim = Ipv4Addr::new(127, 0, 0, 3);
    for _ in 0..5 {
        let t = Instant::now();
        assert_eq!(
            healthz_from(victim, server.port()),
            Ok("HTTP/1.1 200 OK".to_string()),
            "another client's healthz under attack\n--- server log ---\n{}",
            server.log_text()
        );
        eprintln!("healthz under attack answered in {:?}", t.elapsed());
    }
    assert!(server.log_text().contains("API connections refused"), "refusals are logged");
    drop(held);
}

/// A connection that sends no request head is closed by the server after the header-read timeout
/// (10 s), not kept for good.
#[test]
fn bounds_a_connection_that_sends_no_header_is_closed_after_the_timeout() {
    let server = Server::start();
    let mut s = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\n").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let t0 = Instant::now();
    let mut buf = [0u8; 512];
    let r = s.read(&mut buf);
    let after = t0.elapsed();
    eprintln!("closed after {after:?}: {r:?}");
    assert!(r.is_ok(), "the connection was still open after {after:?}: {r:?}");
    assert!(after >= Duration::from_secs(9) && after <= Duration::from_secs(13), "closed after {after:?}");
}

/// Twelve concurrent creates on `--max-sandboxes 3` boot three sandboxes; the other nine are refused
/// with `429 limit_reached` (the places are reserved before the boots are awaited).
#[test]
fn bounds_twelve_concurrent_creates_on_max_sandboxes_3_run_at_most_3() {
    let server = Server::builder().args(&["--max-sandboxes", "3"]).start();
    let results: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> =
            (0..12).map(|_| scope.spawn(|| server.client().create(&CreateSandbox::default()))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let made = results.iter().filter(|r| r.is_ok()).count();
    for r in results.into_iter().filter(|r| r.is_err()) {
        expect_error(r, 429, "limit_reached");
    }
    assert_eq!(made, 3, "sandboxes booted on --max-sandboxes 3");
    let running = server.client().list().unwrap().iter().filter(|s| s.state == SandboxState::Running).count();
    assert_eq!(running, 3);
    assert_eq!(server.supervisors().len(), 3);
}

/// `MemTotal` in MiB, as the daemon reads it.
fn host_memory_mb() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kb: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|r| r.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb >> 10
}

/// A sandbox asking for more memory than the host has (1 TiB) is refused with the maximum in the
/// message; so is one asking for more pids than the host's pid_max allows.
#[test]
fn bounds_memory_mb_beyond_host_memory_is_refused_with_the_maximum() {
    let server = Server::start();
    let host = host_memory_mb();
    let e = expect_error(
        server.client().create(&CreateSandbox { memory_mb: Some(1 << 20), ..CreateSandbox::default() }),
        400,
        "invalid_request",
    );
    let want = format!(
        "memory_mb 1048576 exceeds this server's maximum of {host} (the host's memory); ask for at most {host}"
    );
    assert!(e.to_string().contains(&want), "{e}");
    let pid_max: u64 = std::fs::read_to_string("/proc/sys/kernel/pid_max").unwrap().trim().parse().unwrap();
    let max_pids = (pid_max * 3 / 4).min(65_536);
    let e = expect_error(
        server.client().create(&CreateSandbox { pids: Some(max_pids + 1), ..CreateSandbox::default() }),
        400,
        "invalid_request",
    );
    assert!(e.to_string().contains(&format!("maximum of {max_pids}")), "{e}");
    assert!(server.supervisors().is_empty());
}

/// The memory limits of running sandboxes together stay within the host's memory × `--overcommit`:
/// past it a create is refused `429 server_full`, and deleting a sandbox gives its share back.
#[test]
fn bounds_the_sum_of_live_memory_cannot_exceed_capacity_times_overcommit() {
    let server = Server::builder().args(&["--overcommit", "0.1"]).start();
    let capacity = host_memory_mb() / 10;
    let each = capacity * 6 / 10;
    let spec = CreateSandbox { memory_mb: Some(each), ..CreateSandbox::default() };
    let first = server.create(&spec);
    let e = expect_error(server.client().create(&spec), 429, "server_full");
    assert!(e.to_string().contains(&format!("{} MiB of memory together", each * 2)), "{e}");
    assert!(e.to_string().contains("retry when some have ended"), "{e}");
    first.delete().unwrap();
    server.create(&spec);
}

/// An exec with a 1 MiB command line leaves an audit row of about 1 KiB: the head of the argv, its
/// full length and its SHA-256, and the names (never the values) of the variables it set.
#[test]
fn bounds_an_exec_with_1_mib_argv_stores_1_kib_and_a_digest_in_the_audit_row() {
    let server = Server::start();
    let sb = server.sandbox();
    // Nine arguments of 100 KiB (execve takes at most 128 KiB per argument).
    let mut argv = vec!["/bin/true".to_string()];
    argv.extend((0..9).map(|i| format!("{i}").repeat(100 << 10)));
    let req = sandlot_client::api::ExecRequest {
        argv: Some(argv.clone()),
        env: [("SECRET_TOKEN".to_string(), "hunter2-value".to_string())].into(),
        ..Default::default()
    };
    let r = sb.exec(&req).unwrap();
    assert_eq!(r.exit_code, 0, "{r:?}");
    let rows = server.client().audit(Some(sb.id()), Some(100)).unwrap();
    let execs: Vec<_> = rows.iter().filter(|e| e.action.starts_with("exec")).collect();
    assert_eq!(execs.len(), 1, "one row per exec: {execs:?}");
    let row = &execs[0].detail;
    let stored = row.to_string();
    eprintln!("audit row of a {} byte argv: {} bytes", argv.iter().map(|a| a.len() + 1).sum::<usize>(), stored.len());
    assert!(stored.len() < 1600, "the row holds {} bytes", stored.len());
    assert_eq!(row["argv_truncated"], true);
    assert_eq!(row["argv_bytes"], argv.iter().map(|a| a.len() + 1).sum::<usize>());
    assert_eq!(row["argv_sha256"].as_str().map(str::len), Some(64));
    assert_eq!(row["env"], serde_json::json!(["SECRET_TOKEN"]));
    assert!(!stored.contains("hunter2"), "an env value reached the audit log: {stored}");
}

/// A background exec writes its command line once (`exec.start`); its end row holds the outcome.
#[test]
fn bounds_a_background_exec_stores_its_argv_once() {
    let server = Server::start();
    let sb = server.sandbox();
    let pid = sb.spawn(&crate::common::sh("echo marker-arg")).unwrap();
    sb.wait(pid).unwrap();
    let mut rows = Vec::new();
    assert!(eventually(Duration::from_secs(5), || {
        rows = server.client().audit(Some(sb.id()), Some(100)).unwrap();
        rows.iter().any(|e| e.action == "exec.end")
    }));
    let with_argv = rows.iter().filter(|e| e.detail.to_string().contains("marker-arg")).count();
    assert_eq!(with_argv, 1, "{rows:?}");
}

/// A sandbox paused through the API still expires at its deadline (its lifetime is wall-clock), and
/// a resume before then keeps the deadline instead of granting a new lifetime.
#[test]
fn bounds_a_paused_sandbox_still_expires_and_resume_keeps_the_deadline() {
    let server = Server::start();
    let client = server.client();
    let sb = server.create(&CreateSandbox { timeout_s: Some(4), ..CreateSandbox::default() });
    let deadline = sb.created().unwrap().expires_at_ms;
    sb.pause().unwrap();
    assert_eq!(sb.resume().unwrap().expires_at_ms, deadline, "a resume granted a new lifetime");
    sb.pause().unwrap();
    let ended =
        eventually(Duration::from_secs(10), || client.get(sb.id()).is_ok_and(|i| i.state == SandboxState::Deleted));
    let info = client.get(sb.id()).unwrap();
    assert!(ended, "a paused sandbox outlived its lifetime: {info:?}");
    assert!(info.reason.as_deref().is_some_and(|r| r.contains("ended while paused")), "{info:?}");
}
