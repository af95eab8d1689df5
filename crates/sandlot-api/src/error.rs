//! The error body of every non-2xx answer and the stable codes it carries.

use serde::{Deserialize, Serialize};

/// Error body of every non-2xx answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// Stable code plus a message meant for a human.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct ErrorDetail {
    /// Stable machine code, see [`codes`].
    pub code: String,
    /// What went wrong and what to do.
    pub message: String,
    /// Whether sending the same request again later may succeed (the server was full, overloaded or
    /// failed), as opposed to a request that will fail the same way until the caller changes it.
    /// Always sent; servers from before this field omit it, which reads as `false`.
    #[serde(default)]
    pub retryable: bool,
}

/// Stable error codes. New ones may be added; existing ones keep their meaning and HTTP status.
pub mod codes {
    /// 400: the request is malformed or a value is out of range.
    pub const INVALID_REQUEST: &str = "invalid_request";
    /// 401: no or unknown API key.
    pub const UNAUTHENTICATED: &str = "unauthenticated";
    /// 403: the key is valid but may not do this (admin routes).
    pub const FORBIDDEN: &str = "forbidden";
    /// 404: no such sandbox/process for this tenant.
    pub const NOT_FOUND: &str = "not_found";
    /// 404: the path does not exist inside the sandbox.
    pub const FILE_NOT_FOUND: &str = "file_not_found";
    /// 409: the sandbox is not in a state that allows this.
    pub const CONFLICT: &str = "conflict";
    /// 409: a directory was given where a file is needed, or the reverse.
    pub const WRONG_FILE_KIND: &str = "wrong_file_kind";
    /// 409: the destination exists.
    pub const ALREADY_EXISTS: &str = "already_exists";
    /// 409: a directory is not empty (remove it with `recursive=true`).
    pub const DIRECTORY_NOT_EMPTY: &str = "directory_not_empty";
    /// 403: the sandbox user may not access the path.
    pub const PERMISSION_DENIED: &str = "permission_denied";
    /// 413: the body is larger than the server allows.
    pub const TOO_LARGE: &str = "too_large";
    /// 429: the server runs its maximum number of sandboxes (`--max-sandboxes`), or a sandbox has as many
    /// inbound connections or file operations open as its supervisor allows at once.
    pub const LIMIT_REACHED: &str = "limit_reached";
    /// 429: the running sandboxes together hold this server's capacity (memory, pids or disk, times
    /// `--overcommit`); retry when some have ended.
    pub const SERVER_FULL: &str = "server_full";
    /// 500: a bug or a host problem; retrying may help.
    pub const INTERNAL: &str = "internal";
    /// 502: an exposed port of the sandbox could not be reached (nothing listens on it, or the server
    /// inside broke the connection before answering).
    pub const PORT_UNREACHABLE: &str = "port_unreachable";
    /// 403: the image registry refused the credentials (or gave none access to the repository).
    pub const REGISTRY_DENIED: &str = "registry_denied";
    /// 502: the image registry could not be reached, its TLS certificate was not trusted, or it sent
    /// data that did not match its digests.
    pub const REGISTRY_UNAVAILABLE: &str = "registry_unavailable";
    /// 503: the server is overloaded: it has its maximum of API connections open (in total or from
    /// the caller's address); retry shortly.
    pub const UNAVAILABLE: &str = "unavailable";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_is_always_sent() {
        let detail = ErrorDetail { code: codes::INTERNAL.into(), message: "m".into(), retryable: false };
        let line = serde_json::to_string(&ErrorBody { error: detail }).unwrap();
        assert_eq!(line, r#"{"error":{"code":"internal","message":"m","retryable":false}}"#);
    }

    #[test]
    fn an_error_without_retryable_parses_as_not_retryable() {
        let body: ErrorBody = serde_json::from_str(r#"{"error":{"code":"not_found","message":"gone"}}"#).unwrap();
        assert!(!body.error.retryable);
        let body: ErrorBody =
            serde_json::from_str(r#"{"error":{"code":"server_full","message":"full","retryable":true}}"#).unwrap();
        assert!(body.error.retryable);
    }
}
