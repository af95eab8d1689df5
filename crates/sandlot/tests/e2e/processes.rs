//! Background processes: spawn, list, stdin, signals, wait, logs; and the reaping of orphans.

use std::time::{Duration, Instant};

use sandlot_client::api::{ExecEvent, ExecRequest, ExitStatus};

use crate::harness::{argv, eventually, expect_error, sh, sh_ok, Server};

/// A spawned `cat` is listed as running, echoes what stdin sends, and ends on EOF; wait returns its output.
#[test]
fn background_process_takes_stdin_until_eof() {
    let server = Server::start();
    let sb = server.sandbox();
    let pid = sb.spawn(&argv(&["cat"])).unwrap();
    let listed = sb.processes().unwrap();
    let p = listed.iter().find(|p| p.pid == pid).unwrap_or_else(|| panic!("{listed:?}"));
    assert!(p.running, "{p:?}");
    assert_eq!(p.argv, ["cat"]);
    assert_eq!((p.status, p.exit_code), (None, None));
    sb.write_stdin(pid, "hello\n", false).unwrap();
    sb.write_stdin(pid, "world\n", false).unwrap();
    // Still running: stdin is open until EOF.
    std::thread::sleep(Duration::from_millis(100));
    assert!(sb.processes().unwrap().iter().any(|p| p.pid == pid && p.running));
    sb.write_stdin(pid, "", true).unwrap();
    let r = sb.wait(pid).unwrap();
    assert_eq!((r.status, r.exit_code), (ExitStatus::Exited, 0), "{r:?}");
    assert_eq!(r.stdout, "hello\nworld\n");
    let p = sb.processes().unwrap().into_iter().find(|p| p.pid == pid).unwrap();
    assert_eq!((p.running, p.status, p.exit_code), (false, Some(ExitStatus::Exited), Some(0)));
    // The process is gone: more stdin, or a kill, is a 409.
    expect_error(sb.write_stdin(pid, "late", false), 409, "conflict");
    expect_error(sb.kill_process(pid, None), 409, "conflict");
    // wait after the end returns the same result again.
    assert_eq!(sb.wait(pid).unwrap().stdout, "hello\nworld\n");
    sb.delete().unwrap();
}

/// Spawn returns at once; a background process has no default timeout.
#[test]
fn spawn_returns_immediately() {
    let server = Server::start();
    let sb = server.sandbox();
    let started = Instant::now();
    let pid = sb.spawn(&sh("sleep 2; echo finished")).unwrap();
    assert!(started.elapsed() < Duration::from_millis(1500), "{:?}", started.elapsed());
    let r = sb.wait(pid).unwrap();
    assert_eq!((r.status, r.stdout.as_str()), (ExitStatus::Exited, "finished\n"));
    assert!(r.duration_ms >= 2000, "{r:?}");
    sb.delete().unwrap();
}

/// kill with SIGTERM ends the process as `signaled` 15 (exit code 143), the whole process group included.
#[test]
fn kill_sigterm_reports_signal_15() {
    let server = Server::start();
    let sb = server.sandbox();
    let pid = sb.spawn(&sh("sleep 300 & sleep 301; wait")).unwrap();
    assert!(eventually(Duration::from_secs(3), || {
        sb.run(&["pgrep", "-c", "-x", "sleep"]).unwrap().stdout.trim() == "2"
    }));
    sb.kill_process(pid, Some(15)).unwrap();
    let r = sb.wait(pid).unwrap();
    assert_eq!((r.status, r.signal, r.exit_code), (ExitStatus::Signaled, Some(15), 143), "{r:?}");
    // The group's other member got the signal too.
    assert!(
        eventually(Duration::from_secs(3), || sb.run(&["pgrep", "-x", "sleep"]).unwrap().exit_code == 1),
        "a sleep survived: {}",
        sh_ok(&sb, "ps -eo pid,stat,args")
    );
    sb.delete().unwrap();
}

/// kill without a signal is SIGKILL.
#[test]
fn kill_defaults_to_sigkill() {
    let server = Server::start();
    let sb = server.sandbox();
    let pid = sb.spawn(&sh("trap '' TERM; sleep 300")).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    sb.kill_process(pid, None).unwrap();
    let r = sb.wait(pid).unwrap();
    assert_eq!((r.signal, r.exit_code), (Some(9), 137), "{r:?}");
    assert_ne!(r.status, ExitStatus::Exited);
    sb.delete().unwrap();
}

/// logs(pid) replays every event from the start, whenever it is called, and follows a live process.
#[test]
fn logs_replay_from_the_start() {
    let server = Server::start();
    let sb = server.sandbox();
    let pid = sb.spawn(&sh("echo one; echo two >&2; sleep 0.5; echo three")).unwrap();
    // Attach while it runs: the stream starts from `started`, not from now.
    std::thread::sleep(Duration::from_millis(200));
    let live: Vec<ExecEvent> = sb.logs(pid).unwrap().map(|e| e.unwrap()).collect();
    let r = sb.wait(pid).unwrap();
    assert_eq!(r.stdout, "one\nthree\n");
    // And again after the end: the same full history.
    let replay: Vec<ExecEvent> = sb.logs(pid).unwrap().map(|e| e.unwrap()).collect();
    for events in [&live, &replay] {
        assert_eq!(events.first(), Some(&ExecEvent::Started { pid }), "{events:#?}");
        let out: String = events
            .iter()
            .filter_map(|e| match e {
                ExecEvent::Stdout { data } => Some(data.as_str()),
                _ => None,
            })
            .collect();
        let err: String = events
            .iter()
            .filter_map(|e| match e {
                ExecEvent::Stderr { data } => Some(data.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!((out.as_str(), err.as_str()), ("one\nthree\n", "two\n"), "{events:#?}");
        assert!(matches!(events.last(), Some(ExecEvent::Exited { exit_code: 0, .. })), "{events:#?}");
    }
    assert_eq!(live, replay);
    sb.delete().unwrap();
}

/// Orphans (double-forked children) are reaped by the sandbox's pid 1: no zombie is left behind.
#[test]
fn orphans_are_reaped_no_zombies() {
    let server = Server::start();
    let sb = server.sandbox();
    let r = sb.shell("for i in 1 2 3 4 5 6 7 8; do (sleep 0.1 &); done; sleep 0.5").unwrap();
    assert_eq!(r.exit_code, 0, "{r:?}");
    // A background process whose own child exits without being waited for.
    let pid = sb.spawn(&sh("sleep 0.1 & exec sleep 1")).unwrap();
    sb.wait(pid).unwrap();
    let ps = sh_ok(&sb, "ps -eo stat=,pid=,args=");
    let zombies: Vec<&str> = ps.lines().filter(|l| l.trim_start().starts_with('Z')).collect();
    assert!(zombies.is_empty(), "zombies inside the sandbox:\n{ps}");
    assert!(!ps.contains("sleep"), "orphans still running:\n{ps}");
    sb.delete().unwrap();
}

/// The process list holds foreground and background processes, oldest first, with their end.
#[test]
fn process_list_shows_history() {
    let server = Server::start();
    let sb = server.sandbox();
    sb.run(&["true"]).unwrap();
    sb.shell("exit 4").unwrap();
    let pid = sb.spawn(&argv(&["sleep", "30"])).unwrap();
    let list = sb.processes().unwrap();
    assert_eq!(list.len(), 3, "{list:#?}");
    assert!(list.windows(2).all(|w| w[0].pid < w[1].pid), "oldest first: {list:#?}");
    assert_eq!(list[0].argv, ["true"]);
    assert_eq!((list[0].running, list[0].exit_code), (false, Some(0)));
    assert_eq!(list[1].exit_code, Some(4));
    assert_eq!((list[2].pid, list[2].running), (pid, true));
    sb.kill_process(pid, None).unwrap();
    let r = sb.wait(pid).unwrap();
    assert_ne!(r.status, ExitStatus::Exited);
    sb.delete().unwrap();
}

/// A client that asks for an NDJSON stream and stops reading does not hold the stream past its
/// sandbox: once the sandbox is deleted the server gives the client a second, then drops the queued
/// lines and ends the stream, so what the client finally reads ends without the `exited` event. (The
/// stream's task used to wait on such a client forever, holding the process and its output room.)
#[test]
fn an_unread_ndjson_stream_is_cut_when_its_sandbox_ends() {
    use std::io::{Read, Write};
    let server = Server::start();
    let sb = server.sandbox();
    // 32 MiB of head, streamed live: more than the queue and the socket buffers hold.
    let body = r#"{"argv":["yes","sandlot flood"],"max_output_bytes":67108864,"timeout_s":600}"#;
    let head = format!(
        "POST /v1/sandboxes/{}/exec HTTP/1.1\r\nHost: sandlot\r\nAuthorization: Bearer {}\r\n\
         Accept: application/x-ndjson\r\nContent-Type: application/json\r\nConnection: close\r\n\
         Content-Length: {}\r\n\r\n{body}",
        sb.id(),
        server.admin_key(),
        body.len()
    );
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    conn.write_all(head.as_bytes()).unwrap();
    // Not reading while the flood fills everything between the process and this socket.
    std::thread::sleep(Duration::from_secs(3));
    sb.delete().unwrap();
    std::thread::sleep(Duration::from_secs(3));
    conn.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut got = Vec::new();
    conn.read_to_end(&mut got).expect("the server ends the stream");
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200"), "{}", &text[..text.len().min(300)]);
    assert!(text.contains("sandlot flood"), "the stream began");
    assert!(!text.contains(r#""type":"exited""#), "the stream was cut, not delivered to its end");
    assert!(got.len() < 32 << 20, "{} bytes: the dropped queue was never sent", got.len());
}

/// What a finished command leaves in its process group (`nohup server &`) lives on past the
/// command's timeout, as after `docker exec`: listed as left by that command, with the command line
/// of its oldest member, killable as a group, and ended as its last member ended.
#[test]
fn what_a_finished_command_leaves_lives_on_listed_and_killable() {
    let server = Server::start();
    let sb = server.sandbox();
    let cmd = ExecRequest { timeout_s: Some(1.0), ..sh("nohup sleep 300 >/dev/null 2>&1 & sleep 0.1; echo started") };
    let r = sb.exec(&cmd).unwrap();
    assert_eq!((r.status, r.stdout.as_str()), (ExitStatus::Exited, "started\n"), "{r:?}");
    // Past the command's timeout, the server it started still runs.
    std::thread::sleep(Duration::from_millis(1500));
    let listed = sb.processes().unwrap();
    let command = listed.iter().find(|p| p.argv.last().is_some_and(|a| a.contains("nohup"))).expect("the command");
    let left = listed.iter().find(|p| p.left_by == Some(command.pid)).unwrap_or_else(|| panic!("{listed:?}"));
    assert!(left.running && left.argv.iter().any(|a| a == "sleep"), "{left:?}");
    assert!(sh_ok(&sb, "ps -eo args=").lines().any(|l| l.trim() == "sleep 300"));
    // A signal reaches the group; the group's end is its member's.
    sb.kill_process(left.pid, Some(15)).unwrap();
    let end = sb.wait(left.pid).unwrap();
    assert_eq!((end.status, end.exit_code, end.signal), (ExitStatus::Signaled, 143, Some(15)), "{end:?}");
    assert!(!sh_ok(&sb, "ps -eo args=").contains("sleep 300"));

    // A group whose members all exit on their own ends with the last one's exit code.
    let r = sb.exec(&sh("(sleep 0.5; exit 3) & echo bye")).unwrap();
    assert_eq!(r.exit_code, 0, "{r:?}");
    let left = eventually_left(&sb);
    assert_eq!(sb.wait(left).unwrap().exit_code, 3);

    // A command that leaves nothing is followed by no entry.
    let before = sb.processes().unwrap().len();
    sb.exec(&sh("true")).unwrap();
    assert_eq!(sb.processes().unwrap().len(), before + 1);
    sb.delete().unwrap();
}

/// The newest process left by a finished command.
fn eventually_left(sb: &sandlot_client::Sandbox) -> u64 {
    let mut found = None;
    assert!(eventually(Duration::from_secs(5), || {
        found = sb.processes().unwrap().iter().rev().find(|p| p.left_by.is_some() && p.running).map(|p| p.pid);
        found.is_some()
    }));
    found.unwrap()
}

/// A command's timeout is the command's: when it fires, the whole group dies with it (nothing is
/// left to list), and the sandbox's own processes are untouched.
#[test]
fn a_timed_out_command_takes_its_group_with_it() {
    let server = Server::start();
    let sb = server.sandbox();
    let r = sb.exec(&ExecRequest { timeout_s: Some(1.0), ..sh("sleep 300 & sleep 300") }).unwrap();
    assert_eq!(r.status, ExitStatus::Timeout, "{r:?}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(sb.processes().unwrap().iter().all(|p| p.left_by.is_none()));
    assert!(!sh_ok(&sb, "ps -eo args=").contains("sleep 300"));
    sb.delete().unwrap();
}

/// The CLI's process commands: `exec -d` prints a pid, `ps` lists running processes (and what a
/// command left, with the command's pid), `logs` prints output so far or follows to the exit code,
/// `kill` signals by name.
#[test]
fn the_cli_starts_lists_follows_and_kills_processes() {
    let server = Server::start();
    let sb = server.sandbox();
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandlot"))
            .arg("sandbox")
            .args(args)
            .env("SANDLOT_URL", server.url())
            .env("SANDLOT_API_KEY", server.admin_key())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let id = sb.id();
    let (code, pid, err) =
        cli(&["exec", "-d", id, "--", "sh", "-c", "echo one; echo two >&2; sleep 1; echo three; exit 4"]);
    assert_eq!(code, Some(0), "{err}");
    let pid = pid.trim().to_string();
    assert!(pid.parse::<u64>().is_ok(), "{pid:?}");
    std::thread::sleep(Duration::from_millis(300));
    let (_, out, _) = cli(&["logs", id, &pid]);
    assert_eq!(out, "one\n");
    let (code, out, err) = cli(&["logs", "-f", id, &pid]);
    assert_eq!((code, out.as_str(), err.as_str()), (Some(4), "one\nthree\n", "two\n"));

    let (code, _, err) = cli(&["exec", id, "--", "sh", "-c", "sleep 300 &"]);
    assert_eq!(code, Some(0), "{err}");
    let (_, table, _) = cli(&["ps", id]);
    let row = table.lines().find(|l| l.contains("sleep 300")).unwrap_or_else(|| panic!("{table}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[1], "running", "{table}");
    let left = cols[0].to_string();
    let (code, _, err) = cli(&["kill", id, &left, "--signal", "SIGTERM"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(sb.wait(left.parse().unwrap()).unwrap().signal, Some(15));
    let (_, table, _) = cli(&["ps", id]);
    assert!(!table.contains("sleep 300"), "{table}");
    let (_, table, _) = cli(&["ps", "--all", id]);
    assert!(table.contains("signaled (143)"), "{table}");
    let (code, _, err) = cli(&["kill", id, &left, "--signal", "NOPE"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("unknown signal"), "{err}");
    sb.delete().unwrap();
}
