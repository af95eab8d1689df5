//! `GET /v1/sandboxes/{id}/pty`: a terminal over WebSocket. Binary frames carry the terminal's bytes
//! both ways; text frames carry [`PtyClientMessage`](sandlot_api::PtyClientMessage)s (resize, read
//! by [`client`]) and [`PtyServerMessage`]s (`started` first, `exit` last, then a close). The process
//! is a background pty process started (or, with `?pid=`, attached to) through the control layer: it
//! outlives the connection, and a connection that attaches later gets its scrollback first.
//!
//! Everything checked before the upgrade answers as the API does (JSON error, 401/404/409/429), so a
//! client that can read the answer (the CLI) can say why. After it: input frames are at most
//! [`PTY_MAX_INPUT_FRAME`] bytes and handled one at a time (a client that sends faster than its
//! process's terminal takes input waits on its own TCP window); output is read from the process's
//! scrollback at this connection's pace (a slow reader skips ahead, it never makes the process or
//! another reader wait) and a connection that takes no frame within the stream policy's bound
//! ([`StreamPolicy`](super::stream::StreamPolicy)) is dropped.
//!
//! The sandbox and process are resolved once, when the connection opens: typing costs no store read
//! (see `Control::terminal_input` for a sandbox paused meanwhile). The key is re-checked every
//! [`LEASE_RECHECK`]: once it is revoked or expires, an `error` frame (`unauthenticated`) and a close
//! (1008) end the connection; the process runs on, as after any disconnect.

use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use sandlot_api::{
    codes, ExecEvent, ExecRequest, PtyServerMessage, PtySize, PTY_BEARER_PREFIX, PTY_MAX_INPUT_FRAME, PTY_SUBPROTOCOL,
};
use sandlot_control::{Caller, KeyLease, Kind, RawEvent, TerminalSlot, LEASE_RECHECK};

mod client;

use self::client::parse_query;
use super::app::AppState;
use super::error::ApiError;
use super::extract::{bearer_key, ApiPath};
use super::stream::Pace;

/// The command of a terminal that names none: the user's login shell, bash where the image has it,
/// else `sh` (busybox images).
pub const DEFAULT_SHELL: &str = "command -v bash >/dev/null 2>&1 && exec bash -l; exec sh -l";
/// Terminal size when the query names none.
const DEFAULT_SIZE: PtySize = PtySize { rows: 24, cols: 80 };
/// How often the server pings; a client from which nothing (not even a pong) came for
/// [`IDLE`] is closed.
const PING_EVERY: Duration = Duration::from_secs(30);
const IDLE: Duration = Duration::from_secs(90);

/// The subprotocols a client offers (`Sec-WebSocket-Protocol`, comma-separated, possibly repeated).
fn offered(headers: &HeaderMap) -> Vec<&str> {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

/// The caller, from `Authorization: Bearer KEY` or else from the offered subprotocol
/// `sandlot.bearer.KEY` (browsers cannot set headers on a WebSocket), and the key's lease: the session
/// re-checks it every [`LEASE_RECHECK`] and ends when the key is revoked or expires.
fn caller(app: &AppState, headers: &HeaderMap) -> Result<(Caller, KeyLease), ApiError> {
    let unauthenticated = |m: &str| ApiError::new(StatusCode::UNAUTHORIZED, codes::UNAUTHENTICATED, m);
    match bearer_key(headers) {
        Some(Some(key)) => return Ok(app.control.authenticate_lease(key)?),
        Some(None) => return Err(unauthenticated("malformed Authorization header; expected `Bearer <API key>`")),
        None => {}
    }
    let offered = offered(headers);
    let Some(key) = offered.iter().find_map(|p| p.strip_prefix(PTY_BEARER_PREFIX)) else {
        return Err(unauthenticated(&format!(
            "missing credentials; send `Authorization: Bearer <API key>`, or (from a browser) offer the WebSocket \
             subprotocols `{PTY_SUBPROTOCOL}` and `{PTY_BEARER_PREFIX}<API key>`"
        )));
    };
    if !offered.contains(&PTY_SUBPROTOCOL) {
        return Err(ApiError::invalid(format!(
            "a key in the subprotocols needs `{PTY_SUBPROTOCOL}` offered too: the server selects that one"
        )));
    }
    Ok(app.control.authenticate_lease(key)?)
}

pub async fn pty(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let (caller, lease) = caller(&app, &headers)?;
    let q = parse_query(raw.as_deref()).map_err(ApiError::invalid)?;
    let ws = ws.map_err(|e| {
        ApiError::invalid(format!(
            "this route is a WebSocket ({}): connect with a WebSocket client (`Upgrade: websocket`)",
            e.body_text()
        ))
    })?;
    let slot = match q.pid {
        Some(pid) => {
            let (proc, slot) = app.control.attach_terminal(&caller, &id, pid).await?;
            if let (Some(rows), Some(cols)) = (q.rows, q.cols) {
                if proc.running() {
                    app.control.terminal_resize(&caller, &slot, rows, cols).await?;
                }
            }
            slot
        }
        None => {
            let argv = match (q.cmd, q.argv.is_empty()) {
                (Some(cmd), _) => vec!["/bin/sh".into(), "-c".into(), cmd],
                (None, false) => q.argv,
                (None, true) => vec!["/bin/sh".into(), "-c".into(), DEFAULT_SHELL.into()],
            };
            let size = PtySize { rows: q.rows.unwrap_or(DEFAULT_SIZE.rows), cols: q.cols.unwrap_or(DEFAULT_SIZE.cols) };
            let req = ExecRequest {
                argv: Some(argv),
                cwd: q.cwd,
                env: q.env,
                user: q.user,
                pty: Some(size),
                ..Default::default()
            };
            app.control.open_terminal(&caller, &id, req).await?.1
        }
    };
    Ok(ws
        .protocols([PTY_SUBPROTOCOL])
        .max_message_size(PTY_MAX_INPUT_FRAME)
        .max_frame_size(PTY_MAX_INPUT_FRAME)
        .on_upgrade(move |socket| session(socket, app, caller, lease, slot)))
}

/// How a session ended.
enum End {
    /// The process ended and its `exit` was sent.
    Exited,
    /// The client closed, or its connection broke.
    Gone,
    /// The client took no frame within the stream policy's bound: nothing more is sent, not even a
    /// close.
    Stalled,
    /// Nothing came from the client for [`IDLE`].
    Idle,
    /// The sandbox ended and the process's end never came.
    SandboxEnded,
    /// The key the connection was opened with was revoked or expired (its `error` was sent).
    KeyEnded,
}

async fn session(mut socket: WebSocket, app: AppState, caller: Caller, mut lease: KeyLease, slot: TerminalSlot) {
    let end = drive(&mut socket, &app, &caller, &mut lease, &slot).await;
    // The process (its scrollback) and the connection's place are not held while the close waits for
    // a client.
    drop(slot);
    let close = |code: u16, reason: &str| Message::Close(Some(CloseFrame { code, reason: reason.into() }));
    let last = match end {
        End::Exited => Some(close(1000, "exited")),
        End::Gone => None,
        End::Stalled => None,
        End::Idle => Some(close(1001, "idle: no frame or pong from the client")),
        End::SandboxEnded => Some(close(1011, "the sandbox ended")),
        End::KeyEnded => Some(close(KEY_ENDED_CLOSE, "API key revoked or expired")),
    };
    if let Some(msg) = last {
        let _ = tokio::time::timeout(Duration::from_secs(2), socket.send(msg)).await;
    }
}

/// The close code when the connection's key stops working: 1008, policy violation.
const KEY_ENDED_CLOSE: u16 = 1008;

fn text(msg: &PtyServerMessage) -> Message {
    Message::Text(serde_json::to_string(msg).expect("messages serialise").into())
}

/// Sends one frame within `pace`'s bound; an end when the client is gone or did not take it.
async fn send(socket: &mut WebSocket, pace: &Pace, msg: Message) -> Result<(), End> {
    match pace.send(socket.send(msg)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(End::Gone),
        Err(_) => Err(End::Stalled),
    }
}

fn error_message(e: &sandlot_control::Error) -> PtyServerMessage {
    PtyServerMessage::Error { code: e.kind.code().to_string(), message: e.message.clone() }
}

async fn drive(
    socket: &mut WebSocket,
    app: &AppState,
    caller: &Caller,
    lease: &mut KeyLease,
    slot: &TerminalSlot,
) -> End {
    match run(socket, app, caller, lease, slot).await {
        Ok(never) => match never {},
        Err(end) => end,
    }
}

async fn run(
    socket: &mut WebSocket,
    app: &AppState,
    caller: &Caller,
    lease: &mut KeyLease,
    slot: &TerminalSlot,
) -> Result<std::convert::Infallible, End> {
    let proc = slot.process();
    let pid = proc.handle;
    let mut pace = Pace::new(app.streams);
    send(socket, &pace, text(&PtyServerMessage::Started { pid })).await?;
    let mut follow = proc.follow();
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + PING_EVERY, PING_EVERY);
    let mut heard = tokio::time::Instant::now();
    let mut recheck = tokio::time::interval_at(tokio::time::Instant::now() + LEASE_RECHECK, LEASE_RECHECK);
    // When the sandbox ended: the process's end follows within a grace, or the session ends anyway.
    let mut sandbox_ended: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            ev = follow.next_raw() => match ev {
                // A follower ends after the exit, which returned already.
                None => return Err(End::Exited),
                Some(RawEvent::Stdout(b) | RawEvent::Stderr(b)) => send(socket, &pace, Message::Binary(b.into())).await?,
                Some(RawEvent::Event(ExecEvent::Exited { status, exit_code, signal, .. })) => {
                    send(socket, &pace, text(&PtyServerMessage::Exit { status, exit_code, signal })).await?;
                    return Err(End::Exited);
                }
                Some(RawEvent::Event(ExecEvent::Error { code, message })) => {
                    send(socket, &pace, text(&PtyServerMessage::Error { code, message })).await?;
                    return Err(End::SandboxEnded);
                }
                Some(RawEvent::Event(_)) => {}
            },
            msg = socket.recv() => {
                heard = tokio::time::Instant::now();
                let reply = match msg {
                    None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return Err(End::Gone),
                    Some(Ok(Message::Binary(bytes))) => match app.control.terminal_input(caller, slot, &bytes).await {
                        Ok(()) => None,
                        // The process has ended or closed its input: its `exit` follows.
                        Err(e) if e.kind == Kind::Conflict && !proc.running() => None,
                        Err(e) => Some(error_message(&e)),
                    },
                    Some(Ok(Message::Text(t))) => match client::control(t.as_str()) {
                        Ok(size) => match app.control.terminal_resize(caller, slot, size.rows, size.cols).await {
                            Ok(()) => None,
                            Err(e) if e.kind == Kind::Conflict && !proc.running() => None,
                            Err(e) => Some(error_message(&e)),
                        },
                        Err(reply) => Some(reply),
                    },
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => None,
                };
                if let Some(reply) = reply {
                    send(socket, &pace, text(&reply)).await?;
                }
            },
            _ = recheck.tick() => {
                if let Err(e) = app.control.recheck_key(lease) {
                    tracing::info!(key = lease.id(), pid, "terminal closed: {}", e.message);
                    send(socket, &pace, text(&error_message(&e))).await?;
                    return Err(End::KeyEnded);
                }
            },
            _ = ping.tick() => {
                if heard.elapsed() > IDLE {
                    return Err(End::Idle);
                }
                send(socket, &pace, Message::Ping(Default::default())).await?;
            },
            _ = proc.sandbox_ended(), if sandbox_ended.is_none() => {
                sandbox_ended = Some(tokio::time::Instant::now());
                pace.sandbox_ended();
            },
            // The process's end is recorded as its sandbox goes; if it never is, the session ends anyway.
            _ = tokio::time::sleep_until(sandbox_ended.unwrap_or_else(tokio::time::Instant::now) + Duration::from_secs(5)),
                if sandbox_ended.is_some() => return Err(End::SandboxEnded),
        }
    }
}
