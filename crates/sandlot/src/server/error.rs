//! API errors: the control layer's errors (and the HTTP layer's own) as an HTTP status and the JSON
//! error body `{"error": {"code", "message", "retryable"}}`. The status of each kind is chosen here and
//! nowhere else.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandlot_api::{codes, ErrorBody, ErrorDetail};
use sandlot_control::{Error, Kind};

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub retryable: bool,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, code, message: message.into(), retryable: false }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Error::invalid(message).into()
    }

    pub fn not_found(what: &str) -> Self {
        Error::not_found(what).into()
    }
}

/// The HTTP status of each kind of control-layer error.
pub(super) fn status(kind: Kind) -> StatusCode {
    match kind {
        Kind::Invalid => StatusCode::BAD_REQUEST,
        Kind::Unauthenticated => StatusCode::UNAUTHORIZED,
        Kind::Forbidden | Kind::PermissionDenied | Kind::RegistryDenied => StatusCode::FORBIDDEN,
        Kind::NotFound | Kind::FileNotFound => StatusCode::NOT_FOUND,
        Kind::Conflict | Kind::AlreadyExists | Kind::WrongFileKind | Kind::DirectoryNotEmpty => StatusCode::CONFLICT,
        Kind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        Kind::LimitReached | Kind::ServerFull => StatusCode::TOO_MANY_REQUESTS,
        Kind::PortUnreachable | Kind::RegistryUnavailable => StatusCode::BAD_GATEWAY,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        ApiError { status: status(e.kind), code: e.code(), retryable: e.retryable(), message: e.message }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // A 500 is ours; a 502/503/504 is a sandbox's server not answering, a full host or a
        // client's timeout: worth a warning, not an error.
        if self.status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(code = self.code, "{}", self.message);
        } else if self.status.is_server_error() {
            tracing::warn!(code = self.code, "{}", self.message);
        }
        let body = ErrorBody {
            error: ErrorDetail { code: self.code.into(), message: self.message, retryable: self.retryable },
        };
        (self.status, Json(body)).into_response()
    }
}

/// The method is not one this route answers.
pub fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        codes::INVALID_REQUEST,
        "method not allowed on this route; see docs/API.md",
    )
}
