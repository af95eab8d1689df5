//! `sandlot sandbox shell`: an interactive terminal in a sandbox, over the WebSocket route
//! `GET /v1/sandboxes/{id}/pty`.
//!
//! One thread polls standard input, the connection and a socket that signals arrive on (SIGWINCH
//! resizes, SIGTERM/SIGHUP/SIGINT/SIGQUIT detach). When standard input is a terminal it is put in raw
//! mode (every key, ^C included, goes to the sandbox) and restored on every way out: the shell's
//! exit, an error, a signal, a panic. When standard output is a terminal, the screen modes a
//! full-screen program may have left on are switched off on the same ways out (`screen.rs`); what the
//! server says about the session (`note`) is sanitized, the terminal's own bytes are not.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::Mutex;

use anyhow::Context;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use rustix::termios::{self, OptionalActions, Termios};
use sandlot_client::{Terminal, TerminalEvent, TerminalOptions};

use super::output::sanitize;
use super::screen::{self, AltScreen, ScreenReset};
use super::{parse_key_value, Conn, Doing, UserArg};

pub(super) const SHELL_LONG: &str = "\
Open an interactive terminal in a sandbox: by default the user's login shell (bash where the image has \
it, else sh), or CMD. Keys go to the sandbox as typed (raw mode: ^C, ^Z and ^D reach the remote \
shell, not sandlot); the window's size follows yours, and TERM in the sandbox is xterm-256color unless \
-e TERM=... says otherwise. sandlot exits with the shell's exit code (128+N \
when signal N ended it) and always gives your terminal back as it was: its settings, and the screen \
modes a program in the sandbox may have left on (the alternate screen, mouse reporting, bracketed \
paste, a hidden cursor, colours).

The shell is a background process of the sandbox: if the connection drops, or sandlot gets SIGTERM or \
SIGHUP, it runs on; attach again with --attach PID (its recent output is shown first). It ends when it \
exits, is killed, or its sandbox is stopped, deleted or times out.

When standard input is not a terminal (a pipe, a file), nothing is put in raw mode: the input is typed \
into the terminal as is, followed by ^D at its end.

Examples:
  sandlot sandbox shell sb_123
  sandlot sandbox shell sb_123 --user root --cwd /etc
  sandlot sandbox shell sb_123 -e TERM=xterm -- python3
  sandlot sandbox shell sb_123 --attach 7";

/// Arguments of `sandlot sandbox shell`.
#[derive(clap::Args, Debug)]
pub struct ShellArgs {
    /// Sandbox id.
    id: String,
    /// The program and its arguments (default: the user's login shell).
    #[arg(trailing_var_arg = true, value_name = "CMD")]
    command: Vec<String>,
    /// Who runs it inside the sandbox [default: the image's USER if it names one, else user].
    #[arg(long, value_enum)]
    user: Option<UserArg>,
    /// Working directory inside the sandbox (default: the user's home).
    #[arg(long, value_name = "DIR")]
    cwd: Option<String>,
    /// Environment variable (repeatable).
    #[arg(long, short = 'e', value_name = "K=V", value_parser = parse_key_value)]
    env: Vec<(String, String)>,
    /// Attach to the running terminal PID (printed when a shell detaches) instead of starting one.
    #[arg(long, value_name = "PID", conflicts_with_all = ["command", "user", "cwd", "env"])]
    attach: Option<u64>,
    #[command(flatten)]
    pub(super) conn: Conn,
}

/// The terminal's settings before raw mode, for the panic hook.
static SAVED: Mutex<Option<Termios>> = Mutex::new(None);

/// Standard input in raw mode until dropped (also on unwind), or until a panic's hook restores it.
struct RawMode;

impl RawMode {
    fn enter() -> anyhow::Result<RawMode> {
        let stdin = std::io::stdin();
        let saved = termios::tcgetattr(stdin.as_fd()).context("reading the terminal's settings")?;
        let mut raw = saved.clone();
        raw.make_raw();
        *SAVED.lock().unwrap_or_else(|p| p.into_inner()) = Some(saved);
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            screen::reset();
            restore();
            previous(info);
        }));
        termios::tcsetattr(stdin.as_fd(), OptionalActions::Drain, &raw).context("setting raw mode")?;
        Ok(RawMode)
    }
}

/// Puts the saved settings back (once).
fn restore() {
    if let Some(saved) = SAVED.lock().unwrap_or_else(|p| p.into_inner()).take() {
        let _ = termios::tcsetattr(std::io::stdin().as_fd(), OptionalActions::Drain, &saved);
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        restore();
    }
}

/// The size of our terminal (stdout's, else stdin's), if either is one.
fn window_size() -> Option<(u16, u16)> {
    let ws = termios::tcgetwinsize(std::io::stdout().as_fd())
        .or_else(|_| termios::tcgetwinsize(std::io::stdin().as_fd()))
        .ok()?;
    (ws.ws_row > 0 && ws.ws_col > 0).then(|| (ws.ws_row.min(1000), ws.ws_col.min(1000)))
}

/// Signals this command handles, as the byte the watcher writes for each.
const WINCH: u8 = b'W';

/// Starts a thread that writes one byte to the returned socket per signal (SIGWINCH: `W`; SIGTERM,
/// SIGHUP, SIGINT, SIGQUIT: their number), once the handlers are in place.
fn watch_signals() -> anyhow::Result<UnixStream> {
    let (read, mut write) = UnixStream::pair().context("making the signal socket")?;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            use tokio::signal::unix::{signal, SignalKind};
            let rt = match tokio::runtime::Builder::new_current_thread().enable_io().build() {
                Ok(rt) => rt,
                Err(e) => return drop(ready_tx.send(Err(e.to_string()))),
            };
            rt.block_on(async move {
                let kinds = [
                    (SignalKind::window_change(), WINCH),
                    (SignalKind::terminate(), libc::SIGTERM as u8),
                    (SignalKind::hangup(), libc::SIGHUP as u8),
                    (SignalKind::interrupt(), libc::SIGINT as u8),
                    (SignalKind::quit(), libc::SIGQUIT as u8),
                ];
                let mut streams = Vec::new();
                for (kind, byte) in kinds {
                    match signal(kind) {
                        Ok(s) => streams.push((s, byte)),
                        Err(e) => return drop(ready_tx.send(Err(e.to_string()))),
                    }
                }
                let _ = ready_tx.send(Ok(()));
                loop {
                    let next = futures_util::future::select_all(
                        streams.iter_mut().map(|(s, byte)| Box::pin(async move { s.recv().await.map(|_| *byte) })),
                    );
                    match next.await.0 {
                        Some(byte) => {
                            if write.write_all(&[byte]).is_err() {
                                return;
                            }
                        }
                        None => return,
                    }
                }
            });
        })
        .context("starting the signal thread")?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(read),
        Ok(Err(e)) => anyhow::bail!("installing signal handlers: {e}"),
        Err(_) => anyhow::bail!("installing signal handlers: the thread ended"),
    }
}

/// How the session ended.
enum Outcome {
    /// The process ended with this exit code.
    Exited(i32),
    /// The connection closed without an exit.
    Closed,
    /// We got this signal: the process runs on.
    Signal(u8),
}

pub(super) fn shell(args: ShellArgs) -> anyhow::Result<i32> {
    let client = args.conn.client()?;
    let sandbox = client.sandbox(&args.id);
    let interactive = termios::isatty(std::io::stdin().as_fd());
    let size = window_size();
    let mut term = match args.attach {
        Some(pid) => {
            sandbox.attach_terminal(pid, size).doing(&format!("attaching to terminal {pid} of {}", args.id))?
        }
        None => {
            let (rows, cols) = size.unwrap_or((24, 80));
            let options = TerminalOptions {
                argv: args.command.clone(),
                cwd: args.cwd.clone(),
                env: args.env.iter().cloned().collect(),
                user: args.user.map(Into::into),
                rows,
                cols,
                ..TerminalOptions::default()
            };
            sandbox.open_terminal(&options).doing(&format!("opening a terminal in {}", args.id))?
        }
    };
    let pid = term.pid();
    // After the connection is made: until then ^C simply ends sandlot. A resize in between is caught
    // by the size check below.
    let signals = watch_signals()?;
    if let Some(now) = window_size().filter(|now| Some(*now) != size) {
        term.resize(now.0, now.1).doing("resizing the terminal")?;
    }
    let outcome = {
        let _raw = if interactive { Some(RawMode::enter()?) } else { None };
        // Dropped before `_raw`: the screen is reset, then the settings restored.
        let _screen = termios::isatty(std::io::stdout().as_fd()).then(ScreenReset::arm);
        if !interactive && _screen.is_some() {
            // Without raw mode there is no hook of `RawMode`'s to reset the screen on a panic.
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                screen::reset();
                previous(info);
            }));
        }
        pump(&mut term, &signals, interactive)
    };
    match outcome? {
        Outcome::Exited(code) => {
            term.close();
            Ok(code)
        }
        Outcome::Closed => {
            eprintln!(
                "sandlot: the connection closed; the terminal may still run: sandlot sandbox shell {} --attach {pid}",
                args.id
            );
            Ok(1)
        }
        Outcome::Signal(sig) => {
            term.close();
            eprintln!("sandlot: detached; the terminal runs on: sandlot sandbox shell {} --attach {pid}", args.id);
            Ok(128 + i32::from(sig))
        }
    }
}

/// A line for the user while the terminal may be raw (`\r\n`).
fn note(interactive: bool, text: &str) {
    let end = if interactive { "\r\n" } else { "\n" };
    eprint!("sandlot: {}{end}", sanitize(text));
}

/// Moves bytes until the process ends, the connection closes or a signal says to stop.
fn pump(term: &mut Terminal, signals: &UnixStream, interactive: bool) -> anyhow::Result<Outcome> {
    term.set_nonblocking(true).doing("setting up the connection")?;
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout().lock();
    let mut stdin_open = true;
    let mut buf = vec![0u8; 16 << 10];
    let mut signals_in = signals;
    let mut alt = AltScreen::default();
    loop {
        let mut sock_flags = PollFlags::POLLIN;
        if term.wants_flush() {
            sock_flags |= PollFlags::POLLOUT;
        }
        let (sock_ready, stdin_ready, sig_ready) = {
            let mut fds =
                vec![PollFd::new(term.socket().as_fd(), sock_flags), PollFd::new(signals.as_fd(), PollFlags::POLLIN)];
            // Input waits while earlier input is still queued for the connection.
            if stdin_open && !term.wants_flush() {
                fds.push(PollFd::new(stdin.as_fd(), PollFlags::POLLIN));
            }
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e).context("waiting for input"),
            }
            let ready = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
            (ready(&fds[0]), fds.get(2).is_some_and(ready), ready(&fds[1]))
        };
        if sig_ready {
            let mut b = [0u8; 16];
            let n = signals_in.read(&mut b).context("reading the signal socket")?;
            for &s in &b[..n] {
                if s == WINCH {
                    if let Some((rows, cols)) = window_size() {
                        term.resize(rows, cols).doing("resizing the terminal")?;
                    }
                } else {
                    return Ok(Outcome::Signal(s));
                }
            }
        }
        if sock_ready {
            if term.wants_flush() {
                term.flush().doing("writing to the terminal")?;
            }
            while let Some(event) = term.read().doing("reading the terminal")? {
                match event {
                    TerminalEvent::Output(bytes) => {
                        alt.feed(&bytes);
                        stdout.write_all(&bytes).context("writing to standard output")?;
                        stdout.flush().context("writing to standard output")?;
                    }
                    TerminalEvent::Exit(exit) => return Ok(Outcome::Exited(exit.exit_code)),
                    TerminalEvent::Error { message, .. } => note(interactive, &message),
                    TerminalEvent::Closed => return Ok(Outcome::Closed),
                }
            }
        }
        if stdin_ready {
            match nix::unistd::read(libc::STDIN_FILENO, &mut buf) {
                Ok(0) => {
                    stdin_open = false;
                    // End of a piped input: the terminal's end-of-file character.
                    term.write(&[4]).doing("writing to the terminal")?;
                }
                Ok(n) => term.write(&buf[..n]).doing("writing to the terminal")?,
                Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => {}
                Err(e) => return Err(e).context("reading standard input"),
            }
        }
    }
}
