//! envd's `/files`: `GET` streams a file out, `POST` writes files, from an `application/octet-stream`
//! body (one file, at `path`) or a `multipart/form-data` one (each `file` part at the `path` query
//! parameter when there is one part, else at its filename). Bodies stream both ways, never held
//! whole; every write is bounded by the server's upload limit and audited by the control layer.
//! A multipart body is bounded too in what is not file data (preamble, part headers: at most
//! [`MAX_MULTIPART_OVERHEAD`](super::multipart::MAX_MULTIPART_OVERHEAD) at a time), in its parts
//! ([`MAX_PARTS`]) and in how long it may stall ([`BODY_IDLE`]), as [`super::multipart`] reads it
//! (fuzzed as `envd_multipart`). A signed URL allows one file: its signed `path`, written from the
//! one part or the octet-stream body.

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use sandlot_control::{SandboxPath, Upload, WriteOptions};
use serde::Deserialize;

use base64::Engine;
use sandlot_control::Caller;
use sha2::Digest;

use super::gzip::{accepts_gzip, gunzip, gzip_body};
use super::multipart::{guarded, MultipartError, Parts, BODY_IDLE, MAX_PARTS};
use super::{named_user, Target};
use crate::server::app::AppState;
use crate::server::e2b::E2bApiError;
use crate::server::files::{body_reader, drain, stream_body};

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
) -> Option<Result<(Caller, SignedFile), E2bApiError>> {
    if req.uri().path() != "/files" {
        return None;
    }
    let query: Vec<(String, String)> = serde_urlencoded_pairs(req.uri().query().unwrap_or(""));
    let get = |k: &str| query.iter().find(|(name, _)| name == k).map(|(_, v)| v.as_str());
    let signature = get("signature")?.to_string();
    let operation = match *req.method() {
        axum::http::Method::GET => "read",
        axum::http::Method::POST => "write",
        _ => return Some(Err(invalid("a signed /files URL is for GET or POST"))),
    };
    let (path, user) = (get("path").unwrap_or("").to_string(), get("username").unwrap_or("").to_string());
    if path.is_empty() {
        return Some(Err(invalid(
            "a signed /files URL must name its file: make it with a path (download_url / upload_url with `path`)",
        )));
    }
    let expiration = get("signature_expiration").map(str::to_string);
    if let Some(exp) = &expiration {
        let Ok(at) = exp.parse::<u64>() else {
            return Some(Err(invalid("signature_expiration must be a Unix time in seconds")));
        };
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        if at < now {
            // envd's own words, which the SDKs' tests compare whole: make a new URL to go on.
            return Some(Err(E2bApiError::new(StatusCode::UNAUTHORIZED, "signature is already expired")));
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
    let caller = app.control.caller_proving_token(id, proves).map_err(E2bApiError::from);
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
    headers: HeaderMap,
) -> Result<Response, E2bApiError> {
    let q = bound_to_signature(q, &t);
    let user = user_of(&q)?;
    let path = q.path.as_deref().ok_or_else(|| invalid("missing `path` query parameter: the file to read"))?;
    let stream = app.control.read_file(&t.caller, &t.id, path, user).await?;
    Ok(if accepts_gzip(&headers) {
        gzip_body(stream, "application/octet-stream")
    } else {
        stream_body(stream, "application/octet-stream")
    })
}

/// The prefix of the upload headers that carry a file's metadata (`X-Metadata-Author: mish`).
const METADATA_HEADER_PREFIX: &str = "x-metadata-";

/// The metadata an upload's `X-Metadata-*` headers carry, keys lowercased (header names are
/// HTTP tokens already); values must be printable US-ASCII, as envd requires.
fn metadata_of(headers: &HeaderMap) -> Result<std::collections::BTreeMap<String, String>, E2bApiError> {
    let mut out = std::collections::BTreeMap::new();
    for (name, value) in headers {
        let Some(key) = name.as_str().strip_prefix(METADATA_HEADER_PREFIX) else { continue };
        if key.is_empty() {
            return Err(invalid("an X-Metadata- header without a key: name it X-Metadata-KEY"));
        }
        let value = value
            .to_str()
            .ok()
            .filter(|v| v.bytes().all(|b| (0x20..0x7f).contains(&b)))
            .ok_or_else(|| invalid(format!("metadata {key:?}: values must be printable US-ASCII")))?;
        out.insert(key.to_string(), value.to_string());
    }
    Ok(out)
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
fn written(path: &str, metadata: &std::collections::BTreeMap<String, String>) -> serde_json::Value {
    let name = path.rsplit('/').next().unwrap_or(path);
    let mut v = serde_json::json!({"name": name, "type": "file", "path": path});
    if !metadata.is_empty() {
        v["metadata"] = serde_json::json!(metadata);
    }
    v
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
    let gzipped = match headers.get(header::CONTENT_ENCODING).map(|v| v.to_str().unwrap_or("?").trim()) {
        None => false,
        Some(enc) if enc.eq_ignore_ascii_case("identity") || enc.is_empty() => false,
        Some(enc) if enc.eq_ignore_ascii_case("gzip") || enc.eq_ignore_ascii_case("x-gzip") => true,
        Some(enc) => {
            let mut reader = body_reader(body);
            drain(&mut reader).await;
            return Err(E2bApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("Content-Encoding {enc:?} is not supported: send the body as it is, or gzip"),
            ));
        }
    };
    let metadata = match metadata_of(&headers) {
        Ok(m) => m,
        Err(e) => {
            drain(&mut body_reader(body)).await;
            return Err(e);
        }
    };
    // envd's writes: in place, so a watcher sees the file's own name, with the upload's metadata.
    let opts = || WriteOptions { in_place: true, metadata: metadata.clone() };
    let data = guarded(body.into_data_stream(), Default::default(), BODY_IDLE);
    let data = if gzipped { gunzip(data) } else { data };
    let mut results = Vec::new();
    if ct.starts_with("multipart/form-data") {
        let boundary = multer::parse_boundary(&ct).map_err(|e| invalid(format!("bad multipart Content-Type: {e}")))?;
        let max = app.control.config().max_upload_bytes;
        let mut parts = Parts::new(data, boundary, max, BODY_IDLE);
        loop {
            let field = match parts.next().await {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => return Err(multipart_error(e)),
            };
            let count = parts.count();
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
            let mut reader = tokio_util::io::StreamReader::new(parts.data(field));
            let to = SandboxPath { path: &path, user };
            let written_to = app
                .control
                .upload(&t.caller, &t.id, to, Upload::File { mode: None, opts: opts() }, None, &mut reader)
                .await;
            parts.end_part();
            match written_to {
                Ok(w) => results.push(written(&w.path, &metadata)),
                // A failed read of the part is the body's fault: say why, not that the write failed.
                Err(e) => return Err(parts.failure().map(invalid).unwrap_or_else(|| e.into())),
            }
        }
        if results.is_empty() {
            return Err(invalid("the multipart body holds no file part"));
        }
    } else {
        // A gzip body's length is not the file's: only the supervisor's count of inflated bytes binds.
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .filter(|_| !gzipped);
        let mut reader = tokio_util::io::StreamReader::new(data);
        let Some(path) = q.path.as_deref() else {
            drain(&mut reader).await;
            return Err(invalid("missing `path` query parameter: where to write the file"));
        };
        let to = SandboxPath { path, user };
        let kind = Upload::File { mode: None, opts: opts() };
        match app.control.upload(&t.caller, &t.id, to, kind, declared, &mut reader).await {
            Ok(w) => results.push(written(&w.path, &metadata)),
            Err(e) => {
                drain(&mut reader).await;
                return Err(e.into());
            }
        }
    }
    Ok((StatusCode::OK, Json(results)).into_response())
}

/// The answer to a multipart body that could not be read.
fn multipart_error(e: MultipartError) -> E2bApiError {
    match e {
        MultipartError::Refused(why) => invalid(why),
        MultipartError::TooLarge { limit } => E2bApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the upload is larger than this server's limit of {limit} bytes: upload less at a time"),
        ),
        MultipartError::TooManyParts => invalid(format!("more than {MAX_PARTS} files in one upload: split it")),
        MultipartError::Malformed(e) => invalid(format!("malformed multipart body: {e}")),
    }
}
