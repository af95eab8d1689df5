//! Host <-> supervisor framing: the length-capped prefix and the JSON message decode, both directions.
//! Property: a frame that decodes re-encodes to a frame that decodes to the same message and payload.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandlot_protocol::{encode, parse_prefix, read_frame, Event, Frame, Request, PREFIX_LEN};
use serde::{de::DeserializeOwned, Serialize};
use std::fmt::Debug;

fn round_trip<T: Serialize + DeserializeOwned + PartialEq + Debug>(data: &[u8]) {
    let mut r = data;
    // Several frames back to back, as on the socket.
    while let Ok(frame) = read_frame::<T, _>(&mut r) {
        let bytes = encode(&frame.header, &frame.payload).expect("a decoded frame re-encodes");
        let again: Frame<T> = read_frame(&mut bytes.as_slice()).expect("a re-encoded frame decodes");
        assert_eq!(again, frame);
    }
}

fuzz_target!(|data: &[u8]| {
    if let Some(prefix) = data.get(..PREFIX_LEN) {
        let _ = parse_prefix(prefix.try_into().unwrap());
    }
    round_trip::<Request>(data);
    round_trip::<Event>(data);
});
