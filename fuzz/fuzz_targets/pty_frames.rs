//! The terminal route's client input (the `sandlot` binary's `server/pty/client.rs`, compiled here as
//! it is). The first byte picks what the rest is: one text frame's payload; the bytes a client sends
//! on the socket after the upgrade, read as frames by tungstenite (what axum's WebSocket runs) with the
//! limits the route sets; or the route's query string. Properties: a text frame is a resize within
//! `PTY_CELLS` or is answered with an `invalid_request` error; no frame or message read is larger
//! than `PTY_MAX_INPUT_FRAME`; a query that parses names no process twice over (`pid` alone, `cmd`
//! or `argv`) and has only whole `%XX` escapes.
#![no_main]

use std::io::{Read, Write};

use libfuzzer_sys::fuzz_target;
use sandlot_api::{codes, PtyServerMessage, PTY_CELLS, PTY_MAX_INPUT_FRAME};
use tungstenite::protocol::{Role, WebSocket, WebSocketConfig};
use tungstenite::Message;

#[allow(dead_code)]
#[path = "../../crates/sandlot/src/server/pty/client.rs"]
mod client;

/// A text frame, as the session hands it to `client::control`.
fn text(t: &str) {
    match client::control(t) {
        Ok(size) => assert!(
            PTY_CELLS.contains(&size.rows) && PTY_CELLS.contains(&size.cols),
            "resize to {}x{} accepted",
            size.rows,
            size.cols
        ),
        Err(PtyServerMessage::Error { code, .. }) => assert_eq!(code, codes::INVALID_REQUEST),
        Err(other) => panic!("a text frame answered with {other:?}"),
    }
}

/// The client's side of the connection: what it sent, then its end; what the server writes is dropped.
struct Client<'a>(&'a [u8]);

impl Read for Client<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for Client<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn socket(bytes: &[u8]) {
    // The limits `pty::pty` gives the upgrade (axum starts from tungstenite's defaults).
    let config =
        WebSocketConfig::default().max_message_size(Some(PTY_MAX_INPUT_FRAME)).max_frame_size(Some(PTY_MAX_INPUT_FRAME));
    let mut ws = WebSocket::from_raw_socket(Client(bytes), Role::Server, Some(config));
    // Each message takes at least a frame header of the input: this many reads end it.
    for _ in 0..=bytes.len() {
        match ws.read() {
            Ok(Message::Text(t)) => {
                assert!(t.len() <= PTY_MAX_INPUT_FRAME, "a {}-byte text message was read", t.len());
                text(t.as_str());
            }
            Ok(Message::Binary(b)) => assert!(b.len() <= PTY_MAX_INPUT_FRAME, "a {}-byte input frame was read", b.len()),
            Ok(_) => {}
            Err(_) => return,
        }
    }
}

fn query(raw: &str) {
    let Ok(q) = client::parse_query(Some(raw)) else { return };
    if q.pid.is_some() {
        assert!(q.cmd.is_none() && q.argv.is_empty() && q.cwd.is_none() && q.env.is_empty() && q.user.is_none());
    }
    assert!(q.cmd.is_none() || q.argv.is_empty(), "both cmd and argv");
    let b = raw.as_bytes();
    for (i, _) in raw.match_indices('%') {
        let hex = b.get(i + 1..i + 3).is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit));
        assert!(hex, "{raw:?} parsed with a bad escape at {i}");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    match mode % 3 {
        0 => {
            if let Ok(t) = std::str::from_utf8(rest) {
                text(t)
            }
        }
        1 => socket(rest),
        _ => query(&String::from_utf8_lossy(rest)),
    }
});
