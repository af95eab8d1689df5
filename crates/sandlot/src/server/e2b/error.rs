//! Errors of the E2B control plane: the control layer's kinds as the HTTP status and body
//! (`{"code": <status>, "message": ...}`) the E2B SDKs map to their exceptions (401/403 →
//! `AuthenticationException`, 404 → `NotFoundException`, 429 → `RateLimitException`, …).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandlot_api::e2b::E2bError;
use sandlot_control::Error;

/// An error answer of the E2B control plane.
#[derive(Debug)]
pub struct E2bApiError {
    pub status: StatusCode,
    pub message: String,
}

impl E2bApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        E2bApiError { status, message: message.into() }
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        E2bApiError::new(StatusCode::NOT_FOUND, message)
    }
}

impl From<Error> for E2bApiError {
    fn from(e: Error) -> Self {
        // The same status as the native API's, so both surfaces agree on whose fault it is.
        let status = crate::server::error::status(e.kind);
        E2bApiError { status, message: e.message }
    }
}

impl IntoResponse for E2bApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(status = self.status.as_u16(), "e2b: {}", self.message);
        }
        (self.status, Json(E2bError { code: self.status.as_u16(), message: self.message })).into_response()
    }
}
