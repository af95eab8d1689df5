//! Processes on a pseudo-terminal, stdin kept open or closed at start, and tags.

use std::time::Duration;

use sandlot_client::api::{ExecEvent, ExecRequest, ExitStatus, PtySize};

use crate::harness::{argv, expect_error, sh, Server};

fn on_pty(command: &str, rows: u16, cols: u16) -> ExecRequest {
    ExecRequest { pty: Some(PtySize { rows, cols }), ..sh(command) }
}

/// Reads process `pid`'s stdout from its log stream until it contains `want`; the text read so far.
#[track_caller]
fn stdout_until(sb: &sandlot_client::Sandbox, pid: u64, want: &str) -> String {
    let mut text = String::new();
    for ev in sb.logs(pid).unwrap() {
        match ev.unwrap() {
            ExecEvent::Stdout { data } => text.push_str(&data),
            ExecEvent::Exited { .. } => break,
            _ => {}
        }
        if text.contains(want) {
            return text;
        }
    }
    panic!("the process ended without printing {want:?}; its output: {text:?}");
}

/// A pty process sees a terminal of the size asked for (`stty size`), named /dev/pts/N (`tty`), with
/// TERM set; what stdin sends is echoed by the terminal and read by the process; all output is
/// stdout, with the terminal's `\r\n`.
#[test]
fn a_pty_process_has_a_terminal_of_its_size_that_echoes_input() {
    let server = Server::start();
    let sb = server.sandbox();
    let pid = sb.spawn(&on_pty("stty size; tty; echo \"term=$TERM\"; read line; echo \"got:$line\"", 30, 100)).unwrap();
    let info = sb.processes().unwrap().into_iter().find(|p| p.pid == pid).unwrap();
    assert!(info.pty, "{info:?}");
    stdout_until(&sb, pid, "term=");
    sb.write_stdin(pid, "hello\n", false).unwrap();
    let r = sb.wait(pid).unwrap();
    assert_eq!((r.status, r.exit_code), (ExitStatus::Exited, 0), "{r:?}");
    let lines: Vec<&str> = r.stdout.split("\r\n").collect();
    assert_eq!(lines[0], "30 100", "{r:?}");
    assert!(lines[1].starts_with("/dev/pts/") && lines[1]["/dev/pts/".len()..].parse::<u32>().is_ok(), "{r:?}");
    assert_eq!(lines[2], "term=xterm-256color", "{r:?}");
    assert_eq!(&lines[3..], ["hello", "got:hello", ""], "the input is echoed, then read: {r:?}");
    assert_eq!((r.stderr.as_str(), r.stderr_bytes), ("", 0), "{r:?}");
    sb.delete().unwrap();
}

/// A resize is seen by the process (`stty size` after it), a TERM of the request wins, a foreground
/// pty exec works too, and a resize of a process without a terminal, or to a size out of range, is 400.
#[test]
fn a_resize_reaches_the_terminal_and_only_a_pty_process_can_be_resized() {
    let server = Server::start();
    let sb = server.sandbox();
    let pid = sb.spawn(&on_pty("stty size; read x; stty size", 24, 80)).unwrap();
    stdout_until(&sb, pid, "24 80\r\n");
    sb.resize(pid, 50, 132).unwrap();
    sb.write_stdin(pid, "\n", false).unwrap();
    let r = sb.wait(pid).unwrap();
    assert_eq!(r.stdout, "24 80\r\n\r\n50 132\r\n", "{r:?}");
    // Resizing an ended process is a conflict.
    expect_error(sb.resize(pid, 10, 10), 409, "conflict");

    let mut req = on_pty("echo \"$TERM\"; test -t 0 && test -t 1 && test -t 2 && echo all-terminals", 10, 20);
    req.env.insert("TERM".into(), "vt100".into());
    let r = sb.exec(&req).unwrap();
    assert_eq!(r.stdout, "vt100\r\nall-terminals\r\n", "{r:?}");

    let plain = sb.spawn(&argv(&["sleep", "30"])).unwrap();
    let err = expect_error(sb.resize(plain, 30, 100), 400, "invalid_request");
    assert!(err.to_string().contains("only a process started with `pty`"), "{err}");
    let tty = sb.spawn(&on_pty("sleep 30", 24, 80)).unwrap();
    for (rows, cols) in [(0, 80), (24, 0), (1001, 80), (24, 1001)] {
        expect_error(sb.resize(tty, rows, cols), 400, "invalid_request");
    }
    expect_error(sb.spawn(&on_pty("true", 0, 80)), 400, "invalid_request");
    sb.kill_process(plain, None).unwrap();
    sb.kill_process(tty, None).unwrap();
    assert_eq!(sb.wait(tty).unwrap().status, ExitStatus::Signaled);
    sb.delete().unwrap();
}

/// Output a pty process wrote just before it exited is all delivered, before the exit event; a
/// background process it left holding the terminal does not keep the process from ending.
#[test]
fn a_pty_process_output_is_whole_at_its_exit() {
    let server = Server::start();
    let sb = server.sandbox();
    let pid =
        sb.spawn(&on_pty("head -c 300000 /dev/zero | tr '\\0' x; echo; (sleep 60 &) ; echo end", 24, 80)).unwrap();
    let mut text = String::new();
    let mut exited = false;
    for ev in sb.logs(pid).unwrap() {
        match ev.unwrap() {
            ExecEvent::Stdout { data } => text.push_str(&data),
            ExecEvent::Exited { status, exit_code, .. } => {
                assert_eq!((status, exit_code), (ExitStatus::Exited, 0));
                exited = true;
            }
            _ => {}
        }
    }
    assert!(exited);
    assert_eq!(text.matches('x').count(), 300_000);
    assert!(text.ends_with("\r\nend\r\n"), "{:?}", &text[text.len().saturating_sub(40)..]);
    sb.delete().unwrap();
}

/// `stdin_open: true` keeps stdin open after the request's `stdin` bytes (a background process reads
/// lines as they are written); `stdin_open: false` closes it at the start, and a write is a 409.
#[test]
fn stdin_can_be_kept_open_or_closed_at_start() {
    let server = Server::start();
    let sb = server.sandbox();
    let open = ExecRequest {
        stdin: Some("first\n".into()),
        stdin_open: Some(true),
        ..sh("while read -r l; do echo \"line:$l\"; done; echo eof")
    };
    let pid = sb.spawn(&open).unwrap();
    sb.write_stdin(pid, "second\n", false).unwrap();
    sb.write_stdin(pid, "third\n", true).unwrap();
    let r = sb.wait(pid).unwrap();
    assert_eq!(r.stdout, "line:first\nline:second\nline:third\neof\n", "{r:?}");

    let closed = sb.spawn(&ExecRequest { stdin_open: Some(false), ..sh("cat; echo done; sleep 30") }).unwrap();
    let text = stdout_until(&sb, closed, "done\n");
    assert_eq!(text, "done\n", "cat read end of file at once");
    let err = expect_error(sb.write_stdin(closed, "x", false), 409, "conflict");
    assert!(err.to_string().contains("stdin_open: false"), "{err}");
    sb.kill_process(closed, None).unwrap();
    sb.delete().unwrap();
}

/// A tag is listed with the process, with its cwd and the request's env (and only that), and finds
/// it; a tag that is too long or holds a NUL is refused.
#[test]
fn a_tagged_process_is_found_by_its_tag() {
    let server = Server::start();
    let sb = server.sandbox();
    let mut req = ExecRequest { tag: Some("web-server".into()), cwd: Some("/tmp".into()), ..argv(&["sleep", "30"]) };
    req.env.insert("PORT".into(), "8080".into());
    let pid = sb.spawn(&req).unwrap();
    let other = sb.spawn(&ExecRequest { tag: Some("worker".into()), ..argv(&["sleep", "30"]) }).unwrap();
    let found = sb.processes_tagged("web-server").unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    let p = &found[0];
    assert_eq!((p.pid, p.tag.as_deref(), p.cwd.as_str(), p.pty), (pid, Some("web-server"), "/tmp", false));
    assert_eq!(p.env.iter().collect::<Vec<_>>(), [(&"PORT".to_string(), &"8080".to_string())]);
    assert_eq!(sb.processes_tagged("worker").unwrap()[0].pid, other);
    assert!(sb.processes_tagged("nobody").unwrap().is_empty());
    expect_error(sb.spawn(&ExecRequest { tag: Some("x".repeat(257)), ..argv(&["true"]) }), 400, "invalid_request");
    expect_error(sb.spawn(&ExecRequest { tag: Some("a\0b".into()), ..argv(&["true"]) }), 400, "invalid_request");
    for p in [pid, other] {
        sb.kill_process(p, None).unwrap();
    }
    std::thread::sleep(Duration::from_millis(50));
    sb.delete().unwrap();
}

/// A pty process that never reads its terminal does not hold the supervisor or its memory: the
/// terminal's line discipline drops input past its line buffer, as a real terminal does, so 24 MiB
/// of writes (more than the 16 MiB a process's stdin may queue) are taken while other commands run,
/// and the process is killed as usual. The writes come in two rounds of 12 MiB (each fits the queue
/// whatever the drain's speed) a few seconds apart: the second fits only if the first was drained
/// (on a loaded host the kernel's line discipline takes a while to discard 32 MiB sent at once).
#[test]
fn a_pty_that_never_reads_does_not_hold_the_supervisor() {
    let server = Server::start();
    let sb = server.sandbox();
    let pid = sb.spawn(&on_pty("sleep 60", 24, 80)).unwrap();
    let chunk = "x".repeat(4 << 20);
    let started = std::time::Instant::now();
    for round in 0..2 {
        if round > 0 {
            std::thread::sleep(Duration::from_secs(5));
        }
        for _ in 0..3 {
            sb.write_stdin(pid, &chunk, false).unwrap();
            assert_eq!(sb.run(&["true"]).unwrap().exit_code, 0, "the supervisor still runs commands");
        }
    }
    assert!(started.elapsed() < Duration::from_secs(40), "{:?}", started.elapsed());
    sb.kill_process(pid, None).unwrap();
    let r = sb.wait(pid).unwrap();
    assert_eq!(r.status, ExitStatus::Signaled, "{r:?}");
    sb.delete().unwrap();
}
