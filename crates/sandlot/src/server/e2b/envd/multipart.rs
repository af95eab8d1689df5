//! The bounds on an upload body of envd's `/files` ([`super::files`]): multer reads a
//! `multipart/form-data` body's parts, and [`BodyGuard`] bounds what it may read outside their data,
//! how far it reads ahead of the writer, and how long the body may stall. Nothing here knows HTTP
//! types, so the fuzz target `envd_multipart` compiles this file as it is.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt, TryStreamExt};

/// Parts of one multipart upload at most: each is a write of its own.
pub const MAX_PARTS: usize = 1000;
/// Bytes a multipart body may hold outside its parts' data (the preamble, a part's headers and
/// boundary) before the next part's data starts: multer buffers them all while it looks for the
/// boundary, so a body that never has one would otherwise fill memory.
pub const MAX_MULTIPART_OVERHEAD: u64 = 64 * 1024;
/// Bytes of a part's data read from the client ahead of what was written into the sandbox, at most
/// (the rest waits in the socket: backpressure).
pub const MAX_READ_AHEAD: u64 = 1 << 20;
/// How long an upload body may send nothing before it is given up.
pub const BODY_IDLE: Duration = Duration::from_secs(60);

/// Why a multipart body could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultipartError {
    /// It broke one of [`guarded`]'s bounds: which, and what to do.
    Refused(String),
    /// A part, or the whole body, is larger than `limit` bytes.
    TooLarge { limit: u64 },
    /// It has more than [`MAX_PARTS`] parts.
    TooManyParts,
    /// multer could not read it.
    Malformed(String),
}

/// The parts of a multipart body, read within [`guarded`]'s bounds.
pub struct Parts {
    multipart: multer::Multipart<'static>,
    guard: Arc<BodyGuard>,
    count: usize,
}

impl Parts {
    /// The parts of `body`, delimited by `boundary` (the Content-Type's), each at most `max_part` bytes
    /// of data; `idle` is [`BODY_IDLE`] but in tests.
    pub fn new<S, E>(body: S, boundary: impl Into<String>, max_part: u64, idle: Duration) -> Parts
    where
        S: Stream<Item = Result<Bytes, E>> + Send + Unpin + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let guard = Arc::new(BodyGuard::multipart());
        let limits = multer::SizeLimit::new()
            .whole_stream(max_part.saturating_add(MAX_PARTS as u64 * MAX_MULTIPART_OVERHEAD))
            .per_field(max_part);
        let stream = guarded(body, Arc::clone(&guard), idle);
        let multipart =
            multer::Multipart::with_constraints(stream, boundary, multer::Constraints::new().size_limit(limits));
        Parts { multipart, guard, count: 0 }
    }

    /// The next part; `None` after the last.
    pub async fn next(&mut self) -> Result<Option<multer::Field<'static>>, MultipartError> {
        let field = match self.multipart.next_field().await {
            Ok(Some(f)) => f,
            Ok(None) => return Ok(None),
            Err(e) => return Err(self.error(e)),
        };
        self.count += 1;
        if self.count > MAX_PARTS {
            return Err(MultipartError::TooManyParts);
        }
        Ok(Some(field))
    }

    /// Parts returned so far.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The data of `part`, the one [`Parts::next`] returned last, for its writer; call
    /// [`Parts::end_part`] once the writer is done with it.
    pub fn data(&self, part: multer::Field<'static>) -> impl Stream<Item = std::io::Result<Bytes>> + Send + 'static {
        self.guard.begin_part();
        let counted = Arc::clone(&self.guard);
        part.inspect_ok(move |b| counted.delivered(b.len())).map_err(std::io::Error::other)
    }

    /// The writer of the current part is done: what is read next is outside part data again.
    pub fn end_part(&self) {
        self.guard.end_part();
    }

    /// Why the body was given up, if a bound ended it (a part's writer sees only that its read
    /// failed).
    pub fn failure(&self) -> Option<String> {
        self.guard.failure()
    }

    fn error(&self, e: multer::Error) -> MultipartError {
        if let Some(why) = self.guard.failure() {
            return MultipartError::Refused(why);
        }
        match e {
            multer::Error::StreamSizeExceeded { limit } | multer::Error::FieldSizeExceeded { limit, .. } => {
                MultipartError::TooLarge { limit }
            }
            e => MultipartError::Malformed(e.to_string()),
        }
    }
}

/// What an upload body's reader has seen, shared between the body stream (which multer polls) and
/// the handler (which knows when a part's data starts and ends, and how much of it was taken).
#[derive(Default)]
struct Meter {
    /// Whether the body is multipart: only then are the part bounds kept (a plain body is all data).
    multipart: bool,
    in_part: bool,
    /// Bytes read from the client since the current part (or the stretch between parts) began.
    read: u64,
    /// Bytes of the current part's data handed to the writer.
    delivered: u64,
    /// Why the body was given up, once it was.
    failure: Option<String>,
}

/// The bounds on an upload body: see [`guarded`]. [`Default`] is a plain body's (the idle bound
/// only); [`Parts`] makes a multipart body's.
#[derive(Default)]
pub struct BodyGuard {
    meter: Mutex<Meter>,
    taken: tokio::sync::Notify,
}

impl BodyGuard {
    fn multipart() -> Self {
        let guard = BodyGuard::default();
        guard.meter().multipart = true;
        guard
    }

    fn meter(&self) -> std::sync::MutexGuard<'_, Meter> {
        self.meter.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn begin_part(&self) {
        let mut m = self.meter();
        (m.in_part, m.read, m.delivered) = (true, 0, 0);
    }

    fn end_part(&self) {
        let mut m = self.meter();
        (m.in_part, m.read, m.delivered) = (false, 0, 0);
        drop(m);
        self.taken.notify_one();
    }

    fn delivered(&self, n: usize) {
        self.meter().delivered += n as u64;
        self.taken.notify_one();
    }

    fn failure(&self) -> Option<String> {
        self.meter().failure.clone()
    }

    fn fail(&self, why: String) -> std::io::Error {
        self.meter().failure = Some(why.clone());
        std::io::Error::other(why)
    }
}

/// `body`, bounded: a chunk must come within `idle` ([`BODY_IDLE`]) of the last; between parts
/// (outside any part's data, as [`Parts::data`] and [`Parts::end_part`] mark it) no more is read
/// once [`MAX_MULTIPART_OVERHEAD`] bytes were and the reader still asks for more; within a part,
/// reading waits while more than [`MAX_READ_AHEAD`] bytes were read and not yet taken by the writer.
/// A body outside these bounds ends in an error that says which one.
///
/// multer reads its stream until it is pending before it looks at what it read, so after each chunk
/// the stream is pending once: multer then parses what it has and asks for more only when it needs
/// more, and what it asks for is what the bounds count.
pub fn guarded<S, E>(
    body: S,
    guard: Arc<BodyGuard>,
    idle: Duration,
) -> futures_util::stream::BoxStream<'static, std::io::Result<Bytes>>
where
    S: Stream<Item = Result<Bytes, E>> + Send + Unpin + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    futures_util::stream::unfold((body, guard, Some(false)), move |(mut body, guard, state)| async move {
        let after_chunk = state?;
        if after_chunk {
            tokio::task::yield_now().await;
        }
        loop {
            let (ahead, overhead) = {
                let m = guard.meter();
                (
                    m.multipart && m.in_part && m.read.saturating_sub(m.delivered) > MAX_READ_AHEAD,
                    m.multipart && !m.in_part && m.read > MAX_MULTIPART_OVERHEAD,
                )
            };
            if overhead {
                let e = guard.fail(format!(
                    "the multipart body has more than {} KiB outside file data (preamble, a part's headers): \
                     check that its parts are delimited by the Content-Type's boundary",
                    MAX_MULTIPART_OVERHEAD / 1024
                ));
                return Some((Err(e), (body, guard, None)));
            }
            if !ahead {
                break;
            }
            // (A delivery since the check left a permit: this returns at once then.)
            guard.taken.notified().await;
        }
        let next = match tokio::time::timeout(idle, body.next()).await {
            Err(_) => Err(guard
                .fail(format!("the upload body sent nothing for {} s: upload again, without pausing", idle.as_secs()))),
            Ok(None) => return None,
            Ok(Some(Err(e))) => Err(std::io::Error::other(e)),
            Ok(Some(Ok(chunk))) => {
                guard.meter().read += chunk.len() as u64;
                Ok(chunk)
            }
        };
        let state = next.is_ok().then_some(true);
        Some((next, (body, guard, state)))
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicU64, Ordering};

    const CHUNK: usize = 8 * 1024;

    /// A client body that is always ready: `chunks` (endless when `None`) of `CHUNK` bytes of
    /// `fill`, after `head`, counting what was pulled from it.
    fn client(
        head: &'static [u8],
        fill: u8,
        chunks: Option<usize>,
        pulled: Arc<AtomicU64>,
    ) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + Unpin + 'static {
        let body =
            futures_util::stream::iter(std::iter::once(Bytes::from_static(head)).chain(
                std::iter::repeat_with(move || Bytes::from(vec![fill; CHUNK])).take(chunks.unwrap_or(usize::MAX)),
            ));
        body.map(move |b| {
            pulled.fetch_add(b.len() as u64, Ordering::Relaxed);
            Ok(b)
        })
    }

    #[tokio::test]
    async fn a_body_without_its_boundary_is_refused_after_a_bounded_read() {
        let pulled = Arc::new(AtomicU64::new(0));
        let mut parts = Parts::new(client(b"", b'a', None, Arc::clone(&pulled)), "x", u64::MAX, BODY_IDLE);
        let Err(MultipartError::Refused(why)) = parts.next().await else {
            panic!("a body with no `--x` in it has no part")
        };
        assert!(why.contains("outside file data"), "{why}");
        let read = pulled.load(Ordering::Relaxed);
        assert!(read <= MAX_MULTIPART_OVERHEAD + 2 * CHUNK as u64, "read {read} bytes of an endless preamble");
    }

    #[tokio::test]
    async fn a_part_is_read_no_further_ahead_of_its_writer_than_the_bound() {
        let pulled = Arc::new(AtomicU64::new(0));
        let head = b"--x\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\n";
        // 8 MiB of data that the writer takes slowly, one chunk at a time.
        let body = client(head, b'a', Some(1024), Arc::clone(&pulled));
        let mut parts = Parts::new(body, "x", u64::MAX, BODY_IDLE);
        let part = parts.next().await.unwrap().expect("the part");
        assert_eq!(part.file_name(), Some("f"));
        let mut data = std::pin::pin!(parts.data(part));
        let mut taken = 0u64;
        for _ in 0..4 {
            taken += data.next().await.expect("data").unwrap().len() as u64;
            tokio::task::yield_now().await;
        }
        let read = pulled.load(Ordering::Relaxed);
        assert!(read <= taken + MAX_READ_AHEAD + 2 * CHUNK as u64, "read {read} bytes for {taken} taken");
    }

    #[tokio::test]
    async fn a_plain_body_is_all_data_and_passes_whole() {
        let pulled = Arc::new(AtomicU64::new(0));
        let stream = guarded(client(b"", b'a', Some(512), Arc::clone(&pulled)), Default::default(), BODY_IDLE);
        let chunks: Vec<_> = stream.collect().await;
        let total: usize = chunks.into_iter().map(|c| c.unwrap().len()).sum();
        assert_eq!(total, 512 * CHUNK);
    }

    #[tokio::test]
    async fn a_stalled_body_is_given_up() {
        let stalled = futures_util::stream::pending::<Result<Bytes, Infallible>>();
        let mut parts = Parts::new(stalled, "x", u64::MAX, Duration::from_millis(50));
        let Err(MultipartError::Refused(why)) = parts.next().await else {
            panic!("a body that sends nothing has no part")
        };
        assert!(why.contains("sent nothing"), "{why}");
    }

    #[tokio::test]
    async fn parts_past_the_maximum_are_refused() {
        let mut body = Vec::new();
        for i in 0..=MAX_PARTS {
            body.extend_from_slice(
                format!("--x\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{i}\"\r\n\r\n{i}\r\n")
                    .as_bytes(),
            );
        }
        body.extend_from_slice(b"--x--\r\n");
        let body = futures_util::stream::iter([Ok::<_, Infallible>(Bytes::from(body))]);
        let mut parts = Parts::new(body, "x", 1 << 20, BODY_IDLE);
        for _ in 0..MAX_PARTS {
            let part = parts.next().await.unwrap().expect("a part");
            let _: Vec<_> = parts.data(part).collect().await;
            parts.end_part();
        }
        assert_eq!(parts.next().await.unwrap_err(), MultipartError::TooManyParts);
    }
}
