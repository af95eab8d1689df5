//! Exhaustion attacks: processes, memory, disk, inodes, output, tmpfs, request size, CPU, time. Each
//! must end in its typed denial while the sandbox (and its neighbours, and the host) carry on.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use sandlot_client::api::{CreateSandbox, ExecRequest, ExitStatus, User};

use crate::probe::{allocated_bytes, assert_answers, assert_lines, exec, python, sh, Heavy};
use crate::server::Server;

/// A fork loop under `pids: 64` fails with EAGAIN before 64 processes, and the sandbox still answers.
#[test]
fn limits_fork_loop_stops_with_eagain_below_the_pids_limit() {
    let _heavy = Heavy::lock();
    let server = Server::start();
    let sb = server.create(&CreateSandbox { pids: Some(64), ..CreateSandbox::default() });
    let body = r#"
kids = []
try:
    while True:
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        kids.append(pid)
except OSError as e:
    print("fork:", _err(e.errno))
print("stopped below 64:", len(kids) < 64)
for k in kids:
    os.kill(k, 9)
    os.waitpid(k, 0)
"#;
    assert_lines(&python(&sb, User::User, body), &["fork: errno=11 EAGAIN", "stopped below 64: True"]);
    assert_answers(&sb);
}

/// A classic shell fork bomb (`bomb() { bomb | bomb & }`) under `pids: 64` ends (at its timeout, or when
/// its shell is done) without taking the supervisor down; the sandbox still answers.
#[test]
fn limits_fork_bomb_leaves_the_supervisor_running() {
    let _heavy = Heavy::lock();
    let server = Server::start();
    let sb = server.create(&CreateSandbox { pids: Some(64), ..CreateSandbox::default() });
    // The supervisor loses a race with the bomb only some of the time: try a few bombs.
    for round in 0..5 {
        let bomb = ExecRequest {
            // The leader spins on shell builtins (no fork needed) while the bomb fills the pids limit.
            shell: Some("bomb() { bomb | bomb & }; bomb; i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done".into()),
            timeout_s: Some(3.0),
            ..ExecRequest::default()
        };
        let r = exec(&sb, bomb);
        if !matches!(r.status, ExitStatus::Timeout | ExitStatus::Exited) {
            std::thread::sleep(Duration::from_millis(300));
            let state = sb.info().map(|i| (i.state, i.reason));
            panic!("round {round}: the bomb's exec ended as {:?}; sandbox {state:?}", r.status);
        }
        assert_answers(&sb);
    }
}

/// A memory bomb under `memory_mb: 128` ends as `oom` (exit 137), and the sandbox still answers.
#[test]
fn limits_memory_bomb_ends_as_oom() {
    let _heavy = Heavy::lock();
    let server = Server::start();
    let sb = server.create(&CreateSandbox { memory_mb: Some(128), ..CreateSandbox::default() });
    let r = python(&sb, User::User, "x = []\nwhile True:\n    x.append(bytearray(8 << 20))\n");
    assert_eq!((r.status, r.exit_code), (ExitStatus::Oom, 137), "{r:?}");
    assert_answers(&sb);
}

/// Filling the disk under `disk_mb: 64` stops with EDQUOT (122) at the limit, and the host file backing
/// the layers volume grows by about that much, not by what was attempted (512 MiB).
#[test]
fn limits_disk_fill_stops_at_edquot() {
    let _heavy = Heavy::lock();
    let server = Server::start();
    let sb = server.create(&CreateSandbox { disk_mb: Some(64), ..CreateSandbox::default() });
    let volume = server.state_dir().join("layers.btrfs");
    let before = allocated_bytes(&volume);
    let body = r#"
n = 0
try:
    with open("/home/user/fill", "wb", buffering=0) as f:
        while n < 512:
            f.write(b"x" * (1 << 20))
            n += 1
        os.fsync(f.fileno())
    print("wrote 512 MiB")
except OSError as e:
    print("fill:", _err(e.errno))
print("stopped within 64 MiB:", n <= 64)
op("one more file", lambda: open("/home/user/more", "wb", buffering=0).write(b"y" * (1 << 20)))
os.sync()
"#;
    assert_lines(
        &python(&sb, User::User, body),
        &["fill: errno=122 EDQUOT", "stopped within 64 MiB: True", "one more file: errno=122 EDQUOT"],
    );
    let grown = allocated_bytes(&volume).saturating_sub(before);
    println!("layers volume grew by {} MiB on the host", grown >> 20);
    assert!(grown < 112 << 20, "the host volume grew by {} MiB for a 64 MiB limit", grown >> 20);
    assert_answers(&sb);
}

/// Inode exhaustion (up to 200k empty files under `disk_mb: 16`) stops with EDQUOT or ENOSPC well
/// within the command's time limit; the sandbox still answers.
#[test]
fn limits_inode_exhaustion_stops() {
    let _heavy = Heavy::lock();
    let server = Server::start();
    let sb = server.create(&CreateSandbox { disk_mb: Some(16), ..CreateSandbox::default() });
    let body = r#"
os.makedirs("/home/user/inodes")
t = time.time()
n = 0
try:
    for n in range(200000):
        os.close(os.open("/home/user/inodes/%d" % n, os.O_CREAT | os.O_WRONLY, 0o644))
    print("created 200000 files")
except OSError as e:
    print("stopped:", _err(e.errno))
    sys.stderr.write("files=%d seconds=%.1f\n" % (n, time.time() - t))
"#;
    let started = Instant::now();
    let r = exec(
        &sb,
        ExecRequest {
            argv: Some(vec!["python3".into(), "-c".into(), format!("{}\n{body}", crate::probe::PRELUDE)]),
            timeout_s: Some(90.0),
            ..ExecRequest::default()
        },
    );
    println!("inode exhaustion: {} ({}) in {:?}", r.stdout.trim(), r.stderr.trim(), started.elapsed());
    assert_eq!(r.status, ExitStatus::Exited, "{r:?}");
    assert!(
        ["stopped: errno=122 EDQUOT\n", "stopped: errno=28 ENOSPC\n"].contains(&r.stdout.as_str()),
        "did not stop on a quota: {r:?}"
    );
    assert_answers(&sb);
}

/// A 100 MiB output flood is counted to the byte and truncated to the 1 MiB cap (head and tail kept).
#[test]
fn limits_output_flood_is_counted_and_truncated() {
    let _heavy = Heavy::lock();
    let server = Server::start();
    let sb = server.sandbox();
    let r = sh(&sb, User::User, "yes escape-flood | head -c 104857600; echo; echo end-of-flood");
    assert_eq!((r.status, r.exit_code), (ExitStatus::Exited, 0), "{:?}", (r.status, &r.stderr));
    assert_eq!(r.stdout_bytes, 104_857_600 + 1 + 13, "stdout bytes");
    assert!(r.truncated, "not marked truncated");
    assert!(r.stdout.len() <= (1 << 20) + 4096, "kept {} bytes of stdout", r.stdout.len());
    assert!(r.stdout.starts_with("escape-flood\n") && r.stdout.ends_with("end-of-flood\n"), "head or tail lost");
    assert_answers(&sb);
}

/// Filling /tmp (tmpfs) past `memory_mb` fails with ENOSPC, and the sandbox survives it.
#[test]
fn limits_tmp_fill_is_enospc_and_the_sandbox_survives() {
    let _heavy = Heavy::lock();
    let server = Server::start();
    let sb = server.create(&CreateSandbox { memory_mb: Some(128), ..CreateSandbox::default() });
    let r =
        sh(&sb, User::User, "dd if=/dev/zero of=/tmp/fill bs=1M count=300 2>&1 | grep -o 'No space left on device'");
    std::thread::sleep(Duration::from_millis(500));
    let state = sb.info().map(|i| (i.state, i.reason));
    let alive = sb.exec(&ExecRequest { shell: Some("echo alive".into()), ..ExecRequest::default() });
    assert!(
        alive.as_ref().is_ok_and(|a| a.stdout == "alive\n"),
        "the sandbox died: fill ended {:?}, sandbox {state:?}, next exec {alive:?}",
        r.status
    );
    assert_lines(&r, &["No space left on device"]);
}

/// A 2 MiB argv is refused up front with 400 invalid_request (not passed to execve or the protocol).
#[test]
fn limits_huge_argv_is_invalid_request() {
    let server = Server::start();
    let sb = server.sandbox();
    let request = ExecRequest { argv: Some(vec!["true".into(), "a".repeat(2 << 20)]), ..ExecRequest::default() };
    let err = sb.exec(&request).expect_err("a 2 MiB argv was accepted");
    assert_eq!((err.status(), err.code()), (Some(400), Some("invalid_request")), "{err:?}");
    let request = ExecRequest { argv: Some(vec!["x".repeat(1000); 2100]), ..ExecRequest::default() };
    let err = sb.exec(&request).expect_err("2100 args of 1000 bytes were accepted");
    assert_eq!((err.status(), err.code()), (Some(400), Some("invalid_request")), "{err:?}");
    assert_answers(&sb);
}

/// A huge environment (one 2 MiB variable; ten of 500 KiB) is refused up front with 400 invalid_request.
#[test]
fn limits_huge_env_is_invalid_request() {
    let server = Server::start();
    let sb = server.sandbox();
    let one: BTreeMap<String, String> = [("BIG".to_string(), "x".repeat(2 << 20))].into();
    let ten: BTreeMap<String, String> = (0..10).map(|i| (format!("BIG{i}"), "x".repeat(500 << 10))).collect();
    for env in [one, ten] {
        let request = ExecRequest { argv: Some(vec!["true".into()]), env, ..ExecRequest::default() };
        match sb.exec(&request) {
            Ok(r) => {
                panic!("a huge env was accepted: status {:?} exit {} stderr {:?}", r.status, r.exit_code, r.stderr)
            }
            Err(err) => assert_eq!((err.status(), err.code()), (Some(400), Some("invalid_request")), "{err:?}"),
        }
    }
    assert_answers(&sb);
}

/// A CPU hog (two busy loops in a `cpu: 1.0` sandbox on this 2-core host) does not starve a neighbour:
/// the median round trip of 20 `true` execs in another sandbox stays under 50 ms.
#[test]
fn limits_cpu_hog_does_not_starve_a_neighbour() {
    let _heavy = Heavy::lock();
    let server = Server::start();
    let hog = server.create(&CreateSandbox { cpu: Some(1.0), ..CreateSandbox::default() });
    let neighbour = server.sandbox();
    let measure = || -> Vec<Duration> {
        let mut times: Vec<Duration> = (0..20)
            .map(|_| {
                let t = Instant::now();
                let r = neighbour.run(&["true"]).expect("exec in the neighbour");
                assert_eq!(r.exit_code, 0, "{r:?}");
                t.elapsed()
            })
            .collect();
        times.sort();
        times
    };
    let baseline = measure();
    let spin = ExecRequest {
        shell: Some("timeout 15 sh -c 'while :; do :; done' & timeout 15 sh -c 'while :; do :; done'; wait".into()),
        timeout_s: Some(30.0),
        ..ExecRequest::default()
    };
    let pid = hog.spawn(&spin).expect("starting the CPU hog");
    std::thread::sleep(Duration::from_millis(1000));
    let loaded = measure();
    hog.kill_process(pid, Some(9)).expect("stopping the hog");
    let (p50, max) = (loaded[loaded.len() / 2], loaded[loaded.len() - 1]);
    println!(
        "neighbour exec round trip: baseline p50 {:?} max {:?}; with the hog p50 {p50:?} max {max:?}",
        baseline[baseline.len() / 2],
        baseline[baseline.len() - 1]
    );
    assert!(
        p50 < Duration::from_millis(50),
        "p50 {p50:?} with the hog (baseline p50 {:?})",
        baseline[baseline.len() / 2]
    );
}

/// A command that runs past its `timeout_s` is killed and reported as `timeout` (exit 124).
#[test]
fn limits_exec_timeout_ends_the_command() {
    let server = Server::start();
    let sb = server.sandbox();
    let started = Instant::now();
    let r = exec(
        &sb,
        ExecRequest { shell: Some("trap '' TERM; sleep 30".into()), timeout_s: Some(1.0), ..ExecRequest::default() },
    );
    assert_eq!((r.status, r.exit_code), (ExitStatus::Timeout, 124), "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    let r = sh(&sb, User::Root, "ps -eo comm= | grep -c '^sleep$'; true");
    assert_lines(&r, &["0"]);
}

/// TCP buffers are charged: 64 loopback connections filled and never read (the kernel lets each grow
/// to ~10 MiB) hold less than the sandbox's memory limit in flight. On cgroup v1 this needs
/// `memory.kmem.tcp.limit_in_bytes`, which the review found unset: a 128 MiB sandbox pinned 2.2 GiB of
/// host kernel memory. The sandbox still answers afterwards.
#[test]
fn limits_unread_tcp_buffers_stay_within_the_memory_limit() {
    let _heavy = Heavy::lock();
    let server = Server::start();
    let sb = server.create(&CreateSandbox { memory_mb: Some(128), ..CreateSandbox::default() });
    let body = r#"
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(128)
clients, servers, sent = [], [], 0
for _ in range(64):
    c = socket.create_connection(l.getsockname()); s, _ = l.accept()
    c.setblocking(False); clients.append(c); servers.append(s)
chunk = b"x" * 65536
deadline = time.time() + 20
for c in clients:
    while time.time() < deadline:
        try:
            sent += c.send(chunk)
        except (BlockingIOError, OSError):
            break
print("in flight MiB:", sent >> 20, flush=True)
print("under the limit:", sent < (128 << 20), flush=True)
"#;
    let r = python(&sb, User::User, body);
    println!("{}", r.stdout.trim());
    assert!(r.stdout.contains("under the limit: True"), "{r:?}");
    assert_eq!(sh(&sb, User::User, "echo alive").stdout, "alive\n");
}

/// Daemon memory held for exec output is bounded and held once. The review's attack: execs with the
/// largest cap (64 MiB per stream) flooding it, whose output the daemon kept about four times over
/// until the sandbox was deleted (four such execs grew its RSS by 1 GiB). Now: fourteen 20 MB floods in
/// a row (280 MB, more than the sandbox's 256 MiB budget, so the oldest finished ones are forgotten to
/// make room) grow the daemon by about one copy of what fits, and a third 64 MiB-cap exec while two
/// still run is refused up front with the budget in the message.
#[test]
fn limits_retained_exec_output_is_bounded_in_the_daemon() {
    let _heavy = Heavy::lock();
    let server = Server::start();
    let sb = server.sandbox();
    let exec = |shell: &str| ExecRequest {
        shell: Some(shell.to_string()),
        background: true,
        max_output_bytes: Some(64 << 20),
        ..ExecRequest::default()
    };
    let rss = || crate::probe::rss_bytes(server.pid());
    let before = rss();
    let mut first = None;
    for _ in 0..14 {
        let pid = sb.spawn(&exec("head -c 20000000 /dev/zero | tr '\\0' a")).unwrap();
        first.get_or_insert(pid);
        while sb.processes().unwrap().iter().any(|p| p.pid == pid && p.running) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let grown = rss().saturating_sub(before);
    println!("daemon RSS grew by {} MiB over 14 floods of 20 MB at a 64 MiB cap", grown >> 20);
    assert!(grown < 400 << 20, "daemon RSS grew by {} MiB", grown >> 20);
    let remembered: Vec<u64> = sb.processes().unwrap().iter().map(|p| p.pid).collect();
    assert!(!remembered.contains(&first.unwrap()), "the oldest flood was not forgotten: {remembered:?}");
    // Each new exec reserves 2 × 64 MiB up front, so 128 MiB stays for finished output: six 20 MB
    // results and the newest.
    assert!(remembered.len() >= 7, "only {} of 14 floods kept", remembered.len());

    // Two running execs reserve the whole budget; a third is refused before it starts.
    let running: Vec<u64> = (0..2).map(|_| sb.spawn(&exec("sleep 300")).unwrap()).collect();
    let err = sb.spawn(&exec("true")).unwrap_err();
    assert_eq!((err.status(), err.code()), (Some(429), Some("limit_reached")), "{err:?}");
    assert!(err.to_string().contains("at most 256 MiB"), "{err}");
    for pid in running {
        sb.kill_process(pid, None).unwrap();
        sb.wait(pid).unwrap();
    }
    // Once they end, there is room again.
    let pid = sb.spawn(&exec("echo room")).unwrap();
    assert_eq!(sb.wait(pid).unwrap().stdout, "room\n");
}

/// A slow reader holds only its own stream: with four 256 MiB downloads that nobody reads, the same
/// sandbox still runs commands at once and serves another download, and the daemon holds at most one
/// send window per stream. Before, the sandbox's single read loop waited on the first full download
/// channel, and every other event of that sandbox (exec output, exits, other transfers) waited too.
/// Closing the readers then frees the supervisor's file-operation slots (an abandoned download is
/// told to stop; it used to be read to its end).
#[test]
fn limits_a_download_nobody_reads_stalls_nothing_else() {
    let _heavy = Heavy::lock();
    let server = Server::start();
    let sb = server.create(&CreateSandbox { disk_mb: Some(1024), ..CreateSandbox::default() });
    let r = sh(&sb, User::User, "head -c 268435456 /dev/zero > /home/user/big && echo ok");
    assert_eq!(r.stdout, "ok\n", "{r:?}");
    let rss = || crate::probe::rss_bytes(server.pid());
    let before = rss();
    let stalled: Vec<_> = (0..4).map(|_| server.unread_download(server.admin_key(), &sb, "/home/user/big")).collect();
    std::thread::sleep(Duration::from_secs(2));
    let t = Instant::now();
    let r = sh(&sb, User::User, "echo still here");
    let exec_ms = t.elapsed().as_millis();
    assert_eq!(r.stdout, "still here\n", "{r:?}");
    assert!(exec_ms < 2000, "an exec took {exec_ms} ms beside unread downloads");
    let t = Instant::now();
    let n = sb.read_file_to("/home/user/big", std::io::sink()).unwrap();
    assert_eq!(n, 256 << 20);
    let grown = rss().saturating_sub(before);
    println!(
        "beside 4 unread downloads: exec {exec_ms} ms, a 256 MiB download {} ms; daemon grew {} MiB",
        t.elapsed().as_millis(),
        grown >> 20
    );
    assert!(grown < 64 << 20, "the daemon buffered {} MiB for readers that do not read", grown >> 20);

    // Twelve more abandoned downloads, then closed: 16 in all, the supervisor's limit of file
    // operations at once. Their readers must stop, or every later file operation is refused as busy.
    let mut more: Vec<_> = (0..12).map(|_| server.unread_download(server.admin_key(), &sb, "/home/user/big")).collect();
    std::thread::sleep(Duration::from_millis(500));
    more.extend(stalled);
    drop(more);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match sb.stat("/home/user/big") {
            Ok(st) => {
                assert_eq!(st.size, 256 << 20);
                break;
            }
            Err(e) if e.status() == Some(429) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100))
            }
            Err(e) => panic!("file operations still refused after the downloads were abandoned: {e:?}"),
        }
    }
}
