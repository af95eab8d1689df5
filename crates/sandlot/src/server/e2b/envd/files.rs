//! envd's `/files`: `GET` streams a file out, `POST` writes files, from an `application/octet-stream`
//! body (one file, at `path`) or a `multipart/form-data` one (each `file` part at the `path` query
//! parameter when there is one part, else at its filename). Bodies stream both ways, never held
//! whole; every write is bounded by the server's upload limit and audited by the control layer.
//! A multipart body is bounded too in what is not file data (preamble, part headers: at most
//! [`MAX_MULTIPART_OVERHEAD`] at a time) and in how long it may stall ([`BODY_IDLE`]). A signed
//! URL allows one file: its signed `path`, written from the one part or the octet-stream body.

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures_util::{StreamExt, TryStreamExt};
use sandlot_control::{SandboxPath, Upload};
use serde::Deserialize;

use base64::Engine;
use sandlot_control::Caller;
use sha2::Digest;

use super::{named_user, ConnectError, Target};
use crate::server::app::AppState;
use crate::server::e2b::E2bApiError;
use crate::server::files::{body_reader, drain, stream_body};
use std::sync::{Arc, Mutex};

/// Parts of one multipart upload at most: each is a write of its own.
const MAX_PARTS: usize = 1000;
/// Bytes a multipart body may hold outside its parts' data (the preamble, a part's headers and
/// boundary) before the next part's data starts: multer buffers them all while it looks for the
/// boundary, so a body that never has one would otherwise fill memory.
const MAX_MULTIPART_OVERHEAD: u64 = 64 * 1024;
/// Bytes of a part's data read from the client ahead of what was written into the sandbox, at most
/// (the rest waits in the socket: backpressure).
const MAX_READ_AHEAD: u64 = 1 << 20;
/// How long an upload body may send nothing before it is given up.
const BODY_IDLE: std::time::Duration = std::time::Duration::from_secs(60);

/// What a signed `/files` URL allows: one operation on this path, as this user (`""` is the
/// default user), as its signature binds them.
#[derive(Clone, Debug)]
pub struct SignedFile {
    pub path: String,
    pub username: String,
}

#[derive(Deserialize)]
pub struct FilesQuery {
    path: Option<String>,
    username: Option<String>,
    /// Checked by [`signed_caller`] before the request gets here.
    #[serde(rename = "signature")]
    _signature: Option<String>,
    #[serde(rename = "signature_expiration")]
    _signature_expiration: Option<String>,
}

fn invalid(message: impl Into<String>) -> E2bApiError {
    E2bApiError::new(StatusCode::BAD_REQUEST, message)
}

fn user_of(q: &FilesQuery) -> Result<sandlot_api::User, E2bApiError> {
    named_user(q.username.as_deref().unwrap_or("")).map_err(|e| invalid(e.message))
}

/// The caller of a signed `/files` URL (`signature`, `signature_expiration` in its query, as the
/// SDKs' `download_url`/`upload_url` make them), or `None` for a request that is not one. The
/// signature is `v1_` + unpadded base64 of SHA-256 over `path:operation:username:token[:expiration]`
/// (`read` for GET, `write` for POST); a request carrying a valid, unexpired one needs no
/// `X-Access-Token`, as with E2B's envd. The file it names comes back with the caller: the handlers
/// act on that, not on the query again. A URL signed without a `path` (the SDKs sign `""` then,
/// which envd reads as "wherever the upload's parts say") is refused: it would allow any file.
pub fn signed_caller(
    app: &AppState,
    id: &str,
    req: &axum::extract::Request,
) -> Option<Result<(Caller, SignedFile), ConnectError>> {
    if req.uri().path() != "/files" {
        return None;
    }
    let query: Vec<(String, String)> = serde_urlencoded_pairs(req.uri().query().unwrap_or(""));
    let get = |k: &str| query.iter().find(|(name, _)| name == k).map(|(_, v)| v.as_str());
    let signature = get("signature")?.to_string();
    let operation = match *req.method() {
        axum::http::Method::GET => "read",
        axum::http::Method::POST => "write",
        _ => return Some(Err(ConnectError::invalid("a signed /files URL is for GET or POST"))),
    };
    let (path, user) = (get("path").unwrap_or("").to_string(), get("username").unwrap_or("").to_string());
    if path.is_empty() {
        return Some(Err(ConnectError::invalid(
            "a signed /files URL must name its file: make it with a path (download_url / upload_url with `path`)",
        )));
    }
    let expiration = get("signature_expiration").map(str::to_string);
    if let Some(exp) = &expiration {
        let Ok(at) = exp.parse::<u64>() else {
            return Some(Err(ConnectError::invalid("signature_expiration must be a Unix time in seconds")));
        };
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        if at < now {
            return Some(Err(ConnectError::new(
                "unauthenticated",
                StatusCode::UNAUTHORIZED,
                "this signed URL has expired: make a new one (download_url / upload_url)",
            )));
        }
    }
    let proves = |token: &str| {
        let raw = match &expiration {
            None => format!("{path}:{operation}:{user}:{token}"),
            Some(exp) => format!("{path}:{operation}:{user}:{token}:{exp}"),
        };
        let digest = sha2::Sha256::digest(raw.as_bytes());
        let expected = format!("v1_{}", base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest));
        sandlot_control::same_bytes(expected.as_bytes(), signature.as_bytes())
    };
    let caller = app.control.caller_proving_token(id, proves).map_err(ConnectError::from);
    Some(caller.map(|c| (c, SignedFile { path, username: user })))
}

/// The pairs of a query string, percent-decoded.
fn serde_urlencoded_pairs(q: &str) -> Vec<(String, String)> {
    axum::extract::Query::<Vec<(String, String)>>::try_from_uri(&format!("/?{q}").parse().expect("a path and query"))
        .map(|axum::extract::Query(v)| v)
        .unwrap_or_default()
}

/// `GET /files?path=…&username=…`.
pub async fn download(
    State(app): State<AppState>,
    Extension(t): Extension<Target>,
    Query(q): Query<FilesQuery>,
) -> Result<Response, E2bApiError> {
    let q = bound_to_signature(q, &t);
    let user = user_of(&q)?;
    let path = q.path.as_deref().ok_or_else(|| invalid("missing `path` query parameter: the file to read"))?;
    let stream = app.control.read_file(&t.caller, &t.id, path, user).await?;
    Ok(stream_body(stream, "application/octet-stream"))
}

/// The query a request acts on: a signed request's file and user are the ones its signature binds
/// (the query is parsed twice, and a repeated key must not make the two parsings disagree).
fn bound_to_signature(mut q: FilesQuery, t: &Target) -> FilesQuery {
    if let Some(signed) = &t.signed {
        q.path = Some(signed.path.clone());
        q.username = Some(signed.username.clone());
    }
    q
}

/// What envd answers per written file.
fn written(path: &str) -> serde_json::Value {
    let name = path.rsplit('/').next().unwrap_or(path);
    serde_json::json!({"name": name, "type": "file", "path": path})
}

/// `POST /files`.
pub async fn upload(
    State(app): State<AppState>,
    Extension(t): Extension<Target>,
    Query(q): Query<FilesQuery>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, E2bApiError> {
    let q = bound_to_signature(q, &t);
    let user = user_of(&q)?;
    let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    if let Some(enc) = headers.get(header::CONTENT_ENCODING).and_then(|v| v.to_str().ok()) {
        if !enc.eq_ignore_ascii_case("identity") {
            let mut reader = body_reader(body);
            drain(&mut reader).await;
            return Err(E2bApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("Content-Encoding {enc:?} is not supported: upload without gzip"),
            ));
        }
    }
    let mut results = Vec::new();
    if ct.starts_with("multipart/form-data") {
        let boundary = multer::parse_boundary(&ct).map_err(|e| invalid(format!("bad multipart Content-Type: {e}")))?;
        let guard = Arc::new(BodyGuard::multipart());
        let max = app.control.config().max_upload_bytes;
        let limits = multer::SizeLimit::new()
            .whole_stream(max.saturating_add(MAX_PARTS as u64 * MAX_MULTIPART_OVERHEAD))
            .per_field(max);
        let stream = guarded(body.into_data_stream(), Arc::clone(&guard), BODY_IDLE);
        let mut parts =
            multer::Multipart::with_constraints(stream, boundary, multer::Constraints::new().size_limit(limits));
        let mut count = 0;
        loop {
            let field = match parts.next_field().await {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => return Err(multipart_error(&guard, e)),
            };
            count += 1;
            if count > MAX_PARTS {
                return Err(invalid(format!("more than {MAX_PARTS} files in one upload: split it")));
            }
            if t.signed.is_some() && count > 1 {
                return Err(invalid(
                    "a signed upload URL writes one file, its signed path: send one part (or an octet-stream body)",
                ));
            }
            // With a `path`, the (single) part goes there; else each part names its own path.
            let path = match (&q.path, field.file_name()) {
                (Some(p), _) if count == 1 => p.clone(),
                (_, Some(name)) if !name.is_empty() => name.to_string(),
                _ => return Err(invalid("a multipart file part has no filename: name its path there or in `path`")),
            };
            guard.begin_part();
            let counted = Arc::clone(&guard);
            let data = field.inspect_ok(move |b| counted.delivered(b.len())).map_err(std::io::Error::other);
            let mut reader = tokio_util::io::StreamReader::new(data);
            let to = SandboxPath { path: &path, user };
            let written_to =
                app.control.upload(&t.caller, &t.id, to, Upload::File { mode: None }, None, &mut reader).await;
            guard.end_part();
            match written_to {
                Ok(w) => results.push(written(&w.path)),
                // A failed read of the part is the body's fault: say why, not that the write failed.
                Err(e) => return Err(guard.failure().map(invalid).unwrap_or_else(|| e.into())),
            }
        }
        if results.is_empty() {
            return Err(invalid("the multipart body holds no file part"));
        }
    } else {
        let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
        let mut reader =
            tokio_util::io::StreamReader::new(guarded(body.into_data_stream(), Default::default(), BODY_IDLE));
        let Some(path) = q.path.as_deref() else {
            drain(&mut reader).await;
            return Err(invalid("missing `path` query parameter: where to write the file"));
        };
        let to = SandboxPath { path, user };
        match app.control.upload(&t.caller, &t.id, to, Upload::File { mode: None }, declared, &mut reader).await {
            Ok(w) => results.push(written(&w.path)),
            Err(e) => {
                drain(&mut reader).await;
                return Err(e.into());
            }
        }
    }
    Ok((StatusCode::OK, Json(results)).into_response())
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

/// The bounds on an upload body: see [`guarded`].
#[derive(Default)]
struct BodyGuard {
    meter: Mutex<Meter>,
    taken: tokio::sync::Notify,
}

impl BodyGuard {
    /// The bounds of a multipart body; [`Default`] is a plain body's (the idle bound only).
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
/// (outside any part's data, as the handler marks it with [`BodyGuard::begin_part`]) no more is read
/// once [`MAX_MULTIPART_OVERHEAD`] bytes were and the reader still asks for more; within a part,
/// reading waits while more than [`MAX_READ_AHEAD`] bytes were read and not yet taken by the writer.
/// A body outside these bounds ends in an error that says which one.
///
/// multer reads its stream until it is pending before it looks at what it read, so after each chunk
/// the stream is pending once: multer then parses what it has and asks for more only when it needs
/// more, and what it asks for is what the bounds count.
fn guarded<S>(
    body: S,
    guard: Arc<BodyGuard>,
    idle: std::time::Duration,
) -> futures_util::stream::BoxStream<'static, std::io::Result<bytes::Bytes>>
where
    S: futures_util::Stream<Item = Result<bytes::Bytes, axum::Error>> + Send + Unpin + 'static,
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

/// The answer to a multipart body multer could not read.
fn multipart_error(guard: &BodyGuard, e: multer::Error) -> E2bApiError {
    if let Some(why) = guard.failure() {
        return invalid(why);
    }
    match e {
        multer::Error::StreamSizeExceeded { limit } | multer::Error::FieldSizeExceeded { limit, .. } => {
            E2bApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the upload is larger than this server's limit of {limit} bytes: upload less at a time"),
            )
        }
        e => invalid(format!("malformed multipart body: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    const CHUNK: usize = 8 * 1024;

    /// A client body that is always ready: `chunks` (endless when `None`) of `CHUNK` bytes of
    /// `fill`, after `head`, counting what was pulled from it.
    fn client(
        head: &'static [u8],
        fill: u8,
        chunks: Option<usize>,
        pulled: Arc<AtomicU64>,
    ) -> impl futures_util::Stream<Item = Result<bytes::Bytes, axum::Error>> + Send + Unpin + 'static {
        let body = futures_util::stream::iter(std::iter::once(bytes::Bytes::from_static(head)).chain(
            std::iter::repeat_with(move || bytes::Bytes::from(vec![fill; CHUNK])).take(chunks.unwrap_or(usize::MAX)),
        ));
        body.map(move |b| {
            pulled.fetch_add(b.len() as u64, Ordering::Relaxed);
            Ok(b)
        })
    }

    #[tokio::test]
    async fn a_body_without_its_boundary_is_refused_after_a_bounded_read() {
        let (pulled, guard) = (Arc::new(AtomicU64::new(0)), Arc::new(BodyGuard::multipart()));
        let stream = guarded(client(b"", b'a', None, Arc::clone(&pulled)), Arc::clone(&guard), BODY_IDLE);
        let mut parts = multer::Multipart::new(stream, "x");
        let err = match parts.next_field().await {
            Err(e) => multipart_error(&guard, e),
            Ok(_) => panic!("a body with no `--x` in it has no part"),
        };
        assert_eq!(err.status, StatusCode::BAD_REQUEST);
        assert!(err.message.contains("outside file data"), "{}", err.message);
        let read = pulled.load(Ordering::Relaxed);
        assert!(read <= MAX_MULTIPART_OVERHEAD + 2 * CHUNK as u64, "read {read} bytes of an endless preamble");
    }

    #[tokio::test]
    async fn a_part_is_read_no_further_ahead_of_its_writer_than_the_bound() {
        let (pulled, guard) = (Arc::new(AtomicU64::new(0)), Arc::new(BodyGuard::multipart()));
        let head = b"--x\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\n";
        // 8 MiB of data that the writer takes slowly, one chunk at a time.
        let stream = guarded(client(head, b'a', Some(1024), Arc::clone(&pulled)), Arc::clone(&guard), BODY_IDLE);
        let mut parts = multer::Multipart::new(stream, "x");
        let mut field = parts.next_field().await.unwrap().expect("the part");
        guard.begin_part();
        let mut taken = 0u64;
        for _ in 0..4 {
            let b = field.chunk().await.unwrap().expect("data");
            guard.delivered(b.len());
            taken += b.len() as u64;
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
        let guard = Arc::new(BodyGuard::default());
        let stalled = futures_util::stream::pending::<Result<bytes::Bytes, axum::Error>>();
        let stream = guarded(stalled, Arc::clone(&guard), std::time::Duration::from_millis(50));
        let mut parts = multer::Multipart::new(stream, "x");
        let err = match parts.next_field().await {
            Err(e) => multipart_error(&guard, e),
            Ok(_) => panic!("a body that sends nothing has no part"),
        };
        assert!(err.message.contains("sent nothing"), "{}", err.message);
    }
}
