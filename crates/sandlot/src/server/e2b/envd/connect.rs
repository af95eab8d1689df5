//! The Connect protocol (connectrpc.com/docs/protocol), as much of it as envd's clients use: unary
//! calls in `application/proto` or `application/json`, server- and client-streaming calls in
//! `application/connect+proto` / `application/connect+json` (5-byte envelopes: a flags byte, a
//! big-endian length; flag 0x02 marks the end-of-stream message `{}` or `{"error": …}`), errors as
//! `{"code", "message"}`, and `Connect-Timeout-Ms`. This is the HTTP half; the envelopes, codecs and
//! header values are [`super::frame`]'s (fuzzed as `envd_connect`).
//!
//! Everything a client sends is bounded: a message is refused past [`MAX_MESSAGE_BYTES`] before it is
//! buffered, compressed messages (which we never offer) are refused.

use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use tokio::sync::mpsc;

use super::frame::{envelope, split_envelope, FrameError, FLAG_END_STREAM};
pub use super::frame::{Codec, Message, MAX_MESSAGE_BYTES};
use super::ConnectError;
use crate::server::stream::{abandonable_queue, Abandon, Pace, StreamPolicy};

impl From<FrameError> for ConnectError {
    fn from(e: FrameError) -> Self {
        match e {
            FrameError::TooLarge => too_large(),
            FrameError::Unsupported(m) => ConnectError::new("unimplemented", StatusCode::UNSUPPORTED_MEDIA_TYPE, m),
            FrameError::Invalid(m) => ConnectError::invalid(m),
        }
    }
}

impl Codec {
    /// The codec of a unary call (`streaming: false`) or a streaming one, from its Content-Type
    /// (and its encodings: we offer none).
    pub fn of(headers: &HeaderMap, streaming: bool) -> Result<Codec, ConnectError> {
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let ct = text(header::CONTENT_TYPE.as_str()).unwrap_or("");
        let encodings = [
            ("content-encoding", text("content-encoding")),
            ("connect-content-encoding", text("connect-content-encoding")),
        ];
        Ok(Codec::negotiate(ct, encodings, streaming)?)
    }
}

/// The deadline a client set with `Connect-Timeout-Ms` (at most 10 digits, as the protocol says).
pub fn timeout(headers: &HeaderMap) -> Result<Option<Duration>, ConnectError> {
    let Some(v) = headers.get("connect-timeout-ms") else { return Ok(None) };
    Ok(Some(super::frame::timeout(v.as_bytes())?))
}

/// Reads a whole unary request body (at most [`MAX_MESSAGE_BYTES`]) and decodes it.
pub async fn read_unary<T: Message>(headers: &HeaderMap, body: Body) -> Result<(Codec, T), ConnectError> {
    let codec = Codec::of(headers, false)?;
    let bytes = axum::body::to_bytes(body, MAX_MESSAGE_BYTES).await.map_err(|_| too_large())?;
    Ok((codec, codec.decode(&bytes)?))
}

fn too_large() -> ConnectError {
    ConnectError::new(
        "resource_exhausted",
        StatusCode::TOO_MANY_REQUESTS,
        format!("message larger than {MAX_MESSAGE_BYTES} bytes: send input in smaller pieces"),
    )
}

/// A unary answer.
pub fn unary<T: Message>(codec: Codec, msg: &T) -> Response {
    ([(header::CONTENT_TYPE, codec.unary_type())], codec.encode(msg)).into_response()
}

/// A stream of enveloped messages from a request body, each bounded.
pub struct Envelopes {
    body: axum::body::BodyDataStream,
    buf: BytesMut,
    codec: Codec,
    ended: bool,
}

impl Envelopes {
    /// The envelopes of a streaming request.
    pub fn new(headers: &HeaderMap, body: Body) -> Result<Envelopes, ConnectError> {
        let codec = Codec::of(headers, true)?;
        Ok(Envelopes { body: body.into_data_stream(), buf: BytesMut::new(), codec, ended: false })
    }

    /// The codec of the call.
    pub fn codec(&self) -> Codec {
        self.codec
    }

    /// The next message; `None` at the end of the body or after an end-of-stream envelope.
    pub async fn next<T: Message>(&mut self) -> Result<Option<T>, ConnectError> {
        loop {
            if self.ended {
                return Ok(None);
            }
            if let Some((flags, payload)) = split_envelope(&mut self.buf)? {
                if flags & FLAG_END_STREAM != 0 {
                    self.ended = true;
                    return Ok(None);
                }
                return Ok(Some(self.codec.decode(&payload)?));
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.buf.extend_from_slice(&chunk),
                Some(Err(e)) => return Err(ConnectError::invalid(format!("request body broke off: {e}"))),
                None if self.buf.is_empty() => {
                    self.ended = true;
                    return Ok(None);
                }
                None => return Err(ConnectError::invalid("request body ended inside a message envelope")),
            }
        }
    }
}

/// The end-of-stream envelope: `{}`, or the error the stream ended with.
pub fn end_of_stream(error: Option<&ConnectError>) -> Bytes {
    super::frame::end_of_stream(error.map(|e| (e.code, e.message.as_str())))
}

/// The answer of a streaming call that failed before its stream began: as every streaming answer,
/// HTTP 200 with the error in the end-of-stream message (only a content type we cannot speak is an
/// HTTP error).
pub fn stream_error(codec: Codec, e: ConnectError) -> Response {
    if e.status.is_server_error() {
        tracing::error!(code = e.code, "envd: {}", e.message);
    }
    ([(header::CONTENT_TYPE, codec.stream_type())], end_of_stream(Some(&e))).into_response()
}

/// The sending half of a server stream. Dropping it without [`ServerStream::finish`] ends the
/// stream with an `internal` error, so a client never takes a cut stream for a whole one.
pub struct ServerStream {
    codec: Codec,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    queue: Abandon<Result<Bytes, std::io::Error>>,
    policy: StreamPolicy,
    finished: bool,
}

/// Messages queued per stream before its producer waits for the client.
const STREAM_QUEUE: usize = 16;

impl ServerStream {
    /// A stream and the response that carries it; its messages wait for the client under `policy`
    /// (past it the stream is ended, so a client that stops reading holds what its producer holds,
    /// a process's output or a watch, only that long).
    pub fn open(codec: Codec, policy: StreamPolicy) -> (ServerStream, Response) {
        let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(STREAM_QUEUE);
        let (messages, queue) = abandonable_queue(rx);
        let body = Body::from_stream(messages);
        let resp = ([(header::CONTENT_TYPE, codec.stream_type())], body).into_response();
        (ServerStream { codec, tx, queue, policy, finished: false }, resp)
    }

    /// The policy its messages wait under.
    pub fn pace(&self) -> Pace {
        Pace::new(self.policy)
    }

    /// Ends the stream for a client that stopped reading: what is queued is dropped, no end message
    /// is written (there is no room for it), and the client that reads again sees a cut stream.
    pub fn abandon(mut self) {
        self.finished = true;
        self.queue.abandon();
    }

    /// Sends one message; `false` once the client has gone.
    pub async fn send<T: Message>(&self, msg: &T) -> bool {
        self.tx.send(Ok(envelope(0, &self.codec.encode(msg)))).await.is_ok()
    }

    /// Cuts the connection under the stream, as a sandbox that dies under E2B's envd does: what is
    /// queued is still delivered, then the transfer aborts with no end message, which the SDKs
    /// read as a transport failure and answer by asking whether the sandbox still runs.
    pub async fn cut(mut self, why: &str) {
        self.finished = true;
        let _ = self.pace().send(self.tx.send(Err(std::io::Error::other(why.to_string())))).await;
    }

    /// Waits until the client has gone.
    pub async fn gone(&self) {
        self.tx.closed().await
    }

    /// Ends the stream, with `error` if it failed.
    pub async fn finish(mut self, error: Option<ConnectError>) {
        self.finished = true;
        // Bounded: the client may have stopped reading with the queue full.
        let _ = self.pace().send(self.tx.send(Ok(end_of_stream(error.as_ref())))).await;
    }
}

impl Drop for ServerStream {
    fn drop(&mut self) {
        if !self.finished {
            let e = ConnectError::new("internal", StatusCode::INTERNAL_SERVER_ERROR, "the stream ended unexpectedly");
            let _ = self.tx.try_send(Ok(end_of_stream(Some(&e))));
        }
    }
}

/// The keepalive interval a client asked for (`Keepalive-Ping-Interval`, seconds), bounded to
/// 1–600 s; `None` when it asked for none.
pub fn keepalive(headers: &HeaderMap) -> Option<Duration> {
    super::frame::keepalive(headers.get("keepalive-ping-interval")?.to_str().ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_errors_keep_their_connect_codes() {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&[0]);
        buf.extend_from_slice(&((MAX_MESSAGE_BYTES as u32) + 1).to_be_bytes());
        let e = ConnectError::from(split_envelope(&mut buf).unwrap_err());
        assert_eq!((e.code, e.status), ("resource_exhausted", StatusCode::TOO_MANY_REQUESTS));
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, "text/plain".parse().unwrap());
        let e = Codec::of(&h, false).unwrap_err();
        assert_eq!((e.code, e.status), ("unimplemented", StatusCode::UNSUPPORTED_MEDIA_TYPE));
        assert_eq!(
            Codec::Proto
                .decode::<super::super::proto::StartRequest>(&[0xff])
                .map_err(ConnectError::from)
                .unwrap_err()
                .code,
            "invalid_argument"
        );
    }

    #[test]
    fn end_of_stream_carries_the_error() {
        let e = ConnectError::not_found("process 7");
        let v: serde_json::Value = serde_json::from_slice(&end_of_stream(Some(&e))[5..]).unwrap();
        assert_eq!(v, serde_json::json!({"error": {"code": "not_found", "message": "process 7"}}));
    }

    #[test]
    fn timeouts_are_at_most_ten_digits() {
        let mut h = HeaderMap::new();
        h.insert("connect-timeout-ms", "1500".parse().unwrap());
        assert_eq!(timeout(&h).unwrap(), Some(Duration::from_millis(1500)));
        h.insert("connect-timeout-ms", "12345678901".parse().unwrap());
        assert!(timeout(&h).is_err());
        assert_eq!(timeout(&HeaderMap::new()).unwrap(), None);
    }
}
