//! Request extractors: the authenticated caller, JSON bodies and query strings whose rejections become
//! API errors with a clear message, and the lookup of a caller's sandbox.

use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::Json;
use sandlot_api::{codes, SandboxState};
use sandlot_engine::Sandbox;
use sandlot_store::SandboxRecord;
use serde::de::DeserializeOwned;

use super::{ApiError, AppState};

/// The tenant a valid `Authorization: Bearer` key acts for.
pub struct Caller {
    pub tenant: String,
    pub admin: bool,
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, ApiError> {
        match bearer_key(&parts.headers) {
            None => Err(unauthenticated("missing Authorization header; send `Authorization: Bearer <API key>`")),
            Some(None) => Err(unauthenticated("malformed Authorization header; expected `Bearer <API key>`")),
            Some(Some(key)) => Caller::with_key(app, key),
        }
    }
}

impl Caller {
    /// The caller an API key stands for; an unknown, expired or revoked key is a 401 that says which.
    pub fn with_key(app: &AppState, key: &str) -> Result<Caller, ApiError> {
        use sandlot_store::Auth;
        match app.store.authenticate(key)? {
            Auth::Valid(p) => Ok(Caller { tenant: p.tenant, admin: p.admin }),
            Auth::Unknown => Err(unauthenticated("unknown API key")),
            Auth::Expired(at) => Err(unauthenticated(&format!(
                "this API key expired at {at} (Unix ms); ask the admin for a new one (`sandlot keys create`)"
            ))),
            Auth::Revoked(at) => Err(unauthenticated(&format!(
                "this API key was revoked at {at} (Unix ms); ask the admin for a new one (`sandlot keys create`)"
            ))),
        }
    }
}

fn unauthenticated(message: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, codes::UNAUTHENTICATED, message)
}

/// The key of an `Authorization: Bearer <key>` header (scheme case-insensitive): `None` without the
/// header, `Some(None)` when it is not a bearer key.
pub fn bearer_key(headers: &axum::http::HeaderMap) -> Option<Option<&str>> {
    let header = headers.get(axum::http::header::AUTHORIZATION)?;
    Some(
        header
            .to_str()
            .ok()
            .and_then(|h| h.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, key)| key.trim())
            .filter(|k| !k.is_empty()),
    )
}

/// A JSON body; unknown fields and type errors are a 400 that names the problem.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(ApiJson(v)),
            Err(JsonRejection::MissingJsonContentType(_)) => {
                Err(ApiError::invalid("expected a JSON body with `Content-Type: application/json`"))
            }
            Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                codes::TOO_LARGE,
                "JSON body over 16 MiB; send large data as a file upload instead",
            )),
            Err(e) => Err(ApiError::invalid(format!("invalid JSON body: {}", e.body_text()))),
        }
    }
}

/// A query string; bad values are a 400 that names the parameter.
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(v)) => Ok(ApiQuery(v)),
            Err(e @ QueryRejection::FailedToDeserializeQueryString(_)) => {
                Err(ApiError::invalid(format!("invalid query string: {}", e.body_text())))
            }
            Err(e) => Err(ApiError::invalid(e.body_text())),
        }
    }
}

/// Path parameters; a malformed one (e.g. a non-numeric process id) is a 400 in the JSON error shape.
pub struct ApiPath<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(ApiPath(v)),
            Err(e) => Err(ApiError::invalid(format!("invalid path: {}", e.body_text()))),
        }
    }
}

/// The caller's sandbox `id`; another tenant's is simply not found (404, never 403).
pub fn record(app: &AppState, caller: &Caller, id: &str) -> Result<SandboxRecord, ApiError> {
    app.store.get_sandbox(&caller.tenant, id)?.ok_or_else(|| ApiError::not_found(&format!("sandbox {id}")))
}

/// The caller's sandbox `id`, which must be running — or is resumed first when it is stopped or
/// paused and has `auto_resume`. Counts as activity for the idle timeout.
pub async fn running(app: &AppState, caller: &Caller, id: &str) -> Result<(SandboxRecord, Arc<Sandbox>), ApiError> {
    // Deleted ones too, so the error can say how the sandbox ended.
    let mut rec =
        app.store.get_sandbox_any(&caller.tenant, id)?.ok_or_else(|| ApiError::not_found(&format!("sandbox {id}")))?;
    if matches!(rec.info.state, SandboxState::Stopped | SandboxState::Paused) && rec.info.auto_resume {
        rec = super::lifecycle::resume(app, &rec, "auto_resume").await?;
    }
    match (rec.info.state, app.engine.get(id)) {
        (SandboxState::Running, Some(sb)) if sb.alive() => {
            app.touch(id);
            Ok((rec, sb))
        }
        (state, _) => Err(ApiError::conflict(format!(
            "sandbox {id} is {}{}; only a running sandbox accepts commands and file operations{}",
            state.as_str(),
            rec.info.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default(),
            match state {
                SandboxState::Stopped | SandboxState::Paused => " (POST …/resume, or create it with auto_resume)",
                _ => "",
            }
        ))),
    }
}

/// Checks a text value that will cross into the sandbox (argv, env, paths): no NUL bytes.
pub fn no_nul(what: &str, s: &str) -> Result<(), ApiError> {
    if s.contains('\0') {
        return Err(ApiError::invalid(format!("{what} contains a NUL byte")));
    }
    Ok(())
}
