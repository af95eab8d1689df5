//! Pid 1 under load and odd inputs: the supervisor must outlive whatever a sandbox (or a client of its
//! preview URL) throws at it, answering each request it cannot serve with an error that says why.
//! Each test names the attack, asserts the exact answer, and checks on the host that pid 1 still runs
//! and the sandbox still answers.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use sandlot_client::api::{CreateSandbox, ExecRequest, ExitStatus, User};
use sandlot_client::{Error, Sandbox};

use crate::common::{alive, expect_error};
use crate::probe::{assert_answers, assert_lines, python, sh, Heavy};
use crate::server::Server;

/// Host pid of the one sandbox's supervisor.
fn supervisor_pid(server: &Server, sb: &Sandbox) -> i32 {
    let sups = server.supervisors();
    let sup = sups
        .iter()
        .find(|s| s.cgroup.contains(&format!("/{}", sb.id())))
        .unwrap_or_else(|| panic!("no supervisor for {}: {sups:?}", sb.id()));
    sup.pid
}

/// Runs `f` on a thread and returns its answer, failing the test when none comes within `limit` (the
/// attack being a hang, the unfixed supervisor never answers).
#[track_caller]
fn within<T: Send + 'static>(limit: Duration, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).unwrap_or_else(|_| panic!("{what}: no answer within {limit:?}"))
}

/// Asserts pid 1 (host pid `pid`) runs and the sandbox still runs commands.
#[track_caller]
fn assert_pid1_lives(pid: i32, sb: &Sandbox) {
    assert!(alive(pid), "the supervisor (host pid {pid}) died");
    assert_answers(sb);
    assert!(alive(pid), "the supervisor (host pid {pid}) died");
}

/// 150 concurrent preview requests to a server that accepts and never answers (under `pids: 64`, so
/// one thread per direction per connection would exhaust the sandbox's pids): the supervisor holds 64
/// connections (its cap), refuses the other 86 at once with 429 `limit_reached` naming the limit, and
/// stays alive; the sandbox still runs commands.
#[test]
fn pid1_survives_150_slow_preview_connections() {
    let _heavy = Heavy::lock();
    let server = Server::start();
    let sb = server.create(&CreateSandbox { pids: Some(64), ..CreateSandbox::default() });
    let pid = supervisor_pid(&server, &sb);
    let hold = r#"
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8000)); s.listen(1024)
held = []
while True:
    c, _ = s.accept(); held.append(c)
"#;
    sb.write_file("/home/user/hold.py", hold.as_bytes()).unwrap();
    sb.spawn(&ExecRequest { shell: Some("exec python3 /home/user/hold.py".into()), ..ExecRequest::default() }).unwrap();
    let port = sb.expose_port(8000).unwrap();
    let (host, path) = crate::probe::preview(&port.url);
    // Wait for the listener: until then a preview request is a 502.
    let listening = (0..100).any(|_| {
        if sh(&sb, User::User, "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8000))'").exit_code
            == 0
        {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
        false
    });
    assert!(listening, "the holding server did not start");
    let started = Instant::now();
    let answers: Vec<_> = (0..150)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
            write!(s, "GET /{path} HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
            std::thread::spawn(move || {
                s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
                let mut buf = [0u8; 4096];
                let mut got = Vec::new();
                // A 429 is short; read until the body's end or the timeout (a held request never answers).
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                    if got.windows(2).any(|w| w == b"}}") {
                        break;
                    }
                }
                (String::from_utf8_lossy(&got).into_owned(), started.elapsed(), s)
            })
        })
        .collect();
    let answers: Vec<_> = answers.into_iter().map(|t| t.join().unwrap()).collect();
    let refused: Vec<_> = answers.iter().filter(|(a, _, _)| a.starts_with("HTTP/1.1 429")).collect();
    let unanswered = answers.iter().filter(|(a, _, _)| a.is_empty()).count();
    // Counted by status line and body, so a failure shows what came back instead of 150 copies.
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    for (a, _, _) in &answers {
        let kind = format!("{} {}", a.lines().next().unwrap_or("(no answer)"), a.rsplit("\r\n").next().unwrap_or(""));
        *kinds.entry(kind).or_default() += 1;
    }
    assert_eq!((refused.len(), unanswered), (86, 64), "answers by kind: {kinds:#?}");
    for (a, t, _) in &refused {
        assert!(a.contains("limit_reached") && a.contains("64 inbound connections"), "{a}");
        assert!(*t < Duration::from_secs(10), "a refusal took {t:?}");
    }
    eprintln!("86 refusals, the last after {:?}", refused.iter().map(|r| r.1).max().unwrap());
    assert_pid1_lives(pid, &sb);
}

/// A FIFO as a download target (it would block the reading thread until a writer comes, forever): the
/// download is refused at once as 409 `wrong_file_kind`, and 40 of them in a row cost pid 1 nothing.
#[test]
fn pid1_fifo_download_is_refused_quickly() {
    let server = Server::start();
    let sb = server.sandbox();
    let pid = supervisor_pid(&server, &sb);
    assert_lines(&sh(&sb, User::User, "mkfifo /home/user/fifo && echo made"), &["made"]);
    let started = Instant::now();
    for _ in 0..40 {
        let sb = sb.clone();
        let r = within(Duration::from_secs(10), "downloading a FIFO", move || sb.read_file("/home/user/fifo"));
        let e = expect_error(r, 409, "wrong_file_kind");
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }
    assert!(started.elapsed() < Duration::from_secs(10), "40 refusals took {:?}", started.elapsed());
    assert_pid1_lives(pid, &sb);
}

/// A 15,000-deep directory tree (a recursive remove that recurses overflows pid 1's stack; 14,000
/// levels already did): the recursive remove succeeds, the tree is gone, a symlink at its bottom was
/// not followed, pid 1 lives.
#[test]
fn pid1_recursive_remove_of_a_15000_deep_tree() {
    let server = Server::start();
    let sb = server.sandbox();
    let pid = supervisor_pid(&server, &sb);
    // Built as 15 chains of 1,000 levels nested by rename: each path operation under Landlock costs
    // O(depth), so building level by level would take minutes.
    let deep = r#"
os.makedirs("/tmp/build"); top = os.open("/tmp/build", os.O_RDONLY)
bottoms = []
for k in range(15):
    os.chdir("/tmp/build"); os.mkdir("c%d" % k); os.chdir("c%d" % k)
    for i in range(999):
        os.mkdir("d"); os.chdir("d")
    bottoms.append(os.open(".", os.O_RDONLY))
os.chdir("/")
for k in range(1, 15):
    os.rename("c%d" % k, "d", src_dir_fd=top, dst_dir_fd=bottoms[k - 1])
os.rename("/tmp/build/c0", "/tmp/deep")
os.close(os.open("leaf", os.O_CREAT | os.O_WRONLY, dir_fd=bottoms[-1]))
os.symlink("/home/user", "up", dir_fd=bottoms[-1])
print("built")
"#;
    assert_lines(&python(&sb, User::User, deep), &["built"]);
    // A file beside the tree, reached by the symlink at its bottom: a remove that follows it would
    // delete it.
    sb.write_file("/home/user/keep", b"kept").unwrap();
    let sb2 = sb.clone();
    let started = Instant::now();
    within(Duration::from_secs(120), "removing the deep tree", move || sb2.remove("/tmp/deep", true))
        .expect("recursive remove of the deep tree");
    eprintln!("removed 15,000 levels in {:?}", started.elapsed());
    expect_error(sb.stat("/tmp/deep"), 404, "file_not_found");
    assert_eq!(sb.read_file("/home/user/keep").unwrap(), b"kept");
    assert_pid1_lives(pid, &sb);
}

fn vm_rss_kib(pid: i32) -> u64 {
    crate::probe::rss_bytes(pid) >> 10
}

/// 2 GiB written to the stdin of a process that never reads it (pid 1 used to queue it all until the
/// OOM killer came): pid 1's memory stays bounded, a later write is refused with 409 saying why, and
/// pid 1 lives.
#[test]
fn pid1_2_gib_of_unread_stdin_is_bounded() {
    let _heavy = Heavy::lock();
    let server = Server::start();
    let sb = server.sandbox();
    let pid = supervisor_pid(&server, &sb);
    let sleeper = sb.spawn(&ExecRequest { shell: Some("exec sleep 600".into()), ..ExecRequest::default() }).unwrap();
    let chunk = "x".repeat(8 << 20);
    let before = vm_rss_kib(pid);
    let mut refused = None;
    let mut peak = before;
    for i in 0..256 {
        match sb.write_stdin(sleeper, &chunk, false) {
            Ok(()) => {}
            Err(e) => {
                refused = Some((i, e));
                break;
            }
        }
        peak = peak.max(vm_rss_kib(pid));
        // The 16 MiB queue plus pid 1's ~10 MiB of its own, with room to spare.
        assert!(peak < 48 << 10, "pid 1's RSS grew to {peak} KiB after {} MiB of stdin", (i + 1) * 8);
    }
    let (at, e): (usize, Error) = refused.expect("2 GiB of unread stdin were all accepted");
    assert_eq!((e.status(), e.code()), (Some(409), Some("conflict")), "{e:?}");
    assert!(e.to_string().contains("did not read its standard input"), "{e}");
    assert!(at <= 4, "refused only after {} MiB", at * 8);
    eprintln!("pid 1 RSS {before} KiB before, peak {peak} KiB; refused at write {at}");
    assert_pid1_lives(pid, &sb);
    sb.kill_process(sleeper, None).unwrap();
}

/// PTRACE_TRACEME then SIGSTOP to itself (pid 1 becomes the tracer and sees a stop): the process is
/// still running, not "exited 19"; killed, it ends as signaled 9.
#[test]
fn pid1_ptrace_self_stop_is_not_reported_as_exited() {
    let server = Server::start();
    let sb = server.sandbox();
    let body = "libc.ptrace(0, 0, 0, 0)\nprint('traced', flush=True)\nos.kill(os.getpid(), 19)\ntime.sleep(600)\n";
    let script = format!("{}\n{body}", crate::probe::PRELUDE);
    let p = sb
        .spawn(&ExecRequest { argv: Some(vec!["python3".into(), "-c".into(), script]), ..ExecRequest::default() })
        .unwrap();
    // Give the stop time to reach pid 1, then look.
    let deadline = Instant::now() + Duration::from_secs(10);
    let stopped = loop {
        let state = sh(&sb, User::User, "cat /proc/[0-9]*/stat 2>/dev/null | grep '(python3)' | cut -d' ' -f3").stdout;
        if state.starts_with('t') || state.starts_with('T') || Instant::now() > deadline {
            break state;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(stopped.starts_with('t') || stopped.starts_with('T'), "the process never stopped: {stopped:?}");
    std::thread::sleep(Duration::from_millis(300));
    let info = sb.processes().unwrap().into_iter().find(|i| i.pid == p).expect("the process is listed");
    assert_eq!((info.running, info.status), (true, None), "a stopped process was reported as ended: {info:?}");
    sb.kill_process(p, Some(9)).unwrap();
    let r = sb.wait(p).unwrap();
    assert_eq!((r.status, r.signal), (ExitStatus::Signaled, Some(9)), "{r:?}");
}

/// /proc/self/pagemap is a "regular file" that never ends (pid 1 would stream it forever, burning CPU):
/// the download is refused at once with 403 `permission_denied` naming /proc, as is every /proc file
/// (the sandbox has no /sys; the same check covers it).
#[test]
fn pid1_proc_pagemap_download_is_refused() {
    let server = Server::start();
    let sb = server.sandbox();
    let pid = supervisor_pid(&server, &sb);
    // /proc/1/fd/3 is pid 1's control socket: its open fails (ENXIO), and is refused the same way.
    for path in ["/proc/self/pagemap", "/proc/self/status", "/proc/1/fd/3"] {
        let root = sb.as_user(User::Root);
        let r = within(Duration::from_secs(10), path, move || root.read_file(path));
        let e = expect_error(r, 403, "permission_denied");
        assert!(e.to_string().contains("/proc or /sys"), "{path}: {e}");
    }
    assert_pid1_lives(pid, &sb);
}

/// A symlink planted by sandbox code to pid 1's own environment (/tmp/x -> /proc/1/environ), read
/// through the file API as root: refused with 403 (the check is on the opened file, not the path). Where
/// pid 1's descriptor 3 (its control socket) leads stays hidden from the file API as from a root
/// command, and so does where a `user` process's descriptors lead (the operation has a root command's
/// capabilities: no CAP_SYS_PTRACE).
#[test]
fn pid1_symlink_to_proc_1_environ_is_refused() {
    let server = Server::start();
    let sb = server.sandbox();
    let root = sb.as_user(User::Root);
    assert_lines(&sh(&sb, User::Root, "ln -s /proc/1/environ /tmp/x && echo planted"), &["planted"]);
    for path in ["/tmp/x", "/proc/1/environ"] {
        let e = expect_error(root.read_file(path), 403, "permission_denied");
        assert!(e.to_string().contains("/proc or /sys"), "{path}: {e}");
    }
    // Where pid 1's descriptor 3 (its control socket) leads is ptrace-guarded: a root command cannot
    // read it, and neither can a root file operation (stat leaves the link target out).
    let cmd = sh(&sb, User::Root, "readlink /proc/1/fd/3 || echo denied");
    assert_lines(&cmd, &["denied"]);
    let stat = root.stat("/proc/1/fd/3").expect("stat of pid 1's descriptor");
    assert_eq!(stat.link_target, None, "the file API read where pid 1's control socket leads: {stat:?}");
    let p = sb.spawn(&ExecRequest { shell: Some("exec sleep 600".into()), ..ExecRequest::default() }).unwrap();
    // The spawned shell execs sleep a moment after the spawn answers: wait for it to be there.
    let find = "until p=$(cat /proc/[0-9]*/stat 2>/dev/null | grep '(sleep)' | cut -d' ' -f1) && [ -n \"$p\" ]; \
                do sleep 0.05; done; echo $p";
    let pid = sh(&sb, User::User, find).stdout;
    let link = format!("/proc/{}/fd/1", pid.trim());
    let stat = root.stat(&link).unwrap_or_else(|e| panic!("{link}: {e}"));
    assert_eq!(stat.link_target, None, "the file API read where a user process's stdout leads: {stat:?}");
    sb.kill_process(p, None).unwrap();
}

/// A tar upload with a GNU sparse entry whose real size (1 GiB) is past the sandbox's largest file
/// (`disk_mb: 16`, the commands' RLIMIT_FSIZE) is refused with 413 and leaves no file.
#[test]
fn pid1_sparse_tar_entry_past_the_file_size_limit_is_refused() {
    let server = Server::start();
    let sb = server.create(&CreateSandbox { disk_mb: Some(16), ..CreateSandbox::default() });
    let octal = |field: &mut [u8], v: u64| {
        let s = format!("{v:0width$o}\0", width = field.len() - 1);
        field.copy_from_slice(s.as_bytes());
    };
    let mut header = tar::Header::new_gnu();
    header.set_path("sparse.bin").unwrap();
    header.set_mode(0o644);
    header.set_entry_type(tar::EntryType::GNUSparse);
    header.set_size(512);
    let gnu = header.as_gnu_mut().unwrap();
    octal(&mut gnu.sparse[0].offset, (1 << 30) - 512);
    octal(&mut gnu.sparse[0].numbytes, 512);
    octal(&mut gnu.realsize, 1 << 30);
    header.set_cksum();
    let mut builder = tar::Builder::new(Vec::new());
    builder.append(&header, &[b'x'; 512][..]).unwrap();
    let archive = builder.into_inner().unwrap();
    let e = expect_error(sb.upload_tar("/tmp/sp", &archive[..]), 413, "too_large");
    assert!(e.to_string().contains("largest file"), "{e}");
    expect_error(sb.stat("/tmp/sp/sparse.bin"), 404, "file_not_found");
}

/// 20 uploads held open at once by clients that trickle their bodies (each holds a thread of pid 1 for
/// as long as its client likes): 16 run (the per-sandbox cap) and write their files, the other 4 are
/// refused with 429 `limit_reached` naming the limit (after their bodies, which the server drains so
/// the client reads the error), and pid 1 lives.
#[test]
fn pid1_file_operations_beyond_16_are_refused() {
    let server = Server::start();
    let sb = server.sandbox();
    let pid = supervisor_pid(&server, &sb);
    let key = std::fs::read_to_string(server.state_dir().join("admin.key")).unwrap().trim().to_string();
    let port = server.port();
    let uploads: Vec<_> = (0..20)
        .map(|i| {
            let head = format!(
                "PUT /v1/sandboxes/{}/files?path=/tmp/held{i} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\
                 Content-Type: application/octet-stream\r\nContent-Length: 32\r\n\r\n",
                sb.id()
            );
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
                s.write_all(head.as_bytes()).unwrap();
                // One byte every 250 ms: every upload stays open for 8 s.
                for _ in 0..32 {
                    std::thread::sleep(Duration::from_millis(250));
                    s.write_all(b"x").unwrap();
                }
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                while !(got.windows(4).any(|w| w == b"\r\n\r\n") && got.ends_with(b"}")) {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                String::from_utf8_lossy(&got).into_owned()
            })
        })
        .collect();
    let answers: Vec<_> = uploads.into_iter().map(|t| t.join().unwrap()).collect();
    let firsts: Vec<_> = answers.iter().map(|a| a.lines().next().unwrap_or("(none)").to_string()).collect();
    let refused: Vec<_> = answers.iter().filter(|a| a.starts_with("HTTP/1.1 429")).collect();
    let written = answers.iter().filter(|a| a.starts_with("HTTP/1.1 2")).count();
    assert_eq!((refused.len(), written), (4, 16), "{firsts:?}");
    for a in &refused {
        assert!(a.contains("limit_reached") && a.contains("16 file operations"), "{a}");
    }
    assert_pid1_lives(pid, &sb);
    // The slots are free again.
    sb.write_file("/tmp/after", b"ok").unwrap();
    assert_eq!(sb.read_file("/tmp/after").unwrap(), b"ok");
}

/// A preview client uploading 128 MiB to a sandbox server that never reads (pid 1 used to queue it all
/// for the server): the client is pushed back (its writes stall) and pid 1's memory grows by less than
/// 16 MiB.
#[test]
fn pid1_preview_upload_to_a_server_that_never_reads_is_pushed_back() {
    let _heavy = Heavy::lock();
    let server = Server::start();
    let sb = server.sandbox();
    let pid = supervisor_pid(&server, &sb);
    let hold = "import socket, time\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
                s.bind(('127.0.0.1', 8000)); s.listen(8)\nc, _ = s.accept()\ntime.sleep(600)\n";
    sb.write_file("/home/user/hold.py", hold.as_bytes()).unwrap();
    sb.spawn(&ExecRequest { shell: Some("exec python3 /home/user/hold.py".into()), ..ExecRequest::default() }).unwrap();
    let port = sb.expose_port(8000).unwrap();
    let (host, path) = crate::probe::preview(&port.url);
    let deadline = Instant::now() + Duration::from_secs(10);
    while sh(&sb, User::User, "grep -q ':1F40 ' /proc/net/tcp && echo up").stdout != "up\n" {
        assert!(Instant::now() < deadline, "the server did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    let before = vm_rss_kib(pid);
    let mut s = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    write!(s, "POST /{path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\n\r\n", 256u64 << 20).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(3))).unwrap();
    let chunk = vec![b'x'; 1 << 20];
    let mut sent = 0usize;
    while sent < 128 << 20 {
        match s.write(&chunk) {
            Ok(n) => sent += n,
            Err(_) => break,
        }
    }
    let grown = vm_rss_kib(pid).saturating_sub(before);
    eprintln!("client sent {} MiB before it stalled; pid 1 grew by {grown} KiB", sent >> 20);
    assert!(sent < 128 << 20, "the client was never pushed back: {} MiB accepted", sent >> 20);
    assert!(grown < 16 << 10, "pid 1 grew by {grown} KiB for a server that never reads");
    drop(s);
    assert_pid1_lives(pid, &sb);
}

/// A full command leaf (a fork bomb holds all of `pids: 64`) and then a burst of 60 background execs,
/// each costing pid 1 a fork and three threads: every exec is answered, started or failed with a
/// message naming the process limit, and pid 1 lives (it used to panic when a thread could not start).
#[test]
fn pid1_survives_a_burst_of_execs_into_a_full_command_leaf() {
    let _heavy = Heavy::lock();
    let server = Server::start();
    let sb = server.create(&CreateSandbox { pids: Some(64), ..CreateSandbox::default() });
    let pid = supervisor_pid(&server, &sb);
    let bomb = r#"
import os, time
n = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(600)
            os._exit(0)
        n += 1
except OSError:
    pass
open("/tmp/full", "w").write(str(n))
time.sleep(600)
"#;
    sb.write_file("/home/user/bomb.py", bomb.as_bytes()).unwrap();
    let bomber = sb
        .spawn(&ExecRequest {
            argv: Some(vec!["python3".into(), "/home/user/bomb.py".into()]),
            ..ExecRequest::default()
        })
        .unwrap();
    // The bomb writes /tmp/full once a fork has failed.
    let deadline = Instant::now() + Duration::from_secs(20);
    while sb.read_file("/tmp/full").is_err() {
        assert!(Instant::now() < deadline, "the bomb did not fill the leaf");
        std::thread::sleep(Duration::from_millis(100));
    }
    let burst: Vec<_> = (0..60)
        .map(|_| {
            let sb = sb.clone();
            std::thread::spawn(move || {
                let p = sb.spawn(&ExecRequest { shell: Some("exec sleep 30".into()), ..ExecRequest::default() })?;
                Ok::<_, Error>((p, sb.processes()?.into_iter().find(|i| i.pid == p)))
            })
        })
        .collect();
    let mut started = 0;
    let mut failed = Vec::new();
    for t in burst {
        let (p, info) = t.join().unwrap().expect("the API answered the exec");
        let info = info.expect("listed");
        if info.running {
            started += 1;
        } else {
            let r = sb.wait(p).unwrap();
            failed.push((r.exit_code, r.stderr));
        }
    }
    eprintln!("{started} execs started, {} refused", failed.len());
    assert!(!failed.is_empty(), "no exec hit the limit: the test did not fill the sandbox");
    for (code, stderr) in &failed {
        assert!(*code == 126 && stderr.contains("process limit"), "exit {code}: {stderr}");
    }
    assert!(alive(pid), "the supervisor (host pid {pid}) died");
    sb.kill_process(bomber, Some(9)).unwrap();
    sb.wait(bomber).unwrap();
    // The bomb's children die with its process group; until the kernel has reaped them the leaf is
    // still full, so the sandbox may take a moment to have room for another command.
    let deadline = Instant::now() + Duration::from_secs(10);
    while sh(&sb, User::User, "echo alive").stdout != "alive\n" {
        assert!(Instant::now() < deadline, "the sandbox found no room for a command after the bomb ended");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_pid1_lives(pid, &sb);
}

/// Stdin written to a process that closed its own (pid 1 would keep counting it, and the sandbox-wide
/// budget would then refuse every other process's input): 32 MiB to the closed stdin are dropped as a
/// pipe would drop them, and a process that reads still gets 16 MiB.
#[test]
fn pid1_stdin_of_a_process_that_closed_it_does_not_starve_the_others() {
    let server = Server::start();
    let sb = server.sandbox();
    let closed =
        sb.spawn(&ExecRequest { shell: Some("exec 0<&-; exec sleep 600".into()), ..ExecRequest::default() }).unwrap();
    let chunk = "x".repeat(8 << 20);
    std::thread::sleep(Duration::from_millis(300));
    for i in 0..4 {
        sb.write_stdin(closed, &chunk, false).unwrap_or_else(|e| panic!("write {i} to the closed stdin: {e}"));
    }
    let reader = sb.spawn(&ExecRequest { shell: Some("exec wc -c".into()), ..ExecRequest::default() }).unwrap();
    sb.write_stdin(reader, &chunk, false).unwrap();
    sb.write_stdin(reader, &chunk, true).unwrap();
    let r = sb.wait(reader).unwrap();
    assert_eq!((r.exit_code, r.stdout.trim()), (0, "16777216"), "{r:?}");
    sb.kill_process(closed, None).unwrap();
}
