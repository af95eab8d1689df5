//! [`Terminal`]: a sandbox terminal over the WebSocket route `GET /v1/sandboxes/{id}/pty`.
//!
//! The connection is a plain TCP connection to the client's server URL (http only, like the rest of
//! this client), authenticated with the client's key in `Authorization`. Binary frames carry the
//! terminal's bytes; text frames carry the JSON control messages of [`sandlot_api::PtyServerMessage`]
//! and [`sandlot_api::PtyClientMessage`].

use std::collections::BTreeMap;
use std::io;
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use sandlot_api::{ExitStatus, PtyClientMessage, PtyServerMessage, User, PTY_SUBPROTOCOL};
use tungstenite::client::IntoClientRequest;
use tungstenite::handshake::HandshakeError;
use tungstenite::protocol::WebSocketConfig;
use tungstenite::{Message, WebSocket};

use crate::error::{Error, ErrorKind, Result};
use crate::sandbox::Sandbox;
use crate::url;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the upgrade and the server's `started` message may take (the server may auto-resume the
/// sandbox first).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(60);

/// What to run in a new terminal ([`Sandbox::open_terminal`]).
#[derive(Debug, Clone)]
pub struct TerminalOptions {
    /// Program and arguments, run directly. With neither this nor `cmd`: the user's login shell
    /// (bash where the image has it, else sh).
    pub argv: Vec<String>,
    /// A command line for `/bin/sh -c` (instead of `argv`).
    pub cmd: Option<String>,
    /// Working directory (default: the user's home, or the image's working directory).
    pub cwd: Option<String>,
    /// Extra environment variables.
    pub env: BTreeMap<String, String>,
    /// Who runs it (default: the image's user, else `user`).
    pub user: Option<User>,
    /// Terminal rows.
    pub rows: u16,
    /// Terminal columns.
    pub cols: u16,
}

impl Default for TerminalOptions {
    fn default() -> Self {
        TerminalOptions { argv: Vec::new(), cmd: None, cwd: None, env: BTreeMap::new(), user: None, rows: 24, cols: 80 }
    }
}

/// How a terminal's process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TerminalExit {
    /// How it ended.
    pub status: ExitStatus,
    /// Exit code (128+signal when a signal ended it).
    pub exit_code: i32,
    /// Signal number when a signal ended it.
    pub signal: Option<i32>,
}

/// One thing read from a terminal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TerminalEvent {
    /// Bytes the terminal printed (escape sequences included).
    Output(Vec<u8>),
    /// The process ended; the server closes the connection next.
    Exit(TerminalExit),
    /// The server could not act on something sent (a bad size, input the process no longer takes).
    Error {
        /// Stable error code.
        code: String,
        /// Explanation.
        message: String,
    },
    /// The connection closed without an exit (the server stopped, or dropped a client that did not
    /// read); the process may still run: attach again by its pid.
    Closed,
}

/// A terminal in a sandbox: a pty process that outlives this connection. Attach to it again with
/// [`Sandbox::attach_terminal`] and its pid.
pub struct Terminal {
    ws: WebSocket<TcpStream>,
    pid: u64,
    unflushed: bool,
}

impl std::fmt::Debug for Terminal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Terminal").field("pid", &self.pid).finish_non_exhaustive()
    }
}

impl Sandbox {
    /// Starts a terminal (by default the user's login shell) and connects to it.
    pub fn open_terminal(&self, options: &TerminalOptions) -> Result<Terminal> {
        let mut pairs: Vec<(&str, String)> = Vec::new();
        for a in &options.argv {
            pairs.push(("argv", a.clone()));
        }
        if let Some(cmd) = &options.cmd {
            pairs.push(("cmd", cmd.clone()));
        }
        if let Some(cwd) = &options.cwd {
            pairs.push(("cwd", cwd.clone()));
        }
        for (k, v) in &options.env {
            pairs.push(("env", format!("{k}={v}")));
        }
        if let Some(user) = options.user {
            pairs.push(("user", user.name().to_string()));
        }
        pairs.push(("rows", options.rows.to_string()));
        pairs.push(("cols", options.cols.to_string()));
        Terminal::connect(self, &pairs)
    }

    /// Connects to terminal `pid` (see [`Terminal::pid`]): its recent output (up to the server's
    /// scrollback) comes first, then what it prints from now on. With `size`, the terminal is
    /// resized to `(rows, cols)` first.
    pub fn attach_terminal(&self, pid: u64, size: Option<(u16, u16)>) -> Result<Terminal> {
        let mut pairs = vec![("pid", pid.to_string())];
        if let Some((rows, cols)) = size {
            pairs.push(("rows", rows.to_string()));
            pairs.push(("cols", cols.to_string()));
        }
        Terminal::connect(self, &pairs)
    }
}

/// Host, port and path prefix of an `http://` base URL.
fn authority(base: &str) -> Result<(String, String)> {
    let config = |why: &str| {
        Error::new(
            ErrorKind::Config,
            format!("cannot use server URL {base} for a terminal: {why} (expected e.g. http://127.0.0.1:7423)"),
        )
    };
    let rest = match base.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
        Some((scheme, _)) if scheme.eq_ignore_ascii_case("https") => {
            return Err(config("this client speaks plain http only, as its other calls do"))
        }
        _ => return Err(config("it must start with http://")),
    };
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if host.is_empty() || host.contains('@') {
        return Err(config("it names no host"));
    }
    Ok((host.to_string(), path.to_string()))
}

fn ws_error(what: &str, e: tungstenite::Error) -> Error {
    match e {
        tungstenite::Error::Io(e) => Error::io(what, e),
        e => Error::new(ErrorKind::Protocol, format!("{what}: {e}")),
    }
}

impl Terminal {
    fn connect(sandbox: &Sandbox, pairs: &[(&str, String)]) -> Result<Terminal> {
        let client = sandbox.client();
        let (host, prefix) = authority(client.url())?;
        let query: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let target =
            format!("ws://{host}{prefix}/v1/sandboxes/{}/pty{}", url::segment(sandbox.id()), url::query(&query));
        let addr_host = if host.contains(':') && !host.ends_with(']') { host.clone() } else { format!("{host}:80") };
        let addrs: Vec<_> = addr_host
            .to_socket_addrs()
            .map_err(|e| Error::new(ErrorKind::Connect, format!("cannot resolve {host}: {e}")))?
            .collect();
        let mut last = None;
        let mut tcp = None;
        for a in addrs {
            match TcpStream::connect_timeout(&a, CONNECT_TIMEOUT) {
                Ok(s) => {
                    tcp = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let tcp = tcp.ok_or_else(|| {
            Error::new(
                ErrorKind::Connect,
                format!(
                    "cannot reach sandlot at {}: {}; start a server with `sudo sandlot serve`",
                    client.url(),
                    last.map_or("no address".to_string(), |e| e.to_string())
                ),
            )
        })?;
        let _ = tcp.set_nodelay(true);
        tcp.set_read_timeout(Some(HANDSHAKE_TIMEOUT)).map_err(|e| Error::io("setting a timeout", e))?;
        let mut request = target
            .as_str()
            .into_client_request()
            .map_err(|e| Error::new(ErrorKind::Config, format!("the terminal URL {target}: {e}")))?;
        let headers = request.headers_mut();
        let bearer = format!("Bearer {}", client.api_key());
        headers.insert(
            "authorization",
            bearer
                .parse()
                .map_err(|_| Error::new(ErrorKind::Config, "the API key holds characters a header cannot"))?,
        );
        headers.insert("sec-websocket-protocol", PTY_SUBPROTOCOL.parse().expect("a valid header"));
        let config = WebSocketConfig::default().max_message_size(Some(16 << 20)).max_frame_size(Some(16 << 20));
        let (ws, _) = tungstenite::client::client_with_config(request, tcp, Some(config)).map_err(|e| match e {
            HandshakeError::Failure(tungstenite::Error::Http(response)) => {
                let body = response.body().as_deref().map(String::from_utf8_lossy).unwrap_or_default();
                Error::from_status(response.status().as_u16(), &body)
            }
            HandshakeError::Failure(e) => ws_error("opening the terminal", e),
            HandshakeError::Interrupted(_) => Error::new(ErrorKind::Io, "opening the terminal: interrupted"),
        })?;
        let mut term = Terminal { ws, pid: 0, unflushed: false };
        loop {
            match term.ws.read().map_err(|e| ws_error("waiting for the terminal to start", e))? {
                Message::Text(t) => match serde_json::from_str::<PtyServerMessage>(t.as_str()) {
                    Ok(PtyServerMessage::Started { pid }) => {
                        term.pid = pid;
                        break;
                    }
                    _ => {
                        return Err(Error::new(
                            ErrorKind::Protocol,
                            format!("the terminal's first message is not `started`: {}", t.as_str()),
                        ))
                    }
                },
                Message::Ping(_) | Message::Pong(_) => {}
                other => {
                    return Err(Error::new(
                        ErrorKind::Protocol,
                        format!("the terminal's first message is not `started`: {other:?}"),
                    ))
                }
            }
        }
        term.ws.get_mut().set_read_timeout(None).map_err(|e| Error::io("clearing the timeout", e))?;
        Ok(term)
    }

    /// The terminal's process id in the sandbox's API (to attach again, or kill it).
    pub fn pid(&self) -> u64 {
        self.pid
    }

    /// The connection, for `poll(2)` and for timeouts ([`TcpStream::set_read_timeout`]); don't read or
    /// write it directly.
    pub fn socket(&self) -> &TcpStream {
        self.ws.get_ref()
    }

    /// Makes reads and writes non-blocking: [`Terminal::read`] then answers `None` when nothing is
    /// there yet, and writes that do not fit are kept until [`Terminal::flush`].
    pub fn set_nonblocking(&mut self, nonblocking: bool) -> Result<()> {
        self.ws.get_mut().set_nonblocking(nonblocking).map_err(|e| Error::io("setting the connection's mode", e))
    }

    /// The next event, waiting for it (or `None` at once in non-blocking mode, or when a read timeout
    /// passes, if nothing is there).
    pub fn read(&mut self) -> Result<Option<TerminalEvent>> {
        loop {
            let msg = match self.ws.read() {
                Ok(m) => m,
                Err(tungstenite::Error::Io(e))
                    if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) =>
                {
                    return Ok(None)
                }
                Err(
                    tungstenite::Error::ConnectionClosed
                    | tungstenite::Error::AlreadyClosed
                    | tungstenite::Error::Protocol(tungstenite::error::ProtocolError::ResetWithoutClosingHandshake),
                ) => return Ok(Some(TerminalEvent::Closed)),
                Err(e) => return Err(ws_error("reading the terminal", e)),
            };
            return Ok(Some(match msg {
                Message::Binary(b) => TerminalEvent::Output(b.to_vec()),
                Message::Text(t) => match serde_json::from_str::<PtyServerMessage>(t.as_str()) {
                    Ok(PtyServerMessage::Exit { status, exit_code, signal }) => {
                        TerminalEvent::Exit(TerminalExit { status, exit_code, signal })
                    }
                    Ok(PtyServerMessage::Error { code, message }) => TerminalEvent::Error { code, message },
                    // A message this client does not know (a newer server's) is skipped.
                    Ok(PtyServerMessage::Started { .. }) | Err(_) => continue,
                },
                Message::Close(_) => TerminalEvent::Closed,
                Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => continue,
            }));
        }
    }

    fn send(&mut self, msg: Message) -> Result<()> {
        match self.ws.write(msg) {
            Ok(()) => {}
            Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(ws_error("writing to the terminal", e)),
        }
        self.flush().map(|_| ())
    }

    /// Sends what earlier writes left queued; `true` when nothing is left (in non-blocking mode, wait
    /// for the socket to be writable and call it again otherwise).
    pub fn flush(&mut self) -> Result<bool> {
        match self.ws.flush() {
            Ok(()) => self.unflushed = false,
            Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => self.unflushed = true,
            Err(e) => return Err(ws_error("writing to the terminal", e)),
        }
        Ok(!self.unflushed)
    }

    /// Whether earlier writes are still queued ([`Terminal::flush`]).
    pub fn wants_flush(&self) -> bool {
        self.unflushed
    }

    /// Types `bytes` into the terminal (in frames of at most 64 KiB, the server's limit).
    pub fn write(&mut self, bytes: &[u8]) -> Result<()> {
        for chunk in bytes.chunks(sandlot_api::PTY_MAX_INPUT_FRAME) {
            self.send(Message::Binary(chunk.to_vec().into()))?;
        }
        Ok(())
    }

    /// Resizes the terminal (its process gets SIGWINCH).
    pub fn resize(&mut self, rows: u16, cols: u16) -> Result<()> {
        let text = serde_json::to_string(&PtyClientMessage::Resize { rows, cols }).expect("serialises");
        self.send(Message::Text(text.into()))
    }

    /// Closes the connection; the process runs on.
    pub fn close(mut self) {
        let _ = self.ws.close(None);
        let _ = self.ws.flush();
    }
}
