//! envd's multipart uploads (the `sandlot` binary's `server/e2b/envd/multipart.rs`, compiled here as
//! it is): a Content-Type's boundary, then a body cut into chunks at fuzzer-chosen lengths, read
//! part by part as `files::upload` reads it, each part's data taken by a writer as it comes.
//! Properties: between parts no more is read than `MAX_MULTIPART_OVERHEAD` and the chunk that crossed
//! it; within a part no more than `MAX_READ_AHEAD` ahead of the writer and a chunk; at most
//! `MAX_PARTS` parts reach a writer; nothing hangs.
#![no_main]

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use futures_util::StreamExt;
use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../crates/sandlot/src/server/e2b/envd/multipart.rs"]
mod multipart;

use multipart::{Parts, BODY_IDLE, MAX_MULTIPART_OVERHEAD, MAX_PARTS, MAX_READ_AHEAD};

/// The largest body a run makes (its template repeated): past the overhead bound and `MAX_PARTS`
/// small parts.
const MAX_BODY: usize = 256 << 10;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_current_thread().enable_time().build().expect("a runtime"))
}

/// The input: a Content-Type line; a byte whose low 4 bits give how many times the template is
/// repeated (a power of two, up to `MAX_BODY`) and whose top 2 the part size limit; a byte `n` (low 4 bits) and `n`
/// chunk lengths (in 16-byte units, used in turn); the body's template.
struct Input {
    content_type: String,
    max_part: u64,
    cuts: Vec<usize>,
    body: Vec<u8>,
}

fn input(data: &[u8]) -> Option<Input> {
    let nl = data.iter().position(|&b| b == b'\n')?;
    // The handler reads the header as text (visible ASCII and tabs), else as absent.
    let ct = &data[..nl];
    if !ct.iter().all(|&b| b == b'\t' || (0x20..0x7f).contains(&b)) {
        return None;
    }
    let rest = &data[nl + 1..];
    let (&shape, rest) = rest.split_first()?;
    let (&n, rest) = rest.split_first()?;
    let n = usize::from(n & 15).min(rest.len());
    let cuts = rest[..n].iter().map(|&c| (usize::from(c) + 1) * 16).collect();
    let template = &rest[n..];
    let times = (1usize << (shape & 15)).min(MAX_BODY / template.len().max(1)).max(1);
    Some(Input {
        content_type: String::from_utf8(ct.to_vec()).ok()?,
        max_part: [16, 4096, 1 << 20, u64::MAX][usize::from(shape >> 6)],
        cuts,
        body: template.repeat(times),
    })
}

fn chunks(body: &[u8], cuts: &[usize]) -> Vec<Bytes> {
    if cuts.is_empty() {
        return vec![Bytes::copy_from_slice(body)];
    }
    let (mut out, mut at) = (Vec::new(), 0);
    for &len in cuts.iter().cycle() {
        if at >= body.len() {
            break;
        }
        let end = (at + len).min(body.len());
        out.push(Bytes::copy_from_slice(&body[at..end]));
        at = end;
    }
    out
}

async fn upload(input: Input) {
    if !input.content_type.starts_with("multipart/form-data") {
        return;
    }
    let Ok(boundary) = multer::parse_boundary(&input.content_type) else { return };
    let chunks = chunks(&input.body, &input.cuts);
    let max_chunk = chunks.iter().map(Bytes::len).max().unwrap_or(0) as u64;
    let pulled = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&pulled);
    let body = futures_util::stream::iter(chunks).map(move |c| {
        counter.fetch_add(c.len() as u64, Ordering::Relaxed);
        Ok::<_, Infallible>(c)
    });
    let mut parts = Parts::new(body, boundary, input.max_part, BODY_IDLE);
    let read = || pulled.load(Ordering::Relaxed);
    let mut between = read();
    loop {
        let next = parts.next().await;
        let outside = read() - between;
        assert!(outside <= MAX_MULTIPART_OVERHEAD + max_chunk, "{outside} bytes read outside part data");
        let Ok(Some(part)) = next else { break };
        assert!(parts.count() <= MAX_PARTS, "part {} reached a writer", parts.count());
        let (start, mut taken) = (read(), 0u64);
        let mut data = std::pin::pin!(parts.data(part));
        while let Some(chunk) = data.next().await {
            // A part that cannot be read fails its write, and the upload with it.
            let Ok(chunk) = chunk else { return };
            taken += chunk.len() as u64;
            let ahead = (read() - start).saturating_sub(taken);
            assert!(ahead <= MAX_READ_AHEAD + max_chunk, "{ahead} bytes read ahead of the writer");
        }
        parts.end_part();
        between = read();
    }
}

fuzz_target!(|data: &[u8]| {
    let Some(input) = input(data) else { return };
    runtime().block_on(upload(input));
});
