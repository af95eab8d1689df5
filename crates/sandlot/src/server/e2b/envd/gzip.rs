//! gzip on envd's `/files`, as envd ≥ 0.5.7 does it: an upload with `Content-Encoding: gzip` is
//! inflated as it streams in, and a download asked with `Accept-Encoding: gzip` is deflated as it
//! streams out. Neither holds a file: the inflater is fed at most [`INFLATE_STEP`] compressed bytes
//! at a time, so one step yields at most about a thousand times that (deflate's greatest ratio)
//! before the consumer takes it, and the inflated bytes count against the upload limit where every
//! write is bounded (the supervisor).

use std::io::Write;

use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use flate2::write::{GzDecoder, GzEncoder};
use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use sandlot_control::FileStream;

use crate::server::stream::channel_body;

/// Compressed bytes handed to the inflater per step.
const INFLATE_STEP: usize = 1024;

/// Whether an `Accept-Encoding` header asks for gzip (`gzip`, or `gzip;q=…` with q above zero).
pub fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers.get_all(header::ACCEPT_ENCODING).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).any(
        |coding| {
            let mut parts = coding.split(';').map(str::trim);
            let name = parts.next().unwrap_or("");
            let q = parts.find_map(|p| p.strip_prefix("q=")).and_then(|q| q.parse::<f32>().ok()).unwrap_or(1.0);
            (name.eq_ignore_ascii_case("gzip") || name.eq_ignore_ascii_case("x-gzip")) && q > 0.0
        },
    )
}

struct Inflating {
    input: BoxStream<'static, std::io::Result<Bytes>>,
    decoder: GzDecoder<Vec<u8>>,
    pending: Bytes,
    finished: bool,
}

fn corrupt(e: std::io::Error) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, format!("the gzip body is not valid gzip: {e}"))
}

/// The inflated bytes of a gzip body; a body that is not gzip, or ends inside its stream, fails
/// as invalid data.
pub fn gunzip(input: BoxStream<'static, std::io::Result<Bytes>>) -> BoxStream<'static, std::io::Result<Bytes>> {
    let state = Inflating { input, decoder: GzDecoder::new(Vec::new()), pending: Bytes::new(), finished: false };
    futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if !s.decoder.get_ref().is_empty() {
                let out = Bytes::from(std::mem::take(s.decoder.get_mut()));
                return Some((Ok(out), s));
            }
            if s.finished {
                return None;
            }
            if !s.pending.is_empty() {
                let step = s.pending.split_to(s.pending.len().min(INFLATE_STEP));
                if let Err(e) = s.decoder.write_all(&step) {
                    s.finished = true;
                    return Some((Err(corrupt(e)), s));
                }
                continue;
            }
            match s.input.next().await {
                Some(Ok(chunk)) => s.pending = chunk,
                Some(Err(e)) => {
                    s.finished = true;
                    return Some((Err(e), s));
                }
                None => {
                    s.finished = true;
                    if let Err(e) = s.decoder.try_finish() {
                        return Some((Err(corrupt(e)), s));
                    }
                }
            }
        }
    })
    .boxed()
}

/// A file streamed out gzip-compressed, with `Content-Encoding: gzip`.
pub fn gzip_body(mut s: FileStream, content_type: &'static str) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(8);
    tokio::spawn(async move {
        let mut encoder = GzEncoder::new(Vec::new(), flate2::Compression::fast());
        loop {
            let item = match s.next().await {
                Ok(Some(b)) => encoder.write_all(&b).map(|()| Bytes::from(std::mem::take(encoder.get_mut()))),
                Ok(None) => {
                    let tail = encoder.finish().map(Bytes::from);
                    let _ = tx.send(tail).await;
                    return;
                }
                // Headers are gone already: abort the body so the client sees a broken transfer.
                Err(e) => Err(std::io::Error::other(e.to_string())),
            };
            let stop = item.is_err();
            if matches!(&item, Ok(b) if b.is_empty()) {
                continue;
            }
            if tx.send(item).await.is_err() || stop {
                return;
            }
        }
    });
    ([(header::CONTENT_TYPE, content_type), (header::CONTENT_ENCODING, "gzip")], channel_body(rx)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gz(data: &[u8]) -> Vec<u8> {
        let mut e = GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    async fn inflate(chunks: Vec<Vec<u8>>) -> std::io::Result<Vec<u8>> {
        let input = futures_util::stream::iter(chunks.into_iter().map(|c| Ok(Bytes::from(c)))).boxed();
        let mut out = Vec::new();
        let mut s = gunzip(input);
        while let Some(b) = s.next().await {
            out.extend_from_slice(&b?);
        }
        Ok(out)
    }

    #[tokio::test]
    async fn a_gzip_body_inflates_whatever_its_chunking() {
        let data: Vec<u8> = (0..200_000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
        let packed = gz(&data);
        assert_eq!(inflate(vec![packed.clone()]).await.unwrap(), data);
        assert_eq!(inflate(packed.chunks(7).map(<[u8]>::to_vec).collect()).await.unwrap(), data);
    }

    #[tokio::test]
    async fn a_bomb_comes_out_in_bounded_pieces() {
        let packed = gz(&vec![0u8; 64 << 20]);
        let input = futures_util::stream::iter([Ok(Bytes::from(packed))]).boxed();
        let mut s = gunzip(input);
        let mut total = 0;
        while let Some(b) = s.next().await {
            let b = b.unwrap();
            assert!(b.len() <= INFLATE_STEP * 1100, "one step gave {} bytes", b.len());
            total += b.len();
        }
        assert_eq!(total, 64 << 20);
    }

    #[tokio::test]
    async fn not_gzip_and_truncated_gzip_fail() {
        assert!(inflate(vec![b"plain text, not gzip".to_vec()]).await.is_err());
        let packed = gz(b"hello world, hello world");
        assert!(inflate(vec![packed[..packed.len() - 4].to_vec()]).await.is_err());
    }

    #[test]
    fn accept_encoding_is_read_as_http_says() {
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(header::ACCEPT_ENCODING, v.parse().unwrap());
            accepts_gzip(&m)
        };
        assert!(h("gzip"));
        assert!(h("br, gzip;q=0.5"));
        assert!(!h("gzip;q=0"));
        assert!(!h("identity"));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }
}
