//! The SDK's error: opaque [`Error`] plus a [`ErrorKind`] to branch on.
//!
//! The server's answer is kept whole: its stable code ([`Error::code`]), the HTTP status
//! ([`Error::status`]) and its message (the `Display` text). Transport problems get a kind of their own so
//! "no server running" reads differently from "the server said no".

use std::error::Error as StdError;
use std::fmt;
use std::io;

use sandlot_api::{codes, ErrorBody};

/// `Result` with the SDK's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What kind of failure an [`Error`] is. New kinds may be added, so match with a `_` arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The client is set up wrong: no API key, a URL it cannot use, a request it refuses to send.
    Config,
    /// The server could not be reached (nothing listening, DNS failure, connect timeout).
    Connect,
    /// The API key is missing or unknown (HTTP 401).
    Unauthenticated,
    /// The key is valid but may not do this, or the sandbox user may not touch the path (HTTP 403).
    PermissionDenied,
    /// No such sandbox, process or path for this tenant (HTTP 404).
    NotFound,
    /// The request is malformed or a value is out of range (HTTP 400).
    InvalidRequest,
    /// The sandbox's state, an existing path or a file kind does not allow this (HTTP 409).
    Conflict,
    /// The body is larger than the server accepts (HTTP 413).
    TooLarge,
    /// Too many sandboxes or processes for the tenant (HTTP 429); retry later.
    LimitReached,
    /// The server failed or is unavailable (HTTP 5xx); retrying may help.
    Server,
    /// The server answered something this client does not understand.
    Protocol,
    /// A local read or write failed, or the connection broke mid-transfer.
    Io,
    /// Anything else.
    Other,
}

/// An error from the sandlot SDK. `Display` is the server's message (or ours for local failures).
pub struct Error {
    kind: ErrorKind,
    code: Option<String>,
    status: Option<u16>,
    /// The server's own retry hint (`retryable` in its error body); `false` from servers that predate it.
    retryable: bool,
    message: String,
    source: Option<Box<dyn StdError + Send + Sync + 'static>>,
}

impl Error {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The server's stable error code (see `sandlot_api::codes`), when the server answered with one.
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }

    /// The HTTP status of the answer, when there was one.
    pub fn status(&self) -> Option<u16> {
        self.status
    }

    /// Whether the same request may succeed if sent again later (server down, overloaded or limited).
    /// True when the server said so in its answer, or when the kind of failure is one that passes
    /// (servers that predate the server's hint never send it, so the kind still decides for them).
    pub fn is_retryable(&self) -> bool {
        self.retryable || matches!(self.kind, ErrorKind::Connect | ErrorKind::LimitReached | ErrorKind::Server)
    }

    /// An error of `kind` with our own message.
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error { kind, code: None, status: None, retryable: false, message: message.into(), source: None }
    }

    fn with_source(mut self, source: impl StdError + Send + Sync + 'static) -> Error {
        self.source = Some(Box::new(source));
        self
    }

    /// Builds the error for a non-2xx answer from its status and body (normally an [`ErrorBody`]).
    pub(crate) fn from_status(status: u16, body: &str) -> Error {
        match serde_json::from_str::<ErrorBody>(body) {
            Ok(parsed) => Error {
                kind: kind_of_code(&parsed.error.code).unwrap_or_else(|| kind_of_status(status)),
                code: Some(parsed.error.code),
                status: Some(status),
                retryable: parsed.error.retryable,
                message: parsed.error.message,
                source: None,
            },
            Err(_) => {
                let body = body.trim();
                let message = if body.is_empty() {
                    format!("HTTP {status} with no error body")
                } else {
                    format!("HTTP {status}: {}", truncate(body, 300))
                };
                Error {
                    kind: kind_of_status(status),
                    code: None,
                    status: Some(status),
                    retryable: false,
                    message,
                    source: None,
                }
            }
        }
    }

    /// An error the server reported inside a stream (an NDJSON `error` line), after its 200.
    pub(crate) fn from_detail(detail: sandlot_api::ErrorDetail) -> Error {
        Error {
            kind: kind_of_code(&detail.code).unwrap_or(ErrorKind::Server),
            code: Some(detail.code),
            status: None,
            retryable: detail.retryable,
            message: detail.message,
            source: None,
        }
    }

    /// Maps a ureq failure; `base_url` names the server in "cannot reach" messages.
    pub(crate) fn from_ureq(err: ureq::Error, base_url: &str) -> Error {
        match err {
            ureq::Error::Status(status, response) => {
                // Error bodies are small; cap the read so a misbehaving peer cannot make us buffer much.
                let mut body = String::new();
                let read = io::Read::read_to_string(&mut io::Read::take(response.into_reader(), 64 * 1024), &mut body);
                if read.is_err() {
                    body.clear();
                }
                Error::from_status(status, &body)
            }
            ureq::Error::Transport(transport) => Error::from_transport(transport, base_url),
        }
    }

    fn from_transport(transport: ureq::Transport, base_url: &str) -> Error {
        use ureq::ErrorKind as U;
        let detail = transport.to_string();
        let (kind, message) = match transport.kind() {
            U::ConnectionFailed | U::Dns | U::ProxyConnect => (
                ErrorKind::Connect,
                format!("cannot reach sandlot at {base_url}: {detail}; start a server with `sudo sandlot serve`"),
            ),
            U::InvalidUrl | U::UnknownScheme | U::InsecureRequestHttpsOnly | U::InvalidProxyUrl => (
                ErrorKind::Config,
                format!(
                    "cannot use server URL {base_url}: {detail} (expected e.g. http://127.0.0.1:7423; \
                     this client speaks plain http)"
                ),
            ),
            U::BadStatus | U::BadHeader | U::TooManyRedirects => {
                (ErrorKind::Protocol, format!("unexpected answer from {base_url}: {detail}"))
            }
            U::Io => (ErrorKind::Io, format!("connection to {base_url} failed: {detail}")),
            _ => (ErrorKind::Other, format!("request to {base_url} failed: {detail}")),
        };
        Error::new(kind, message).with_source(transport)
    }

    /// A local or mid-transfer I/O failure; `what` says what we were doing.
    pub(crate) fn io(what: &str, err: io::Error) -> Error {
        Error::new(ErrorKind::Io, format!("{what}: {err}")).with_source(err)
    }

    /// A 2xx answer whose body does not parse.
    pub(crate) fn decode(what: &str, err: serde_json::Error) -> Error {
        if err.is_io() {
            Error::new(ErrorKind::Io, format!("reading {what}: {err}")).with_source(err)
        } else {
            Error::new(ErrorKind::Protocol, format!("cannot parse {what} from the server: {err}")).with_source(err)
        }
    }
}

/// Kind for a known server code; `None` lets the HTTP status decide.
fn kind_of_code(code: &str) -> Option<ErrorKind> {
    Some(match code {
        codes::INVALID_REQUEST => ErrorKind::InvalidRequest,
        codes::UNAUTHENTICATED => ErrorKind::Unauthenticated,
        codes::FORBIDDEN | codes::PERMISSION_DENIED | codes::REGISTRY_DENIED => ErrorKind::PermissionDenied,
        codes::NOT_FOUND | codes::FILE_NOT_FOUND => ErrorKind::NotFound,
        codes::CONFLICT | codes::WRONG_FILE_KIND | codes::ALREADY_EXISTS => ErrorKind::Conflict,
        codes::TOO_LARGE => ErrorKind::TooLarge,
        codes::LIMIT_REACHED | codes::SERVER_FULL => ErrorKind::LimitReached,
        codes::INTERNAL | codes::UNAVAILABLE | codes::REGISTRY_UNAVAILABLE => ErrorKind::Server,
        _ => return None,
    })
}

fn kind_of_status(status: u16) -> ErrorKind {
    match status {
        400 | 422 => ErrorKind::InvalidRequest,
        401 => ErrorKind::Unauthenticated,
        403 => ErrorKind::PermissionDenied,
        404 => ErrorKind::NotFound,
        409 => ErrorKind::Conflict,
        413 => ErrorKind::TooLarge,
        429 => ErrorKind::LimitReached,
        500..=599 => ErrorKind::Server,
        _ => ErrorKind::Other,
    }
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.kind)
            .field("code", &self.code)
            .field("status", &self.status)
            .field("retryable", &self.retryable)
            .field("message", &self.message)
            .finish()
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn StdError + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_error_body_gives_code_status_and_message() {
        let err = Error::from_status(404, r#"{"error":{"code":"not_found","message":"no sandbox sb_x"}}"#);
        assert_eq!(err.kind(), ErrorKind::NotFound);
        assert_eq!(err.code(), Some("not_found"));
        assert_eq!(err.status(), Some(404));
        assert_eq!(err.to_string(), "no sandbox sb_x");
    }

    #[test]
    fn code_decides_over_status() {
        let err = Error::from_status(403, r#"{"error":{"code":"permission_denied","message":"nope"}}"#);
        assert_eq!(err.kind(), ErrorKind::PermissionDenied);
        let err = Error::from_status(409, r#"{"error":{"code":"wrong_file_kind","message":"is a directory"}}"#);
        assert_eq!(err.kind(), ErrorKind::Conflict);
        let err = Error::from_status(503, r#"{"error":{"code":"unavailable","message":"bye"}}"#);
        assert_eq!(err.kind(), ErrorKind::Server);
        assert!(err.is_retryable());
    }

    #[test]
    fn the_servers_retry_hint_is_read() {
        let body = r#"{"error":{"code":"conflict","message":"busy","retryable":true}}"#;
        let err = Error::from_status(409, body);
        assert_eq!(err.kind(), ErrorKind::Conflict);
        assert!(err.is_retryable());
        let err = Error::from_status(409, r#"{"error":{"code":"conflict","message":"stopped","retryable":false}}"#);
        assert!(!err.is_retryable());
        let err = Error::from_status(409, r#"{"error":{"code":"conflict","message":"stopped"}}"#);
        assert!(!err.is_retryable());
    }

    #[test]
    fn unknown_code_falls_back_to_status() {
        let err = Error::from_status(413, r#"{"error":{"code":"brand_new","message":"big"}}"#);
        assert_eq!(err.kind(), ErrorKind::TooLarge);
        assert_eq!(err.code(), Some("brand_new"));
    }

    #[test]
    fn non_json_body_is_kept_in_the_message() {
        let err = Error::from_status(502, "Bad Gateway");
        assert_eq!(err.kind(), ErrorKind::Server);
        assert_eq!(err.code(), None);
        assert_eq!(err.to_string(), "HTTP 502: Bad Gateway");
        let err = Error::from_status(401, "");
        assert_eq!(err.kind(), ErrorKind::Unauthenticated);
        assert_eq!(err.to_string(), "HTTP 401 with no error body");
    }

    #[test]
    fn ureq_status_error_reads_the_body() {
        let response = ureq::Response::new(
            400,
            "Bad Request",
            r#"{"error":{"code":"invalid_request","message":"argv is empty"}}"#,
        )
        .unwrap();
        let err = Error::from_ureq(ureq::Error::Status(400, response), "http://x");
        assert_eq!(err.kind(), ErrorKind::InvalidRequest);
        assert_eq!(err.to_string(), "argv is empty");
    }

    #[test]
    fn long_bodies_are_cut_on_a_char_boundary() {
        let body = "é".repeat(400);
        let err = Error::from_status(500, &body);
        assert!(err.to_string().len() <= "HTTP 500: ".len() + 300);
    }

    #[test]
    fn decode_errors_are_protocol_errors() {
        let err = serde_json::from_str::<u8>("{").unwrap_err();
        assert_eq!(Error::decode("x", err).kind(), ErrorKind::Protocol);
    }
}
