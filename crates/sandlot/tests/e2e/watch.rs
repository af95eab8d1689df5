//! Directory watches: each kind of change, recursion, overflow reported rather than lost, and the
//! errors of a watch on a file, a missing path or a directory the user may not read.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use sandlot_client::api::{WatchEvent, WatchKind};
use sandlot_client::WatchEvents;

use crate::harness::{eventually, expect_error, sh_ok, Server};

/// Reads `events` on a thread of its own, so a test can wait for one with a deadline.
fn reader(events: WatchEvents) -> mpsc::Receiver<WatchEvent> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for ev in events {
            if tx.send(ev.expect("a watch event")).is_err() {
                return;
            }
        }
    });
    rx
}

/// Events from `rx` up to and including the first that `last` matches; panics after 20 s.
#[track_caller]
fn until(rx: &mpsc::Receiver<WatchEvent>, last: impl Fn(&WatchEvent) -> bool) -> Vec<WatchEvent> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(ev) => {
                let done = last(&ev);
                seen.push(ev);
                if done {
                    return seen;
                }
            }
            Err(e) => panic!("the awaited event did not come ({e}); {} seen, the last: {:?}", seen.len(), seen.last()),
        }
    }
}

fn ev(kind: WatchKind, path: &str) -> WatchEvent {
    WatchEvent { kind, path: path.into() }
}

/// A recursive watch reports create, write (a finished write), rename from/to, chmod and remove with
/// sandbox paths, in a subdirectory created after the watch began too; a plain watch sees only its own
/// directory's entries.
#[test]
fn a_watch_reports_each_kind_of_change() {
    let server = Server::start();
    let sb = server.sandbox();
    sh_ok(&sb, "mkdir /tmp/w");
    let deep = reader(sb.watch("/tmp/w", true).unwrap());
    let flat = reader(sb.watch("/tmp/w", false).unwrap());
    sh_ok(&sb, "cd /tmp/w && echo hi > a && mv a b && chmod 600 b && mkdir sub && sleep 0.3 && echo x > sub/c && rm b");
    let seen = until(&deep, |e| *e == ev(WatchKind::Remove, "/tmp/w/b"));
    let want = [
        ev(WatchKind::Create, "/tmp/w/a"),
        ev(WatchKind::Write, "/tmp/w/a"),
        ev(WatchKind::RenameFrom, "/tmp/w/a"),
        ev(WatchKind::RenameTo, "/tmp/w/b"),
        ev(WatchKind::Chmod, "/tmp/w/b"),
        ev(WatchKind::Create, "/tmp/w/sub"),
        ev(WatchKind::Create, "/tmp/w/sub/c"),
        ev(WatchKind::Write, "/tmp/w/sub/c"),
        ev(WatchKind::Remove, "/tmp/w/b"),
    ];
    assert_eq!(seen, want);
    let seen = until(&flat, |e| *e == ev(WatchKind::Remove, "/tmp/w/b"));
    assert!(seen.contains(&ev(WatchKind::Create, "/tmp/w/sub")), "{seen:?}");
    assert!(seen.iter().all(|e| !e.path.starts_with("/tmp/w/sub/")), "a plain watch saw below itself: {seen:?}");
    // Removing the watched directory ends its streams.
    sh_ok(&sb, "rm -r /tmp/w");
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        match deep.recv_timeout(Duration::from_millis(100)) {
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            _ => continue,
        }
    }
    assert!(Instant::now() < deadline, "the watch of a removed directory did not end");
    sb.delete().unwrap();
}

/// A reader that does not keep up gets an `overflow` event where events were dropped, then the
/// events after it; nothing is lost silently. The reader is a raw connection with a small receive
/// buffer (the SDK's would let the kernel buffer tens of MiB on loopback) that reads nothing while
/// 30 000 files are created (about 16 MiB of events).
#[test]
fn a_reader_that_falls_behind_gets_an_overflow_event() {
    use nix::sys::socket::{connect, setsockopt, socket, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn};
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;

    let server = Server::start();
    let sb = server.sandbox();
    sh_ok(&sb, "mkdir /tmp/flood");
    let fd = socket(AddressFamily::Inet, SockType::Stream, SockFlag::SOCK_CLOEXEC, None).unwrap();
    // Small, but over loopback's 64 KiB MSS: a window under one segment would stall on the
    // sender's persist timer instead of reopening as the test reads.
    setsockopt(&fd, sockopt::RcvBuf, &(256 << 10)).unwrap();
    connect(fd.as_raw_fd(), &SockaddrIn::new(127, 0, 0, 1, server.port())).unwrap();
    let mut conn = std::net::TcpStream::from(fd);
    let request = format!(
        "GET /v1/sandboxes/{}/files/watch?path=/tmp/flood HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\r\n",
        sb.id(),
        server.admin_key()
    );
    conn.write_all(request.as_bytes()).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    // The answer's head says the watch is in place.
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = conn.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed before the answer's head");
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&got));
    sh_ok(&sb, &format!("cd /tmp/flood && seq -f '%.0f{}' 1 30000 | xargs touch", "f".repeat(100)));
    // Take what the flood left queued (until nothing comes for 2 s), then make one more change.
    conn.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    loop {
        match conn.read(&mut buf) {
            Ok(0) => panic!("the stream ended during the flood"),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => break,
            Err(e) => panic!("reading the watch stream: {e}"),
        }
    }
    conn.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    sh_ok(&sb, "touch /tmp/flood/last");
    let marker = b"\"path\":\"/tmp/flood/last\"";
    while !got.windows(marker.len()).any(|w| w == marker) {
        let n = conn.read(&mut buf).unwrap();
        assert!(n > 0, "the stream ended before the last file's event");
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    let overflow = text.find("\"type\":\"overflow\",\"path\":\"/tmp/flood\"").expect("no overflow event");
    assert!(overflow < text.find("/tmp/flood/last").unwrap(), "the overflow came after the last event");
    let creates = text.matches("\"type\":\"create\"").count();
    assert!(creates < 30_001, "{creates} creates: nothing was dropped, so the test proved nothing");
    drop(conn);
    sb.delete().unwrap();
}

/// A watch on a file is a 400, on a missing path a 404, on a directory the user may not read a 403;
/// the watch as root of that directory works; a ninth watch at once is a 429, and the slots come back
/// when the clients leave.
#[test]
fn a_watch_needs_a_directory_the_user_may_read() {
    let server = Server::start();
    let sb = server.sandbox();
    sh_ok(&sb, "echo x > /tmp/file");
    let err = expect_error(sb.watch("/tmp/file", false), 400, "invalid_request");
    assert!(err.to_string().contains("not a directory"), "{err}");
    expect_error(sb.watch("/tmp/missing", true), 404, "file_not_found");
    expect_error(sb.watch("/root", false), 403, "permission_denied");
    let root = sb.as_user(sandlot_client::api::User::Root);
    drop(root.watch("/root", false).unwrap());
    // The slot of the watch just dropped comes back within the supervisor's poll interval.
    let open = || {
        let mut w = None;
        assert!(eventually(Duration::from_secs(5), || {
            w = sb.watch("/tmp", false).ok();
            w.is_some()
        }));
        w.unwrap()
    };
    let held: Vec<WatchEvents> = (0..8).map(|_| open()).collect();
    expect_error(sb.watch("/tmp", false), 429, "limit_reached");
    drop(held);
    assert!(eventually(Duration::from_secs(5), || sb.watch("/tmp", false).is_ok()), "the slots were not given back");
    sb.delete().unwrap();
}

/// A subdirectory renamed within a recursive watch keeps being watched under its new name; one moved
/// out of the tree is no longer reported.
#[test]
fn a_renamed_subdirectory_is_watched_under_its_new_path() {
    let server = Server::start();
    let sb = server.sandbox();
    sh_ok(&sb, "mkdir -p /tmp/w/sub /tmp/outside");
    let rx = reader(sb.watch("/tmp/w", true).unwrap());
    sh_ok(&sb, "cd /tmp/w && mv sub sub2 && echo y > sub2/d && mv sub2 /tmp/outside/ && echo z > /tmp/outside/sub2/e && touch end");
    let seen = until(&rx, |e| *e == ev(WatchKind::Create, "/tmp/w/end"));
    let want = [
        ev(WatchKind::RenameFrom, "/tmp/w/sub"),
        ev(WatchKind::RenameTo, "/tmp/w/sub2"),
        ev(WatchKind::Create, "/tmp/w/sub2/d"),
        ev(WatchKind::Write, "/tmp/w/sub2/d"),
        ev(WatchKind::RenameFrom, "/tmp/w/sub2"),
        ev(WatchKind::Create, "/tmp/w/end"),
    ];
    assert_eq!(seen, want);
    sb.delete().unwrap();
}

/// A watch outlives a pause: its thread in pid 1 is frozen with the sandbox, the stream stays open,
/// and what changes after the resume is reported on the same stream. A stop ends the stream (pid 1
/// is gone) rather than leaving it open and silent.
#[test]
fn a_watch_survives_a_pause_and_ends_with_a_stop() {
    let server = Server::start();
    let sb = server.sandbox();
    sh_ok(&sb, "mkdir /tmp/w");
    let rx = reader(sb.watch("/tmp/w", true).unwrap());
    sh_ok(&sb, "touch /tmp/w/before");
    until(&rx, |e| *e == ev(WatchKind::Create, "/tmp/w/before"));
    sb.pause().unwrap();
    // Paused for longer than the watch thread's poll interval and the stream's keepalive.
    std::thread::sleep(Duration::from_secs(2));
    sb.resume().unwrap();
    sh_ok(&sb, "mkdir /tmp/w/sub && sleep 0.3 && echo x > /tmp/w/sub/after");
    let seen = until(&rx, |e| *e == ev(WatchKind::Write, "/tmp/w/sub/after"));
    assert!(seen.contains(&ev(WatchKind::Create, "/tmp/w/sub")), "{seen:?}");
    sb.stop().unwrap();
    // The reader thread's channel closes when the stream ends.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(_) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => panic!("the watch stream stayed open after a stop"),
        }
    }
    sb.delete().unwrap();
}

/// A client that takes nothing from its watch while events wait (the review's attack: unread watches
/// of many sandboxes pinned daemon memory) loses the stream and the watch after 30 s: the sandbox's
/// eight watch places are all free again.
#[test]
fn an_unread_watch_is_dropped_and_gives_its_place_back() {
    let server = Server::start();
    let sb = server.sandbox();
    sh_ok(&sb, "mkdir /tmp/w");
    let unread = sb.watch("/tmp/w", false).unwrap();
    // Long names fill the connection's socket buffers (a few MiB on loopback) quickly: 60,000
    // creates and removes of 200-byte names are ~30 MiB of lines.
    let churn = "import os\nn='/tmp/w/'+'x'*200\nfor i in range(30000):\n open(n,'w').close(); os.unlink(n)\n";
    sb.write_file("/tmp/churn.py", churn.as_bytes()).unwrap();
    sh_ok(&sb, "python3 /tmp/churn.py");
    // Held while its stream waits: seven more fit, an eighth does not.
    let mut opened: Vec<_> = (0..7).map(|_| sb.watch("/tmp/w", false).unwrap()).collect();
    expect_error(sb.watch("/tmp/w", false), 429, "limit_reached");
    let t = Instant::now();
    let freed = loop {
        if let Ok(w) = sb.watch("/tmp/w", false) {
            opened.push(w);
            break true;
        }
        if t.elapsed() > Duration::from_secs(90) {
            break false;
        }
        std::thread::sleep(Duration::from_secs(1));
    };
    assert!(freed, "the unread watch still holds its place after 90 s");
    drop(unread);
}
