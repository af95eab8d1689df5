//! Running commands: argv and shell, exit codes, stdin, environment, working directory, identity,
//! output capture and NDJSON streaming.

use std::time::{Duration, Instant};

use sandlot_client::api::{CreateSandbox, ExecEvent, ExecRequest, ExitStatus, User};

use crate::harness::{argv, sh, Server};

/// argv runs the program directly: no shell expansion, arguments arrive intact.
#[test]
fn argv_runs_without_a_shell() {
    let server = Server::start();
    let sb = server.sandbox();
    let r = sb.run(&["echo", "$HOME", "a  b", "*", "'q'"]).unwrap();
    assert_eq!(r.status, ExitStatus::Exited);
    assert_eq!(r.exit_code, 0);
    assert_eq!(r.stdout, "$HOME a  b * 'q'\n");
    assert_eq!(r.stderr, "");
    assert_eq!(r.stdout_bytes, r.stdout.len() as u64);
    assert!(!r.truncated);
    sb.delete().unwrap();
}

/// shell runs a command line with /bin/sh -c: expansion, pipes and redirections work.
#[test]
fn shell_runs_command_lines() {
    let server = Server::start();
    let sb = server.sandbox();
    let r = sb.shell("echo $((6*7)); printf 'b\\na\\n' | sort; echo err >&2; echo $HOME").unwrap();
    assert_eq!(r.exit_code, 0, "{r:?}");
    assert_eq!(r.stdout, "42\na\nb\n/home/user\n");
    assert_eq!(r.stderr, "err\n");
    assert_eq!((r.stdout_bytes, r.stderr_bytes), (18, 4));
    sb.delete().unwrap();
}

/// Exit codes come back as given; a signal death is `signaled` with 128+signal.
#[test]
fn exit_codes_and_signals_are_reported() {
    let server = Server::start();
    let sb = server.sandbox();
    let r = sb.run(&["true"]).unwrap();
    assert_eq!((r.status, r.exit_code, r.signal), (ExitStatus::Exited, 0, None));
    let r = sb.run(&["false"]).unwrap();
    assert_eq!((r.status, r.exit_code, r.signal), (ExitStatus::Exited, 1, None));
    let r = sb.shell("exit 3").unwrap();
    assert_eq!((r.status, r.exit_code, r.signal), (ExitStatus::Exited, 3, None));
    let r = sb.shell("exit 255").unwrap();
    assert_eq!(r.exit_code, 255);
    let r = sb.shell("kill -KILL $$").unwrap();
    assert_eq!((r.status, r.exit_code, r.signal), (ExitStatus::Signaled, 137, Some(9)));
    let r = sb.shell("kill -SEGV $$").unwrap();
    assert_eq!((r.status, r.exit_code, r.signal), (ExitStatus::Signaled, 139, Some(11)));
    sb.delete().unwrap();
}

/// stdin text is delivered in full and then closed; without stdin, a reader sees EOF at once.
#[test]
fn stdin_is_delivered_then_closed() {
    let server = Server::start();
    let sb = server.sandbox();
    let text = "line one\nline two\nünïcödé\n";
    let req = ExecRequest { stdin: Some(text.into()), ..argv(&["cat"]) };
    let r = sb.exec(&req).unwrap();
    assert_eq!(r.exit_code, 0, "{r:?}");
    assert_eq!(r.stdout, text);
    let req = ExecRequest { stdin: Some("a\nb\nc\n".into()), ..argv(&["wc", "-l"]) };
    assert_eq!(sb.exec(&req).unwrap().stdout.trim(), "3");
    // No stdin: `cat` must not hang waiting for input.
    let started = Instant::now();
    let req = ExecRequest { timeout_s: Some(10.0), ..argv(&["cat"]) };
    let r = sb.exec(&req).unwrap();
    assert_eq!((r.status, r.exit_code, r.stdout.as_str()), (ExitStatus::Exited, 0, ""));
    assert!(started.elapsed() < Duration::from_secs(5), "cat waited for stdin");
    sb.delete().unwrap();
}

/// Commands get the sandbox's env, overridden per exec by the request's, over sane defaults.
#[test]
fn env_layers_sandbox_then_exec() {
    let server = Server::start();
    let spec = CreateSandbox {
        env: [("FOO".to_string(), "from-sandbox".to_string()), ("BAR".to_string(), "from-sandbox".to_string())].into(),
        ..Default::default()
    };
    let sb = server.create(&spec);
    let req = ExecRequest {
        env: [("BAR".to_string(), "from-exec".to_string()), ("EMPTY".to_string(), String::new())].into(),
        ..sh("echo \"$FOO|$BAR|${EMPTY-unset}|$HOME|$USER|$LANG\"")
    };
    let r = sb.exec(&req).unwrap();
    assert_eq!(r.stdout, "from-sandbox|from-exec||/home/user|user|C.UTF-8\n");
    // The override lasts one exec only.
    let r = sb.shell("echo \"$FOO|$BAR\"").unwrap();
    assert_eq!(r.stdout, "from-sandbox|from-sandbox\n");
    // PATH finds programs in /usr/bin and /usr/sbin.
    let r = sb.shell("command -v ip; command -v ls").unwrap();
    assert_eq!(r.stdout, "/usr/sbin/ip\n/usr/bin/ls\n", "{r:?}");
    // The daemon's own environment does not leak in.
    let r = sb.run(&["env"]).unwrap();
    assert!(!r.stdout.contains("SANDLOT_LOG"), "{}", r.stdout);
    assert!(!r.stdout.contains("CARGO"), "{}", r.stdout);
    sb.delete().unwrap();
}

/// cwd defaults to the user's home; an absolute cwd is honoured; a missing one fails with 126 and says so.
#[test]
fn cwd_defaults_to_home_and_is_honoured() {
    let server = Server::start();
    let sb = server.sandbox();
    assert_eq!(sb.run(&["pwd"]).unwrap().stdout, "/home/user\n");
    let req = ExecRequest { cwd: Some("/tmp".into()), ..argv(&["pwd"]) };
    assert_eq!(sb.exec(&req).unwrap().stdout, "/tmp\n");
    let req = ExecRequest { user: Some(User::Root), ..argv(&["pwd"]) };
    assert_eq!(sb.exec(&req).unwrap().stdout, "/root\n");
    let req = ExecRequest { cwd: Some("/no/such/dir".into()), ..argv(&["pwd"]) };
    let r = sb.exec(&req).unwrap();
    assert_eq!((r.status, r.exit_code), (ExitStatus::Exited, 126), "{r:?}");
    assert!(r.stderr.contains("/no/such/dir") && r.stderr.contains("does not exist"), "{r:?}");
    sb.delete().unwrap();
}

/// Commands run as `user` (uid 1000) by default and as the sandbox's root (uid 0) on request.
#[test]
fn user_is_uid_1000_and_root_is_uid_0() {
    let server = Server::start();
    let sb = server.sandbox();
    let r = sb.shell("id -u; id -g; id -un; echo $HOME").unwrap();
    assert_eq!(r.stdout, "1000\n1000\nuser\n/home/user\n");
    let req = ExecRequest { user: Some(User::Root), ..sh("id -u; id -g; id -un; echo $HOME") };
    let r = sb.exec(&req).unwrap();
    assert_eq!(r.stdout, "0\n0\nroot\n/root\n");
    sb.delete().unwrap();
}

/// A missing program is exit 127 with a message in stderr (argv and shell alike); a non-executable is 126.
#[test]
fn command_not_found_is_127_with_message() {
    let server = Server::start();
    let sb = server.sandbox();
    let r = sb.run(&["no-such-command-xyz", "arg"]).unwrap();
    assert_eq!((r.status, r.exit_code), (ExitStatus::Exited, 127), "{r:?}");
    assert!(r.stderr.contains("no-such-command-xyz: command not found"), "{r:?}");
    assert_eq!(r.stdout, "");
    let r = sb.shell("no-such-command-xyz").unwrap();
    assert_eq!(r.exit_code, 127, "{r:?}");
    assert!(r.stderr.contains("no-such-command-xyz") && r.stderr.contains("not found"), "{r:?}");
    let r = sb.run(&["/etc/passwd"]).unwrap();
    assert_eq!(r.exit_code, 126, "{r:?}");
    assert!(r.stderr.contains("permission denied"), "{r:?}");
    sb.delete().unwrap();
}

/// Output that is not UTF-8 is replaced, not dropped, and its byte count stays exact.
#[test]
fn non_utf8_output_is_replaced_and_counted() {
    let server = Server::start();
    let sb = server.sandbox();
    let r = sb.shell("printf '\\377\\376ok'").unwrap();
    assert_eq!(r.stdout_bytes, 4);
    assert!(r.stdout.ends_with("ok") && r.stdout.contains('\u{fffd}'), "{:?}", r.stdout);
    sb.delete().unwrap();
}

/// duration_ms measures the command's wall time.
#[test]
fn duration_is_wall_time() {
    let server = Server::start();
    let sb = server.sandbox();
    let r = sb.run(&["sleep", "0.3"]).unwrap();
    assert!((300..3000).contains(&r.duration_ms), "{r:?}");
    let r = sb.run(&["true"]).unwrap();
    assert!(r.duration_ms < 1000, "{r:?}");
    sb.delete().unwrap();
}

/// NDJSON streaming: started first, output in order as it is written, exited last with the totals.
#[test]
fn ndjson_streams_events_in_order_while_running() {
    let server = Server::start();
    let sb = server.sandbox();
    let t0 = Instant::now();
    let stream = sb.exec_stream(&sh("echo a; echo e >&2; sleep 1; echo b")).unwrap();
    let events: Vec<(Duration, ExecEvent)> = stream.map(|e| (t0.elapsed(), e.expect("stream event"))).collect();
    let kinds: Vec<&ExecEvent> = events.iter().map(|(_, e)| e).collect();
    assert!(matches!(kinds.first(), Some(ExecEvent::Started { .. })), "{kinds:#?}");
    assert!(
        matches!(
            kinds.last(),
            Some(ExecEvent::Exited {
                status: ExitStatus::Exited,
                exit_code: 0,
                stdout_bytes: 4,
                stderr_bytes: 2,
                truncated: false,
                ..
            })
        ),
        "{kinds:#?}"
    );
    let position = |want: &str, stdout: bool| {
        events
            .iter()
            .position(|(_, e)| match e {
                ExecEvent::Stdout { data } if stdout => data.contains(want),
                ExecEvent::Stderr { data } if !stdout => data.contains(want),
                _ => false,
            })
            .unwrap_or_else(|| panic!("no event with {want:?}: {kinds:#?}"))
    };
    let (a, e, b) = (position("a", true), position("e", false), position("b", true));
    assert!(a < b && e < b, "order a={a} e={e} b={b}: {kinds:#?}");
    let stdout: String = events
        .iter()
        .filter_map(|(_, e)| match e {
            ExecEvent::Stdout { data } => Some(data.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(stdout, "a\nb\n");
    // The first chunk arrived while the command still slept, not buffered until the end.
    let first_out = events[a].0;
    let end = events.last().unwrap().0;
    assert!(first_out < Duration::from_millis(800), "first stdout after {first_out:?}");
    assert!(end >= Duration::from_secs(1), "ended after {end:?}");
    assert!(end - first_out >= Duration::from_millis(700), "{first_out:?} .. {end:?}");
    sb.delete().unwrap();
}

/// A 100 MiB flood keeps exactly the cap (head + tail with a marker) and counts every byte.
#[test]
fn output_flood_is_capped_and_counted_exactly() {
    let server = Server::start();
    let sb = server.sandbox();
    let r = sb.shell("head -c 104857600 /dev/zero; echo done >&2").unwrap();
    assert_eq!((r.status, r.exit_code), (ExitStatus::Exited, 0), "stderr: {}", r.stderr);
    assert_eq!(r.stdout_bytes, 104_857_600);
    assert!(r.truncated);
    let omitted = 104_857_600 - (1 << 20);
    let marker = format!("\n[sandlot: {omitted} bytes omitted]\n");
    assert!(r.stdout.contains(&marker), "no marker {marker:?}");
    assert_eq!(r.stdout.len(), (1 << 20) + marker.len());
    let (head, tail) = r.stdout.split_once(&marker).unwrap();
    assert_eq!((head.len(), tail.len()), (512 << 10, 512 << 10));
    assert!(head.bytes().chain(tail.bytes()).all(|b| b == 0));
    assert_eq!((r.stderr.as_str(), r.stderr_bytes), ("done\n", 5), "stderr is its own stream");
    sb.delete().unwrap();
}

/// max_output_bytes keeps the first and last halves of the output; the middle is counted as omitted.
#[test]
fn output_cap_keeps_head_and_tail() {
    let server = Server::start();
    let sb = server.sandbox();
    let req = ExecRequest { max_output_bytes: Some(4096), ..argv(&["seq", "1", "100000"]) };
    let r = sb.exec(&req).unwrap();
    let full: String = (1..=100_000).map(|n| format!("{n}\n")).collect();
    assert_eq!(r.stdout_bytes, full.len() as u64);
    assert!(r.truncated);
    let marker = format!("\n[sandlot: {} bytes omitted]\n", full.len() - 4096);
    let (head, tail) = r.stdout.split_once(&marker).unwrap_or_else(|| panic!("{:?}", r.stdout));
    assert_eq!(head, &full[..2048]);
    assert_eq!(tail, &full[full.len() - 2048..]);
    // Under the cap nothing is cut.
    let req = ExecRequest { max_output_bytes: Some(4096), ..sh("head -c 4096 /dev/zero | tr '\\0' x") };
    let r = sb.exec(&req).unwrap();
    assert!(!r.truncated);
    assert_eq!(r.stdout, "x".repeat(4096));
    sb.delete().unwrap();
}

/// A streamed exec that floods says `truncated` once, then still ends with exact totals.
#[test]
fn ndjson_flood_reports_truncation_and_totals() {
    let server = Server::start();
    let sb = server.sandbox();
    let req = ExecRequest { max_output_bytes: Some(64 << 10), ..sh("head -c 10000000 /dev/zero") };
    let events: Vec<ExecEvent> = sb.exec_stream(&req).unwrap().map(|e| e.unwrap()).collect();
    let truncations =
        events.iter().filter(|e| matches!(e, ExecEvent::Truncated { stream } if stream == "stdout")).count();
    assert_eq!(truncations, 1, "{:?}", events.len());
    // Live output is a prefix of the stream up to the first dropped byte (at least the head, at most
    // the cap); after the `truncated` event only the tail follows, once, at the end.
    let cut = events.iter().position(|e| matches!(e, ExecEvent::Truncated { .. })).unwrap();
    let stdout_len = |evs: &[ExecEvent]| -> usize {
        evs.iter()
            .map(|e| match e {
                ExecEvent::Stdout { data } => data.len(),
                _ => 0,
            })
            .sum()
    };
    let before = stdout_len(&events[..cut]);
    let after = stdout_len(&events[cut..]);
    assert!((32 << 10..=64 << 10).contains(&before), "live prefix of {before} bytes");
    assert_eq!(after, 32 << 10, "the tail");
    match events.last() {
        Some(ExecEvent::Exited { stdout_bytes, truncated, exit_code, .. }) => {
            assert_eq!((*stdout_bytes, *truncated, *exit_code), (10_000_000, true, 0));
        }
        other => panic!("last event {other:?}"),
    }
    sb.delete().unwrap();
}

/// Over raw HTTP, `Accept: application/x-ndjson` switches exec to one JSON event per line.
#[test]
fn ndjson_is_selected_by_accept_header() {
    let server = Server::start();
    let sb = server.sandbox();
    let path = format!("/v1/sandboxes/{}/exec", sb.id());
    let r = server.raw(
        "POST",
        &path,
        Some(server.admin_key()),
        &[("Content-Type", "application/json"), ("Accept", "application/x-ndjson")],
        br#"{"argv":["echo","hi"]}"#,
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.head.to_ascii_lowercase().contains("content-type: application/x-ndjson"), "{}", r.head);
    let types: Vec<String> = r
        .body
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["type"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(types, ["started", "stdout", "exited"], "{}", r.body);
    // Without it, one JSON result.
    let r = server.raw(
        "POST",
        &path,
        Some(server.admin_key()),
        &[("Content-Type", "application/json")],
        br#"{"argv":["echo","hi"]}"#,
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["stdout"], "hi\n");
    sb.delete().unwrap();
}

/// The CLI takes a sandbox id in E2B's form (without `sb_`, as the E2B SDKs print it) for the same
/// sandbox; an id that is neither form is still not found.
#[test]
fn the_cli_takes_an_e2b_form_sandbox_id() {
    let server = Server::start();
    let sb = server.sandbox();
    let cli = |id: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_sandlot"))
            .args(["sandbox", "exec", id, "--", "echo", "hi"])
            .env("SANDLOT_URL", server.url())
            .env("SANDLOT_API_KEY", server.admin_key())
            .output()
            .unwrap()
    };
    let e2b_id = sb.id().strip_prefix("sb_").unwrap().to_string();
    let out = cli(&e2b_id);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n");
    let out = cli("NotAnId");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not found"), "{}", String::from_utf8_lossy(&out.stderr));
    sb.delete().unwrap();
}

/// A command starts with nothing blocked and nothing ignored, as under `docker exec`: the
/// supervisor's threads block SIGCHLD, and dash's `wait` suspended with the mask it inherited, so
/// `a & b & wait` (even `sleep 1 & wait`) hung until the timeout. Checked with every shell the host
/// has, and on the process's own /proc status.
#[test]
fn background_jobs_and_wait_work_in_every_shell() {
    let server = Server::start();
    let sb = server.sandbox();
    let status = sb.exec(&argv(&["grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"])).unwrap();
    assert_eq!(status.stdout, "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
    let shells: Vec<&str> = ["/bin/sh", "/bin/dash", "/bin/bash", "/usr/bin/busybox", "/usr/bin/zsh"]
        .into_iter()
        .filter(|s| std::path::Path::new(s).exists())
        .collect();
    assert!(shells.contains(&"/bin/sh"), "{shells:?}");
    for shell in shells {
        for script in
            ["sleep 0.2 & sleep 0.2 & wait; echo ok", "sleep 0.2 & wait; echo ok", "true & true & wait $!; echo ok"]
        {
            let mut args = vec![shell];
            if shell.ends_with("busybox") {
                args.push("sh");
            }
            args.extend(["-c", script]);
            let req = ExecRequest { timeout_s: Some(10.0), ..argv(&args) };
            let r = sb.exec(&req).unwrap();
            assert_eq!((r.status, r.stdout.as_str()), (ExitStatus::Exited, "ok\n"), "{shell} -c {script:?}: {r:?}");
        }
    }
    sb.delete().unwrap();
}
