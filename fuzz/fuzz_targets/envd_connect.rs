//! envd's Connect-RPC framing and messages (the `sandlot` binary's `server/e2b/envd/frame.rs` and
//! `proto.rs`, compiled here as they are): a streaming body cut into chunks as the socket may deliver
//! it, split into envelopes as `connect::Envelopes` does, each payload decoded as every request
//! message envd's routes accept, in both codecs; the body whole as a unary call's; the header values a
//! call is bounded by. Properties: an envelope that splits re-encodes to the bytes it came from; what
//! is buffered waiting for an envelope is bounded by its declared length, itself bounded; a message
//! that decodes re-encodes, in either codec, to one that decodes to the same message; an end-of-stream
//! error carries its message; the header bounds hold.
#![no_main]

use std::fmt::Debug;
use std::time::Duration;

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../crates/sandlot/src/server/e2b/envd/frame.rs"]
mod frame;
#[allow(dead_code)]
#[path = "../../crates/sandlot/src/server/e2b/envd/proto.rs"]
mod proto;

use frame::{envelope, split_envelope, Codec, Message, FLAG_END_STREAM, HEADER_LEN, MAX_MESSAGE_BYTES};

/// Decodes `payload` as a `T`; one that decodes must survive both encodings unchanged.
fn message<T: Message + PartialEq + Debug>(codec: Codec, payload: &[u8]) {
    let Ok(m) = codec.decode::<T>(payload) else { return };
    for c in [Codec::Proto, Codec::Json] {
        let bytes = c.encode(&m);
        let again: T = c.decode(&bytes).unwrap_or_else(|e| panic!("{m:?} re-encoded as {c:?} does not decode: {e:?}"));
        assert_eq!(again, m, "{c:?} changed the message");
    }
}

/// Every request message the envd routes read (`read_unary` and `Envelopes::next`).
fn requests(codec: Codec, payload: &[u8]) {
    message::<proto::StartRequest>(codec, payload);
    message::<proto::SelectRequest>(codec, payload);
    message::<proto::ListRequest>(codec, payload);
    message::<proto::SendInputRequest>(codec, payload);
    message::<proto::StreamInputRequest>(codec, payload);
    message::<proto::SendSignalRequest>(codec, payload);
    message::<proto::UpdateRequest>(codec, payload);
    message::<proto::PathRequest>(codec, payload);
    message::<proto::MoveRequest>(codec, payload);
    message::<proto::ListDirRequest>(codec, payload);
    message::<proto::WatchRequest>(codec, payload);
    message::<proto::WatcherId>(codec, payload);
}

/// The values of the headers a call reads.
fn headers(value: &[u8]) {
    if let Ok(d) = frame::timeout(value) {
        assert!(d <= Duration::from_millis(9_999_999_999), "more than 10 digits of milliseconds");
    }
    let text = String::from_utf8_lossy(value);
    if let Some(d) = frame::keepalive(&text) {
        assert!((1..=600).contains(&d.as_secs()), "keepalive {d:?} out of bounds");
    }
    for streaming in [false, true] {
        let _ = Codec::negotiate(&text, [("content-encoding", Some(&text)), ("connect-content-encoding", None)], streaming);
    }
}

fuzz_target!(|data: &[u8]| {
    // The first byte picks the codec and how long the chunks the body arrives in are.
    let Some((&ctl, body)) = data.split_first() else { return };
    let codec = if ctl & 1 == 0 { Codec::Proto } else { Codec::Json };
    let step = usize::from(ctl >> 1) + 1;
    headers(&body[..body.len().min(64)]);
    // A unary call's body is one message, unenveloped.
    requests(codec, body);
    // A streaming call's: envelopes, read as they become whole.
    let mut buf = BytesMut::new();
    let (mut consumed, mut pushed) = (0, 0);
    for chunk in body.chunks(step) {
        buf.extend_from_slice(chunk);
        loop {
            match split_envelope(&mut buf) {
                Ok(Some((flags, payload))) => {
                    let len = HEADER_LEN + payload.len();
                    assert_eq!(envelope(flags, &payload)[..], body[consumed..consumed + len], "re-encoded envelope");
                    consumed += len;
                    if flags & FLAG_END_STREAM != 0 {
                        // The server reads no further; its own end-of-stream carries any message.
                        let message = String::from_utf8_lossy(&payload);
                        let mut end = BytesMut::from(&frame::end_of_stream(Some(("internal", &message)))[..]);
                        let (f, p) = split_envelope(&mut end).expect("an end-of-stream splits").expect("whole");
                        assert_eq!(f, FLAG_END_STREAM);
                        let v: serde_json::Value = serde_json::from_slice(&p).expect("end-of-stream is JSON");
                        assert_eq!(v["error"]["message"].as_str(), Some(&*message));
                        return;
                    }
                    requests(codec, &payload);
                }
                Ok(None) => break,
                // The call ends with the error.
                Err(_) => return,
            }
        }
        // Waiting for an envelope holds no more than its header, its declared (bounded) length and
        // the chunk that completed neither.
        assert!(buf.len() < HEADER_LEN + MAX_MESSAGE_BYTES + step, "{} bytes buffered", buf.len());
        pushed += chunk.len();
        assert_eq!(consumed + buf.len(), pushed, "bytes lost or made up between envelopes");
    }
});
