//! The pure half of the Connect protocol ([`super::connect`] is the HTTP half): 5-byte envelopes (a
//! flags byte, a big-endian length), the two message codecs, and the values of the headers a call is
//! bounded by. Nothing here knows HTTP types, so the fuzz target `envd_connect` compiles this file as
//! it is (with [`super::proto`]).
//!
//! Everything a client sends is bounded: an envelope is refused past [`MAX_MESSAGE_BYTES`] from its
//! header alone, before its payload is buffered; compressed ones (we never offer compression) are
//! refused.

use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// The largest message a client may send (stdin chunks are the big ones; the SDKs send small ones).
pub const MAX_MESSAGE_BYTES: usize = 4 << 20;
/// Envelope flag: the payload is compressed.
pub const FLAG_COMPRESSED: u8 = 0x01;
/// Envelope flag: the end-of-stream message.
pub const FLAG_END_STREAM: u8 = 0x02;
/// Bytes of an envelope's header.
pub const HEADER_LEN: usize = 5;

/// Why a client's message or header could not be read; [`super::connect`] gives each its Connect code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// An envelope declares more than [`MAX_MESSAGE_BYTES`] (`resource_exhausted`).
    TooLarge,
    /// A content type or encoding this server does not speak (`unimplemented`, HTTP 415).
    Unsupported(String),
    /// Anything else malformed (`invalid_argument`).
    Invalid(String),
}

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
    /// The codec of a unary call (`streaming: false`) or a streaming one, from its Content-Type and
    /// its `Content-Encoding` and `Connect-Content-Encoding` values (`None`: absent, or not text).
    pub fn negotiate(
        content_type: &str,
        encodings: [(&str, Option<&str>); 2],
        streaming: bool,
    ) -> Result<Codec, FrameError> {
        let ct = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        let codec = match (ct.as_str(), streaming) {
            ("application/proto", false) | ("application/connect+proto", true) => Codec::Proto,
            ("application/json", false) | ("application/connect+json", true) => Codec::Json,
            _ => {
                let want = if streaming {
                    "application/connect+json or application/connect+proto"
                } else {
                    "application/json or application/proto"
                };
                return Err(FrameError::Unsupported(format!("content type {ct:?} is not served here: send {want}")));
            }
        };
        // We offer no compression: a compressed body could not be read.
        for (name, enc) in encodings {
            if let Some(enc) = enc {
                if !enc.eq_ignore_ascii_case("identity") {
                    return Err(FrameError::Unsupported(format!(
                        "{name} {enc:?} is not supported: send messages uncompressed"
                    )));
                }
            }
        }
        Ok(codec)
    }

    /// The Content-Type of a unary answer.
    pub fn unary_type(self) -> &'static str {
        match self {
            Codec::Proto => "application/proto",
            Codec::Json => "application/json",
        }
    }

    /// The Content-Type of a streaming answer.
    pub fn stream_type(self) -> &'static str {
        match self {
            Codec::Proto => "application/connect+proto",
            Codec::Json => "application/connect+json",
        }
    }

    /// Decodes one message.
    pub fn decode<T: Message>(self, data: &[u8]) -> Result<T, FrameError> {
        match self {
            Codec::Proto => {
                T::decode(data).map_err(|e| FrameError::Invalid(format!("malformed protobuf message: {e}")))
            }
            Codec::Json => serde_json::from_slice(if data.is_empty() { b"{}" } else { data })
                .map_err(|e| FrameError::Invalid(format!("malformed JSON message: {e}"))),
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

/// Takes one whole envelope off the front of `buf`, if it holds one; refuses oversized and
/// compressed ones as soon as their header is in.
pub fn split_envelope(buf: &mut BytesMut) -> Result<Option<(u8, Bytes)>, FrameError> {
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    let flags = buf[0];
    let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
    if len > MAX_MESSAGE_BYTES {
        return Err(FrameError::TooLarge);
    }
    if flags & FLAG_COMPRESSED != 0 {
        return Err(FrameError::Invalid("compressed message: none was negotiated; send messages uncompressed".into()));
    }
    if buf.len() < HEADER_LEN + len {
        return Ok(None);
    }
    buf.advance(HEADER_LEN);
    Ok(Some((flags, buf.split_to(len).freeze())))
}

/// One envelope.
pub fn envelope(flags: u8, payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&[flags]);
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out.freeze()
}

/// The end-of-stream envelope: `{}`, or the error (`code`, `message`) the stream ended with.
pub fn end_of_stream(error: Option<(&str, &str)>) -> Bytes {
    let body = match error {
        None => serde_json::json!({}),
        Some((code, message)) => serde_json::json!({"error": {"code": code, "message": message}}),
    };
    envelope(FLAG_END_STREAM, body.to_string().as_bytes())
}

/// The deadline a `Connect-Timeout-Ms` value sets (at most 10 digits, as the protocol says).
pub fn timeout(value: &[u8]) -> Result<Duration, FrameError> {
    Some(value)
        .filter(|v| !v.is_empty() && v.len() <= 10 && v.iter().all(u8::is_ascii_digit))
        .and_then(|v| std::str::from_utf8(v).ok()?.parse::<u64>().ok())
        .map(Duration::from_millis)
        .ok_or_else(|| FrameError::Invalid("Connect-Timeout-Ms must be a positive number of milliseconds".into()))
}

/// The keepalive interval a `Keepalive-Ping-Interval` value (seconds) asks for, bounded to
/// 1–600 s; `None` when it is no number.
pub fn keepalive(value: &str) -> Option<Duration> {
    let secs = value.trim().parse::<u64>().ok()?;
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
        assert_eq!(split_envelope(&mut buf).unwrap_err(), FrameError::TooLarge);
    }

    #[test]
    fn a_compressed_envelope_is_refused() {
        let mut buf = BytesMut::from(&envelope(FLAG_COMPRESSED, b"x")[..]);
        assert!(matches!(split_envelope(&mut buf).unwrap_err(), FrameError::Invalid(_)));
    }

    #[test]
    fn end_of_stream_carries_the_error() {
        let env = end_of_stream(Some(("not_found", "process 7")));
        assert_eq!(env[0], FLAG_END_STREAM);
        let v: serde_json::Value = serde_json::from_slice(&env[5..]).unwrap();
        assert_eq!(v, serde_json::json!({"error": {"code": "not_found", "message": "process 7"}}));
        assert_eq!(&end_of_stream(None)[5..], b"{}");
    }

    #[test]
    fn content_types_and_encodings_pick_the_codec() {
        let none = [("content-encoding", None), ("connect-content-encoding", None)];
        assert_eq!(Codec::negotiate("Application/JSON; charset=utf-8", none, false), Ok(Codec::Json));
        assert_eq!(Codec::negotiate("application/connect+proto", none, true), Ok(Codec::Proto));
        assert!(matches!(Codec::negotiate("application/proto", none, true), Err(FrameError::Unsupported(_))));
        let gzip = [("content-encoding", Some("identity")), ("connect-content-encoding", Some("gzip"))];
        assert!(matches!(Codec::negotiate("application/json", gzip, false), Err(FrameError::Unsupported(_))));
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
        assert!(matches!(Codec::Proto.decode::<proto::StartRequest>(&[0xff, 0xff]), Err(FrameError::Invalid(_))));
    }

    #[test]
    fn timeouts_are_at_most_ten_digits() {
        assert_eq!(timeout(b"1500").unwrap(), Duration::from_millis(1500));
        assert!(timeout(b"12345678901").is_err());
        assert!(timeout(b"").is_err());
        assert!(timeout(b"+15").is_err());
    }

    #[test]
    fn keepalives_are_clamped() {
        assert_eq!(keepalive(" 30 "), Some(Duration::from_secs(30)));
        assert_eq!(keepalive("0"), Some(Duration::from_secs(1)));
        assert_eq!(keepalive("99999"), Some(Duration::from_secs(600)));
        assert_eq!(keepalive("-1"), None);
    }
}
