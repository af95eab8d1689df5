//! The Connect protocol (connectrpc.com/docs/protocol), as much of it as envd's clients use: unary
//! calls in `application/proto` or `application/json`, server- and client-streaming calls in
//! `application/connect+proto` / `application/connect+json` (5-byte envelopes: a flags byte, a
//! big-endian length; flag 0x02 marks the end-of-stream message `{}` or `{"error": …}`), errors as
//! `{"code", "message"}`, and `Connect-Timeout-Ms`.
//!
//! Everything a client sends is bounded: a message is refused past [`MAX_MESSAGE_BYTES`] before it is
//! buffered, compressed messages (which we never offer) are refused.

use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::{Buf, Bytes, BytesMut};
use futures_util::StreamExt;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::mpsc;

use super::ConnectError;

/// The largest message a client may send (stdin chunks are the big ones; the SDKs send small ones).
pub const MAX_MESSAGE_BYTES: usize = 4 << 20;
/// Envelope flag: the payload is compressed.
const FLAG_COMPRESSED: u8 = 0x01;
/// Envelope flag: the end-of-stream message.
const FLAG_END_STREAM: u8 = 0x02;

/// A message both wire forms can carry.
pub trait Message: prost::Message + Default + Serialize + DeserializeOwned + Send + 'static {}
impl<T: prost::Message + Default + Serialize + DeserializeOwned + Send + 'static> Message for T {}

/// How messages of a call are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    Proto,
    Json,
}

impl Codec {
    /// The codec of a unary call (`streaming: false`) or a streaming one, from its Content-Type.
    pub fn of(headers: &HeaderMap, streaming: bool) -> Result<Codec, ConnectError> {
        let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
        let ct = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        let codec = match (ct.as_str(), streaming) {
            ("application/proto", false) | ("application/connect+proto", true) => Codec::Proto,
            ("application/json", false) | ("application/connect+json", true) => Codec::Json,
            _ => {
                let want = if streaming {
                    "application/connect+json or application/connect+proto"
                } else {
                    "application/json or application/proto"
                };
                return Err(ConnectError::new(
                    "unimplemented",
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    format!("content type {ct:?} is not served here: send {want}"),
                ));
            }
        };
        // We offer no compression: a compressed body could not be read.
        for name in ["content-encoding", "connect-content-encoding"] {
            if let Some(enc) = headers.get(name).and_then(|v| v.to_str().ok()) {
                if !enc.eq_ignore_ascii_case("identity") {
                    return Err(ConnectError::new(
                        "unimplemented",
                        StatusCode::UNSUPPORTED_MEDIA_TYPE,
                        format!("{name} {enc:?} is not supported: send messages uncompressed"),
                    ));
                }
            }
        }
        Ok(codec)
    }

    fn unary_type(self) -> &'static str {
        match self {
            Codec::Proto => "application/proto",
            Codec::Json => "application/json",
        }
    }

    fn stream_type(self) -> &'static str {
        match self {
            Codec::Proto => "application/connect+proto",
            Codec::Json => "application/connect+json",
        }
    }

    /// Decodes one message.
    pub fn decode<T: Message>(self, data: &[u8]) -> Result<T, ConnectError> {
        match self {
            Codec::Proto => {
                T::decode(data).map_err(|e| ConnectError::invalid(format!("malformed protobuf message: {e}")))
            }
            Codec::Json => serde_json::from_slice(if data.is_empty() { b"{}" } else { data })
                .map_err(|e| ConnectError::invalid(format!("malformed JSON message: {e}"))),
        }
    }

    /// Encodes one message.
    pub fn encode<T: Message>(self, msg: &T) -> Vec<u8> {
        match self {
            Codec::Proto => msg.encode_to_vec(),
            Codec::Json => serde_json::to_vec(msg).expect("envd messages serialise to JSON"),
        }
    }
}

/// The deadline a client set with `Connect-Timeout-Ms` (at most 10 digits, as the protocol says).
pub fn timeout(headers: &HeaderMap) -> Result<Option<Duration>, ConnectError> {
    let Some(v) = headers.get("connect-timeout-ms") else { return Ok(None) };
    let ms = v
        .to_str()
        .ok()
        .filter(|s| !s.is_empty() && s.len() <= 10 && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| ConnectError::invalid("Connect-Timeout-Ms must be a positive number of milliseconds"))?;
    Ok(Some(Duration::from_millis(ms)))
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

/// Takes one whole envelope off the front of `buf`, if it holds one; refuses oversized and
/// compressed ones as soon as their header is in.
pub fn split_envelope(buf: &mut BytesMut) -> Result<Option<(u8, Bytes)>, ConnectError> {
    if buf.len() < 5 {
        return Ok(None);
    }
    let flags = buf[0];
    let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
    if len > MAX_MESSAGE_BYTES {
        return Err(too_large());
    }
    if flags & FLAG_COMPRESSED != 0 {
        return Err(ConnectError::invalid("compressed message: none was negotiated; send messages uncompressed"));
    }
    if buf.len() < 5 + len {
        return Ok(None);
    }
    buf.advance(5);
    Ok(Some((flags, buf.split_to(len).freeze())))
}

/// One envelope.
pub fn envelope(flags: u8, payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + payload.len());
    out.extend_from_slice(&[flags]);
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out.freeze()
}

/// The end-of-stream envelope: `{}`, or the error the stream ended with.
pub fn end_of_stream(error: Option<&ConnectError>) -> Bytes {
    let body = match error {
        None => serde_json::json!({}),
        Some(e) => serde_json::json!({"error": {"code": e.code, "message": e.message}}),
    };
    envelope(FLAG_END_STREAM, body.to_string().as_bytes())
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
    tx: mpsc::Sender<Bytes>,
    queue: crate::server::app::Abandon<Bytes>,
    finished: bool,
}

/// Messages queued per stream before its producer waits for the client.
const STREAM_QUEUE: usize = 16;

/// How long a stream waits for its client to take a message: past it the stream is ended, so a
/// client that stops reading holds what its producer holds (a process's output, a transfer) only
/// this long.
pub const STALL: Duration = Duration::from_secs(60);

impl ServerStream {
    /// A stream and the response that carries it.
    pub fn open(codec: Codec) -> (ServerStream, Response) {
        let (tx, rx) = mpsc::channel::<Bytes>(STREAM_QUEUE);
        let (messages, queue) = crate::server::app::abandonable_queue(rx);
        let body = Body::from_stream(messages.map(Ok::<_, std::convert::Infallible>));
        let resp = ([(header::CONTENT_TYPE, codec.stream_type())], body).into_response();
        (ServerStream { codec, tx, queue, finished: false }, resp)
    }

    /// Ends the stream for a client that stopped reading: what is queued is dropped, no end message
    /// is written (there is no room for it), and the client that reads again sees a cut stream.
    pub fn abandon(mut self) {
        self.finished = true;
        self.queue.abandon();
    }

    /// Sends one message; `false` once the client has gone.
    pub async fn send<T: Message>(&self, msg: &T) -> bool {
        self.tx.send(envelope(0, &self.codec.encode(msg))).await.is_ok()
    }

    /// Waits until the client has gone.
    pub async fn gone(&self) {
        self.tx.closed().await
    }

    /// Ends the stream, with `error` if it failed.
    pub async fn finish(mut self, error: Option<ConnectError>) {
        self.finished = true;
        // Bounded: the client may have stopped reading with the queue full.
        let _ = tokio::time::timeout(STALL, self.tx.send(end_of_stream(error.as_ref()))).await;
    }
}

impl Drop for ServerStream {
    fn drop(&mut self) {
        if !self.finished {
            let e = ConnectError::new("internal", StatusCode::INTERNAL_SERVER_ERROR, "the stream ended unexpectedly");
            let _ = self.tx.try_send(end_of_stream(Some(&e)));
        }
    }
}

/// The keepalive interval a client asked for (`Keepalive-Ping-Interval`, seconds), bounded to
/// 1–600 s; `None` when it asked for none.
pub fn keepalive(headers: &HeaderMap) -> Option<Duration> {
    let secs = headers.get("keepalive-ping-interval")?.to_str().ok()?.trim().parse::<u64>().ok()?;
    Some(Duration::from_secs(secs.clamp(1, 600)))
}

#[cfg(test)]
mod tests {
    use super::super::proto::{self, process_event, process_selector};
    use super::*;

    #[test]
    fn envelopes_split_only_when_whole_and_keep_the_rest() {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&envelope(0, b"abc"));
        buf.extend_from_slice(&envelope(FLAG_END_STREAM, b"{}")[..4]);
        assert_eq!(split_envelope(&mut buf).unwrap(), Some((0, Bytes::from_static(b"abc"))));
        assert_eq!(split_envelope(&mut buf).unwrap(), None, "a partial envelope waits for more");
        buf.extend_from_slice(&envelope(FLAG_END_STREAM, b"{}")[4..]);
        assert_eq!(split_envelope(&mut buf).unwrap(), Some((FLAG_END_STREAM, Bytes::from_static(b"{}"))));
        assert!(buf.is_empty());
    }

    #[test]
    fn an_oversized_envelope_is_refused_from_its_header_alone() {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&[0]);
        buf.extend_from_slice(&((MAX_MESSAGE_BYTES as u32) + 1).to_be_bytes());
        let e = split_envelope(&mut buf).unwrap_err();
        assert_eq!(e.code, "resource_exhausted");
    }

    #[test]
    fn a_compressed_envelope_is_refused() {
        let mut buf = BytesMut::from(&envelope(FLAG_COMPRESSED, b"x")[..]);
        assert_eq!(split_envelope(&mut buf).unwrap_err().code, "invalid_argument");
    }

    #[test]
    fn end_of_stream_carries_the_error() {
        let e = ConnectError::not_found("process 7");
        let env = end_of_stream(Some(&e));
        assert_eq!(env[0], FLAG_END_STREAM);
        let v: serde_json::Value = serde_json::from_slice(&env[5..]).unwrap();
        assert_eq!(v, serde_json::json!({"error": {"code": "not_found", "message": "process 7"}}));
        assert_eq!(&end_of_stream(None)[5..], b"{}");
    }

    #[test]
    fn json_mapping_is_protobufs() {
        let ev = proto::StartResponse {
            event: Some(proto::ProcessEvent {
                event: Some(process_event::Event::Data(process_event::DataEvent {
                    output: Some(process_event::Output::Stdout(b"hi\n".to_vec())),
                })),
            }),
        };
        let json = String::from_utf8(Codec::Json.encode(&ev)).unwrap();
        assert_eq!(json, r#"{"event":{"data":{"stdout":"aGkK"}}}"#);
        let end =
            process_event::EndEvent { exit_code: -1, exited: false, status: "signal: killed".into(), error: None };
        assert_eq!(
            String::from_utf8(Codec::Json.encode(&end)).unwrap(),
            r#"{"exitCode":-1,"exited":false,"status":"signal: killed"}"#
        );
        let sig: proto::SendSignalRequest =
            Codec::Json.decode(br#"{"process":{"pid":3},"signal":"SIGNAL_SIGKILL"}"#).unwrap();
        assert_eq!(sig.signal, proto::Signal::Sigkill as i32);
        assert_eq!(sig.process.unwrap().selector, Some(process_selector::Selector::Pid(3)));
        let by_number: proto::SendSignalRequest = Codec::Json.decode(br#"{"signal":15,"unknownField":1}"#).unwrap();
        assert_eq!(by_number.signal, 15);
        assert!(Codec::Json.decode::<proto::SendSignalRequest>(br#"{"signal":"SIGHUP"}"#).is_err());
        let entry = proto::EntryInfo {
            size: 1 << 40,
            r#type: proto::FileType::Directory as i32,
            modified_time: Some(proto::Timestamp { seconds: 1_714_564_800, nanos: 123_000_000 }),
            ..Default::default()
        };
        let v: serde_json::Value = serde_json::from_slice(&Codec::Json.encode(&entry)).unwrap();
        assert_eq!(v["size"], "1099511627776", "int64 is a string");
        assert_eq!(v["type"], "FILE_TYPE_DIRECTORY");
        assert_eq!(v["modifiedTime"], "2024-05-01T12:00:00.123Z");
        let input: proto::SendInputRequest = Codec::Json.decode(br#"{"input":{"stdin":"aGk"}}"#).unwrap();
        assert_eq!(input.input.unwrap().input, Some(proto::process_input::Input::Stdin(b"hi".to_vec())));
        let none: proto::StartRequest = Codec::Json.decode(b"").unwrap();
        assert!(none.process.is_none());
    }

    #[test]
    fn proto_round_trips() {
        let req = proto::StartRequest {
            process: Some(proto::ProcessConfig {
                cmd: "/bin/bash".into(),
                args: vec!["-c".into()],
                ..Default::default()
            }),
            stdin: Some(false),
            ..Default::default()
        };
        let back: proto::StartRequest = Codec::Proto.decode(&Codec::Proto.encode(&req)).unwrap();
        assert_eq!(back, req);
        assert_eq!(Codec::Proto.decode::<proto::StartRequest>(&[0xff, 0xff]).unwrap_err().code, "invalid_argument");
    }

    #[test]
    fn timeouts_are_at_most_ten_digits() {
        let mut h = HeaderMap::new();
        h.insert("connect-timeout-ms", "1500".parse().unwrap());
        assert_eq!(timeout(&h).unwrap(), Some(Duration::from_millis(1500)));
        h.insert("connect-timeout-ms", "12345678901".parse().unwrap());
        assert!(timeout(&h).is_err());
    }
}
