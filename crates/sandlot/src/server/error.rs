//! API errors: a stable code, an HTTP status and a message that says what to do.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandlot_api::{codes, ErrorBody, ErrorDetail};
use sandlot_engine::{EngineError, FileErrorKind};

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, code, message: message.into() }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, codes::INVALID_REQUEST, message)
    }

    pub fn not_found(what: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, codes::NOT_FOUND, format!("{what} not found"))
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, codes::CONFLICT, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, codes::INTERNAL, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(code = self.code, "{}", self.message);
        }
        let body = ErrorBody { error: ErrorDetail { code: self.code.into(), message: self.message } };
        (self.status, Json(body)).into_response()
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::NotRunning | EngineError::Gone(_) => {
                ApiError::conflict(format!("{e}; its processes are gone. Delete it and create a new one"))
            }
            EngineError::UnknownImage(_) => ApiError::invalid(e.to_string()),
            EngineError::OutputBudget(m) => ApiError::new(StatusCode::TOO_MANY_REQUESTS, codes::LIMIT_REACHED, m),
            EngineError::PortUnreachable(m) => ApiError::new(StatusCode::BAD_GATEWAY, "port_unreachable", m),
            EngineError::Busy(m) => ApiError::new(StatusCode::TOO_MANY_REQUESTS, codes::LIMIT_REACHED, m),
            EngineError::StartFailed(_) | EngineError::Host(_) => ApiError::internal(e.to_string()),
            EngineError::File { kind, message } => {
                let (status, code) = match kind {
                    FileErrorKind::NotFound => (StatusCode::NOT_FOUND, codes::FILE_NOT_FOUND),
                    FileErrorKind::PermissionDenied => (StatusCode::FORBIDDEN, codes::PERMISSION_DENIED),
                    FileErrorKind::WrongKind => (StatusCode::CONFLICT, codes::WRONG_FILE_KIND),
                    FileErrorKind::AlreadyExists => (StatusCode::CONFLICT, codes::ALREADY_EXISTS),
                    FileErrorKind::NotEmpty => (StatusCode::CONFLICT, codes::DIRECTORY_NOT_EMPTY),
                    FileErrorKind::TooLarge => (StatusCode::PAYLOAD_TOO_LARGE, codes::TOO_LARGE),
                    FileErrorKind::Invalid => (StatusCode::BAD_REQUEST, codes::INVALID_REQUEST),
                    FileErrorKind::Busy => (StatusCode::TOO_MANY_REQUESTS, codes::LIMIT_REACHED),
                    FileErrorKind::Other => (StatusCode::INTERNAL_SERVER_ERROR, codes::INTERNAL),
                };
                ApiError::new(status, code, message)
            }
        }
    }
}

impl From<sandlot_store::StoreError> for ApiError {
    fn from(e: sandlot_store::StoreError) -> Self {
        ApiError::internal(e.to_string())
    }
}
