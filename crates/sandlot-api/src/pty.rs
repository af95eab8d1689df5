//! Terminals over WebSocket (`GET /v1/sandboxes/{id}/pty`): the control messages of its text frames.
//! Binary frames carry the terminal's bytes, both ways; text frames carry one JSON object each.

use serde::{Deserialize, Serialize};

use crate::ExitStatus;

/// The WebSocket subprotocol of the terminal route; the server selects it (and only it).
pub const PTY_SUBPROTOCOL: &str = "sandlot.v1";
/// Prefix of the subprotocol that carries the API key where a client cannot set `Authorization`
/// (browsers): `sandlot.bearer.<KEY>`, offered beside [`PTY_SUBPROTOCOL`] and never echoed.
pub const PTY_BEARER_PREFIX: &str = "sandlot.bearer.";
/// Largest frame (and message) a client may send, in bytes; larger ones close the connection.
pub const PTY_MAX_INPUT_FRAME: usize = 64 << 10;

/// A control message from the client (a text frame).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum PtyClientMessage {
    /// The terminal's new size, in character cells (each 1-1000); the process gets SIGWINCH.
    Resize {
        /// Rows.
        rows: u16,
        /// Columns.
        cols: u16,
    },
}

/// A control message from the server (a text frame).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PtyServerMessage {
    /// The first message: the terminal's process, to reattach with `?pid=` or to kill.
    Started {
        /// API process id.
        pid: u64,
    },
    /// The process ended; the server closes the connection after this message (code 1000).
    Exit {
        /// How it ended.
        status: ExitStatus,
        /// Exit code when `status` is `exited`; 128+signal when a signal ended it.
        exit_code: i32,
        /// Signal number when a signal ended it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
    },
    /// A message the server could not act on (a malformed control message, a size out of range, input
    /// the process no longer takes); the connection stays open.
    Error {
        /// Stable error code (as in the API's error bodies).
        code: String,
        /// Human explanation.
        message: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_the_documented_json() {
        let m: PtyClientMessage = serde_json::from_str(r#"{"type":"resize","rows":40,"cols":120}"#).unwrap();
        assert_eq!(m, PtyClientMessage::Resize { rows: 40, cols: 120 });
        assert_eq!(
            serde_json::to_string(&PtyServerMessage::Started { pid: 3 }).unwrap(),
            r#"{"type":"started","pid":3}"#
        );
        let exit = PtyServerMessage::Exit { status: ExitStatus::Exited, exit_code: 3, signal: None };
        assert_eq!(serde_json::to_string(&exit).unwrap(), r#"{"type":"exit","status":"exited","exit_code":3}"#);
    }
}
