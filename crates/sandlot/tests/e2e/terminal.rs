//! Terminals over WebSocket (`GET /v1/sandboxes/{id}/pty`): size and resize, input and output,
//! reattaching with the scrollback replayed, typed exits, tenancy, subprotocol authentication, the
//! per-sandbox connection cap; and `sandlot sandbox shell` under a real terminal (tmux).

use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use sandlot_client::api::ExitStatus;
use sandlot_client::{ErrorKind, Terminal, TerminalEvent, TerminalExit, TerminalOptions};
use tungstenite::client::IntoClientRequest;

use crate::harness::{expect_error, Server};

/// Reads the terminal until its output contains `want`; everything read.
#[track_caller]
fn read_until(term: &mut Terminal, want: &str) -> String {
    term.socket().set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut text = String::new();
    while Instant::now() < deadline {
        match term.read().unwrap() {
            Some(TerminalEvent::Output(b)) => text.push_str(&String::from_utf8_lossy(&b)),
            Some(other) => panic!("{other:?} before {want:?}; output: {text:?}"),
            None => {}
        }
        if text.contains(want) {
            return text;
        }
    }
    panic!("no {want:?} within 30 s; output: {text:?}");
}

/// Reads until the exit, skipping output.
#[track_caller]
fn read_exit(term: &mut Terminal) -> TerminalExit {
    term.socket().set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    loop {
        match term.read().unwrap() {
            Some(TerminalEvent::Output(_)) => {}
            Some(TerminalEvent::Exit(e)) => return e,
            other => panic!("expected the exit, got {other:?}"),
        }
    }
}

fn shell(rows: u16, cols: u16) -> TerminalOptions {
    TerminalOptions { rows, cols, ..TerminalOptions::default() }
}

/// A shell sees a terminal of the size asked for, a resize message reaches it, what is typed runs,
/// and the exit comes typed, with the shell's code.
#[test]
fn a_terminal_has_its_size_follows_a_resize_and_reports_its_exit() {
    let server = Server::start();
    let sb = server.sandbox();
    let mut term = sb.open_terminal(&shell(30, 100)).unwrap();
    term.write(b"stty size\r").unwrap();
    read_until(&mut term, "30 100");
    term.resize(50, 132).unwrap();
    term.write(b"stty size; echo $((6*7))\r").unwrap();
    let text = read_until(&mut term, "42");
    assert!(text.contains("50 132"), "{text:?}");
    term.write(b"echo \"$TERM\"\r").unwrap();
    read_until(&mut term, "xterm-256color");
    term.write(b"exit 3\r").unwrap();
    assert_eq!(read_exit(&mut term), TerminalExit { status: ExitStatus::Exited, exit_code: 3, signal: None });
    assert_eq!(term.read().unwrap(), Some(TerminalEvent::Closed), "the server closes after the exit");
    sb.delete().unwrap();
}

/// The terminal outlives its connection: reattached by pid it replays its earlier output, still
/// runs, and a kill ends it with a typed signal exit; a command names what runs; output far past the
/// scrollback still streams live.
#[test]
fn a_terminal_survives_its_connection_and_replays_its_output_when_reattached() {
    let server = Server::start();
    let sb = server.sandbox();
    let mut term = sb.open_terminal(&shell(24, 80)).unwrap();
    let pid = term.pid();
    term.write(b"echo marker-$((40+2))\r").unwrap();
    read_until(&mut term, "marker-42");
    term.close();
    std::thread::sleep(Duration::from_millis(300));
    let info = sb.processes().unwrap().into_iter().find(|p| p.pid == pid).unwrap();
    assert!(info.running && info.pty, "{info:?}");

    let mut again = sb.attach_terminal(pid, Some((40, 120))).unwrap();
    assert_eq!(again.pid(), pid);
    read_until(&mut again, "marker-42");
    // 3 MB, twelve times the scrollback, then a marker: streamed live all the way.
    again.write(b"head -c 3000000 /dev/zero | tr '\\0' x; echo; stty size; echo alive-$((2+3))\r").unwrap();
    let text = read_until(&mut again, "alive-5");
    assert!(text.contains("40 120"), "the attach's size was applied: {:?}", &text[text.len().saturating_sub(200)..]);
    drop(again);
    let mut third = sb.attach_terminal(pid, None).unwrap();
    let replay = read_until(&mut third, "alive-5");
    assert!(replay.len() <= 300 << 10, "the replay is the scrollback, not everything: {} bytes", replay.len());
    assert!(!replay.contains("marker-42"), "the oldest output is gone from a full scrollback");
    sb.kill_process(pid, None).unwrap();
    let exit = read_exit(&mut third);
    assert_eq!(exit, TerminalExit { status: ExitStatus::Signaled, exit_code: 137, signal: Some(9) });

    // A finished terminal can still be attached to: its scrollback, then its exit.
    let mut done = sb.attach_terminal(pid, None).unwrap();
    read_until(&mut done, "alive-5");
    assert_eq!(read_exit(&mut done).exit_code, 137);

    let cmd = TerminalOptions { cmd: Some("echo \"in $PWD as $(id -un) $GREETING\"".into()), ..shell(24, 80) };
    let mut cmd = TerminalOptions { cwd: Some("/tmp".into()), user: Some(sandlot_client::api::User::Root), ..cmd };
    cmd.env.insert("GREETING".into(), "hello".into());
    let mut term = sb.open_terminal(&cmd).unwrap();
    read_until(&mut term, "in /tmp as root hello");
    assert_eq!(read_exit(&mut term).exit_code, 0);
    sb.delete().unwrap();
}

/// Opens the route with our own WebSocket client, offering `protocols` and sending `bearer` as
/// `Authorization` if given: the handshake's response, or the HTTP status of a refusal.
fn raw_connect(
    server: &Server,
    path: &str,
    bearer: Option<&str>,
    protocols: Option<&str>,
) -> Result<(tungstenite::WebSocket<TcpStream>, tungstenite::handshake::client::Response), u16> {
    let mut request = format!("ws://127.0.0.1:{}{path}", server.port()).into_client_request().unwrap();
    if let Some(key) = bearer {
        request.headers_mut().insert("authorization", format!("Bearer {key}").parse().unwrap());
    }
    if let Some(p) = protocols {
        request.headers_mut().insert("sec-websocket-protocol", p.parse().unwrap());
    }
    let tcp = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    match tungstenite::client(request, tcp) {
        Ok(ok) => Ok(ok),
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(r))) => Err(r.status().as_u16()),
        Err(e) => panic!("handshake: {e}"),
    }
}

/// A browser's way in: the key in the `sandlot.bearer.` subprotocol beside `sandlot.v1`, of which
/// only `sandlot.v1` is echoed; a bad key is 401, a key without `sandlot.v1` offered 400, no
/// credentials 401; another tenant's sandbox (or terminal) is 404, as a missing one, before any upgrade;
/// and a plain GET is a 400 that says to use a WebSocket.
#[test]
fn terminals_authenticate_by_header_or_subprotocol_and_keep_tenants_apart() {
    let server = Server::start();
    let sb = server.sandbox();
    let path = format!("/v1/sandboxes/{}/pty?cmd=echo%20via-$((1%2B1))%3B%20sleep%2030&rows=10&cols=40", sb.id());
    let offered = format!("sandlot.v1, sandlot.bearer.{}", server.admin_key());
    let (mut ws, response) = raw_connect(&server, &path, None, Some(&offered)).unwrap();
    let echoed: Vec<_> = response.headers().get_all("sec-websocket-protocol").iter().collect();
    assert_eq!(echoed, ["sandlot.v1"], "only the protocol is echoed, never the key");
    let first = ws.read().unwrap();
    let started: serde_json::Value = serde_json::from_str(first.to_text().unwrap()).unwrap();
    assert_eq!(started["type"], "started", "{started}");
    let pid = started["pid"].as_u64().unwrap();
    let mut out = Vec::new();
    while !String::from_utf8_lossy(&out).contains("via-2") {
        match ws.read().unwrap() {
            tungstenite::Message::Binary(b) => out.extend_from_slice(&b),
            other => panic!("{other:?}"),
        }
    }
    // A malformed control message is answered with an error; the connection stays.
    ws.send(tungstenite::Message::Text("{\"type\":\"resize\",\"rows\":0,\"cols\":5}".into())).unwrap();
    let reply: serde_json::Value = serde_json::from_str(ws.read().unwrap().to_text().unwrap()).unwrap();
    assert_eq!((reply["type"].as_str(), reply["code"].as_str()), (Some("error"), Some("invalid_request")), "{reply}");
    ws.send(tungstenite::Message::Text("hello".into())).unwrap();
    let reply: serde_json::Value = serde_json::from_str(ws.read().unwrap().to_text().unwrap()).unwrap();
    assert_eq!(reply["type"], "error", "{reply}");
    drop(ws);

    assert_eq!(raw_connect(&server, &path, None, Some("sandlot.v1, sandlot.bearer.sl_wrong")).err(), Some(401));
    let key_only = format!("sandlot.bearer.{}", server.admin_key());
    assert_eq!(raw_connect(&server, &path, None, Some(&key_only)).err(), Some(400));
    assert_eq!(raw_connect(&server, &path, None, Some("sandlot.v1")).err(), Some(401));
    assert_eq!(raw_connect(&server, &path, None, None).err(), Some(401));
    assert!(raw_connect(&server, &path, Some(server.admin_key()), None).is_ok(), "the header works too");

    let other = server.tenant_client("mallory");
    let theirs = other.sandbox(sb.id());
    expect_error(theirs.open_terminal(&shell(24, 80)), 404, "not_found");
    expect_error(theirs.attach_terminal(pid, None), 404, "not_found");
    let key = other.api_key().to_string();
    assert_eq!(raw_connect(&server, &path, Some(&key), None).err(), Some(404));
    assert_eq!(
        raw_connect(&server, &format!("/v1/sandboxes/{}/pty?pid={pid}", sb.id()), Some(&key), None).err(),
        Some(404)
    );
    // Not a WebSocket request: an ordinary API error.
    let plain = server.raw("GET", &format!("/v1/sandboxes/{}/pty", sb.id()), Some(server.admin_key()), &[], b"");
    assert_eq!(plain.status, 400, "{}", plain.body);
    assert!(plain.body.contains("WebSocket"), "{}", plain.body);
    // A process without a terminal cannot be attached to.
    let plain_pid = sb.spawn(&crate::harness::argv(&["sleep", "30"])).unwrap();
    expect_error(sb.attach_terminal(plain_pid, None), 400, "invalid_request");
    // The terminal was audited like an exec.
    let audit = server.client().audit(Some(sb.id()), Some(100)).unwrap();
    assert!(
        audit.iter().any(|a| a.action == "exec.start" && a.detail["terminal"] == true && a.detail["pid"] == pid),
        "{audit:?}"
    );
    sb.delete().unwrap();
}

/// One sandbox's terminal connections are capped (8): the ninth is a 429 naming the limit, and a
/// place comes back when a connection closes.
#[test]
fn the_terminal_connections_of_a_sandbox_are_capped() {
    let server = Server::start();
    let sb = server.sandbox();
    let first = sb.open_terminal(&TerminalOptions { cmd: Some("sleep 60".into()), ..shell(24, 80) }).unwrap();
    let pid = first.pid();
    let mut open = vec![first];
    for _ in 1..8 {
        open.push(sb.attach_terminal(pid, None).unwrap());
    }
    let err = expect_error(sb.attach_terminal(pid, None), 429, "limit_reached");
    assert_eq!(err.kind(), ErrorKind::LimitReached);
    assert!(err.to_string().contains("8 terminal connections"), "{err}");
    expect_error(sb.open_terminal(&shell(24, 80)), 429, "limit_reached");
    open.pop().unwrap().close();
    let deadline = Instant::now() + Duration::from_secs(10);
    let again = loop {
        match sb.attach_terminal(pid, None) {
            Ok(t) => break t,
            Err(e) if Instant::now() < deadline && e.kind() == ErrorKind::LimitReached => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("{e:?}"),
        }
    };
    drop((again, open));
    sb.delete().unwrap();
}

/// A tmux server of the test's own (its own socket), killed when dropped.
struct Tmux {
    socket: std::path::PathBuf,
}

impl Tmux {
    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux").arg("-S").arg(&self.socket).args(args).output().unwrap();
        assert!(out.status.success(), "tmux {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "t"];
        args.extend_from_slice(keys);
        self.run(&args);
    }

    /// Types `keys` (then Enter) until the pane shows `want`, again every 3 s: a full-screen program
    /// that has just quit may flush what was typed before it restored the terminal.
    #[track_caller]
    fn type_until(&self, keys: &str, want: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            self.keys(&[keys, "Enter"]);
            let until = Instant::now() + Duration::from_secs(3);
            while Instant::now() < until {
                let pane = self.run(&["capture-pane", "-p", "-J", "-t", "t"]);
                if pane.contains(want) {
                    return pane;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            assert!(Instant::now() < deadline, "the pane never showed {want:?}");
        }
    }

    /// Waits until the pane shows `want`; the pane's text.
    #[track_caller]
    fn wait_for(&self, want: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let pane = self.run(&["capture-pane", "-p", "-J", "-t", "t"]);
            if pane.contains(want) {
                return pane;
            }
            assert!(Instant::now() < deadline, "the pane never showed {want:?}:\n{pane}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").arg("-S").arg(&self.socket).arg("kill-server").output();
    }
}

/// `sandlot sandbox shell` under a real terminal (tmux, 100x30): the remote shell sees the window's
/// size and follows a resize, runs what is typed, full-screen programs (busybox vi and top) draw and
/// take keys, and `exit 3` ends the CLI with status 3 and the terminal back in cooked mode, off the
/// alternate screen, with the cursor shown and mouse reporting off though the shell left them on.
#[test]
fn the_cli_shell_works_under_a_real_terminal_and_gives_it_back() {
    if Command::new("tmux").arg("-V").output().is_err() {
        eprintln!("SKIPPED: tmux is not installed (scripts/deps.sh installs it)");
        return;
    }
    let server = Server::start();
    let sb = server.sandbox();
    let dir = server.temp_dir();
    let script = dir.join("shell.sh");
    std::fs::write(
        &script,
        format!(
            "SANDLOT_URL={} SANDLOT_API_KEY={} {} sandbox shell {}\necho cli-exit=$?\nstty -a\nexec sleep 600\n",
            server.url(),
            server.admin_key(),
            env!("CARGO_BIN_EXE_sandlot"),
            sb.id()
        ),
    )
    .unwrap();
    let conf = dir.join("tmux.conf");
    std::fs::write(&conf, "set -g status off\n").unwrap();
    let tmux = Tmux { socket: dir.join("tmux.sock") };
    let conf_arg = conf.to_str().unwrap();
    let command = format!("sh {}", script.display());
    tmux.run(&["-f", conf_arg, "new-session", "-d", "-s", "t", "-x", "100", "-y", "30", &command]);
    tmux.keys(&["stty size", "Enter"]);
    tmux.wait_for("30 100");
    tmux.run(&["resize-window", "-t", "t", "-x", "120", "-y", "40"]);
    // SIGWINCH, then a resize message, then the remote ioctl: asked again until it has landed.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        tmux.keys(&["clear; stty size; echo $((6*7))", "Enter"]);
        let pane = tmux.wait_for("\n42");
        if pane.contains("40 120") {
            break;
        }
        assert!(Instant::now() < deadline, "the resize never reached the remote terminal:\n{pane}");
        std::thread::sleep(Duration::from_millis(300));
    }

    tmux.keys(&["clear; busybox vi /tmp/tui.txt", "Enter"]);
    tmux.wait_for("~\n~\n~");
    tmux.keys(&["i", "typed-in-vi"]);
    tmux.wait_for("typed-in-vi");
    // Apart, or vi reads the escape and what follows as one key sequence.
    tmux.keys(&["Escape"]);
    std::thread::sleep(Duration::from_millis(700));
    tmux.keys(&[":wq", "Enter"]);
    tmux.type_until("clear; echo \"file:$(cat /tmp/tui.txt)\"", "file:typed-in-vi");
    tmux.keys(&["clear; busybox top", "Enter"]);
    tmux.wait_for("PID");
    tmux.keys(&["q"]);
    tmux.type_until("clear; echo top-quit-$((1+1))", "top-quit-2");

    // A program that leaves the alternate screen, a hidden cursor and mouse reporting on: the CLI
    // switches them off as it ends, and the earlier lines are on the screen again.
    tmux.keys(&["printf '\\033[?1049h\\033[?25l\\033[?1000h'; echo alt-$((2+3))", "Enter"]);
    tmux.wait_for("alt-5");
    let modes = |tmux: &Tmux| {
        tmux.run(&["display-message", "-p", "-t", "t", "#{alternate_on} #{cursor_flag} #{mouse_any_flag}"])
    };
    assert_eq!(modes(&tmux).trim(), "1 0 1", "the program's modes are on");
    tmux.keys(&["exit 3", "Enter"]);
    let pane = tmux.wait_for("cli-exit=3");
    assert_eq!(modes(&tmux).trim(), "0 1 0", "the screen is given back:\n{pane}");
    assert!(pane.contains("top-quit-2"), "the normal screen, with the earlier lines:\n{pane}");
    let stty = pane.split("cli-exit=3").nth(1).unwrap();
    let wait = Instant::now() + Duration::from_secs(10);
    let mut stty = stty.to_string();
    while !stty.contains("icanon") && Instant::now() < wait {
        std::thread::sleep(Duration::from_millis(100));
        stty = tmux.run(&["capture-pane", "-p", "-J", "-t", "t"]).split("cli-exit=3").nth(1).unwrap().to_string();
    }
    let flags: Vec<&str> = stty.split_whitespace().collect();
    for flag in ["icanon", "echo", "isig", "icrnl", "opost"] {
        assert!(flags.contains(&flag), "the terminal is restored ({flag}):\n{stty}");
    }
    sb.delete().unwrap();
}

/// Runs `sandlot sandbox shell ARGS` with `input` as its standard input (a pipe, not a terminal);
/// its exit code and output.
fn cli_shell(server: &Server, args: &[&str], input: &str) -> (i32, String, String) {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_sandlot"))
        .args(["sandbox", "shell"])
        .args(args)
        .env("SANDLOT_URL", server.url())
        .env("SANDLOT_API_KEY", server.admin_key())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// Without a terminal on its standard input the CLI types its input (then ^D) and still exits with
/// the shell's code; `--attach PID` reaches a terminal started earlier, whose output comes first; a
/// sandbox that is not the caller's is refused with the server's message.
#[test]
fn the_cli_shell_takes_piped_input_and_attaches_by_pid() {
    let server = Server::start();
    let sb = server.sandbox();
    let (code, out, err) = cli_shell(&server, &[sb.id()], "echo piped-$((2+2)); exit 5\n");
    assert_eq!(code, 5, "stdout: {out}\nstderr: {err}");
    assert!(out.contains("piped-4"), "{out}");

    let (code, out, err) = cli_shell(&server, &[sb.id(), "--", "sh", "-c", "read x; echo \"got-$x\"; exit 7"], "hi\n");
    assert_eq!((code, out.contains("got-hi")), (7, true), "stdout: {out}\nstderr: {err}");

    let opts = TerminalOptions { cmd: Some("echo before; read x; echo \"after-$x\"; exit 9".into()), ..shell(24, 80) };
    let mut term = sb.open_terminal(&opts).unwrap();
    read_until(&mut term, "before");
    let pid = term.pid().to_string();
    term.close();
    let (code, out, err) = cli_shell(&server, &[sb.id(), "--attach", &pid], "there\n");
    assert_eq!(code, 9, "stdout: {out}\nstderr: {err}");
    let (before, after) = (out.find("before").unwrap(), out.find("after-there").unwrap());
    assert!(before < after, "{out}");

    let (code, _, err) = cli_shell(&server, &["sb_nosuchsandbox"], "");
    assert_ne!(code, 0);
    assert!(err.contains("sb_nosuchsandbox") && err.contains("not found"), "{err}");
    sb.delete().unwrap();
}

/// In an image without bash (a static busybox alone) the default terminal is busybox's `sh`, and works.
#[test]
fn the_default_terminal_of_an_image_without_bash_is_its_sh() {
    let server = Server::start();
    let client = server.client();
    let rootfs = crate::common::busybox_rootfs(&[], &[]);
    client.import_image(std::io::Cursor::new(rootfs), Some("bb:1"), false).unwrap().wait().unwrap();
    let spec = sandlot_client::api::CreateSandbox { image: Some("bb:1".into()), ..Default::default() };
    let sb = client.create(&spec).unwrap();
    let mut term = sb.open_terminal(&shell(24, 80)).unwrap();
    term.write(b"echo \"$0 $((3*3))\"; busybox stty size\r").unwrap();
    let text = read_until(&mut term, "24 80");
    assert!(text.contains("sh 9"), "{text:?}");
    term.write(b"exit 4\r").unwrap();
    assert_eq!(read_exit(&mut term).exit_code, 4);
    sb.delete().unwrap();
}

/// A paused sandbox that auto-resumes is resumed by a terminal, as by an exec; one that does not is a
/// 409 naming its state; a terminal whose sandbox is deleted ends `killed` and its connection closes.
#[test]
fn a_terminal_resumes_its_sandbox_like_an_exec_and_ends_with_it() {
    let server = Server::start();
    let spec = sandlot_client::api::CreateSandbox { auto_resume: Some(true), ..Default::default() };
    let sb = server.create(&spec);
    sb.pause().unwrap();
    let mut term = sb.open_terminal(&shell(24, 80)).unwrap();
    term.write(b"echo resumed-$((5*5))\r").unwrap();
    read_until(&mut term, "resumed-25");
    sb.delete().unwrap();
    let exit = read_exit(&mut term);
    assert_eq!(exit.status, ExitStatus::Killed, "{exit:?}");
    term.socket().set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(term.read().unwrap(), Some(TerminalEvent::Closed));

    let plain = server.sandbox();
    plain.pause().unwrap();
    let err = expect_error(plain.open_terminal(&shell(24, 80)), 409, "conflict");
    assert!(err.to_string().contains("paused"), "{err}");
    plain.delete().unwrap();
}

/// Revoking the key a terminal was opened with ends its connection within the re-check interval
/// (5 s): an `error` frame (`unauthenticated`), then a close 1008. The process runs on: another key of
/// the tenant still sees it and attaches to it, and the revoked key is refused (401).
#[test]
fn revoking_a_key_closes_the_terminals_it_opened_and_the_process_runs_on() {
    let server = Server::start();
    let admin = server.client();
    let doomed = admin.create_key("carol").unwrap();
    let kept = server.tenant_client("carol");
    let sb = kept.create(&Default::default()).unwrap();
    let path = format!("/v1/sandboxes/{}/pty?cmd=echo%20up%3B%20sleep%20120", sb.id());
    let (mut ws, _) = raw_connect(&server, &path, Some(&doomed.key), None).unwrap();
    let started: serde_json::Value = serde_json::from_str(ws.read().unwrap().to_text().unwrap()).unwrap();
    let pid = started["pid"].as_u64().unwrap();
    admin.revoke_key(&doomed.id).unwrap();
    let revoked = Instant::now();
    let mut error = None;
    let close = loop {
        match ws.read() {
            Ok(tungstenite::Message::Text(t)) => error = Some(serde_json::from_str::<serde_json::Value>(&t).unwrap()),
            Ok(tungstenite::Message::Close(frame)) => break frame.expect("a close frame with a code"),
            Ok(_) => {}
            Err(e) => panic!("the connection broke without a close: {e}"),
        }
    };
    assert!(revoked.elapsed() < Duration::from_secs(8), "closed {:?} after the revocation", revoked.elapsed());
    let error = error.expect("an error frame before the close");
    assert_eq!((error["type"].as_str(), error["code"].as_str()), (Some("error"), Some("unauthenticated")), "{error}");
    assert!(error["message"].as_str().unwrap().contains("revoked"), "{error}");
    assert_eq!(u16::from(close.code), 1008, "{close:?}");
    assert!(close.reason.contains("revoked"), "{close:?}");

    let running = sb.processes().unwrap().into_iter().find(|p| p.pid == pid).expect("the process is listed");
    assert!(running.running, "{running:?}");
    let mut again = sb.attach_terminal(pid, None).unwrap();
    read_until(&mut again, "up");
    again.close();
    let attach = format!("/v1/sandboxes/{}/pty?pid={pid}", sb.id());
    assert_eq!(raw_connect(&server, &attach, Some(&doomed.key), None).err(), Some(401));
    sb.delete().unwrap();
}
