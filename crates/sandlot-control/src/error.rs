//! The control layer's one error type: what went wrong, whose fault it is and whether a retry may
//! work. Surfaces map [`Kind`] to their own answer (an HTTP status, an MCP error) in one place each.

use sandlot_api::codes;
use sandlot_engine::{EngineError, FileErrorKind};

/// Who is at fault for an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The caller asked for something invalid, unknown, forbidden or impossible in this state.
    Client,
    /// The code in the sandbox (nothing listens on the port, its server hung up).
    Workload,
    /// This server (a host step failed, the store failed).
    Server,
}

/// What kind of error; each has one stable API code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// The request is malformed or out of range.
    Invalid,
    /// No valid API key.
    Unauthenticated,
    /// The key may not do this.
    Forbidden,
    /// No such sandbox, snapshot, key or process for this caller.
    NotFound,
    /// The sandbox's state does not allow this now.
    Conflict,
    /// A name or file that must be new exists.
    AlreadyExists,
    /// A per-sandbox, per-tenant or per-server limit is reached; retry when something has ended.
    LimitReached,
    /// The host's capacity is taken by running sandboxes; retry later or ask for less.
    ServerFull,
    /// A body or file is over a limit.
    TooLarge,
    /// No such file in the sandbox.
    FileNotFound,
    /// The sandbox user may not touch this file.
    PermissionDenied,
    /// A file where a directory was needed, or the reverse.
    WrongFileKind,
    /// The directory is not empty.
    DirectoryNotEmpty,
    /// Nothing answers on the sandbox port.
    PortUnreachable,
    /// An image registry refused the credentials.
    RegistryDenied,
    /// An image registry could not be reached or sent bad data.
    RegistryUnavailable,
    /// A failure of this server.
    Internal,
}

impl Kind {
    /// The stable code of the JSON error body (`sandlot_api::codes`).
    pub fn code(self) -> &'static str {
        match self {
            Kind::Invalid => codes::INVALID_REQUEST,
            Kind::Unauthenticated => codes::UNAUTHENTICATED,
            Kind::Forbidden => codes::FORBIDDEN,
            Kind::NotFound => codes::NOT_FOUND,
            Kind::Conflict => codes::CONFLICT,
            Kind::AlreadyExists => codes::ALREADY_EXISTS,
            Kind::LimitReached => codes::LIMIT_REACHED,
            Kind::ServerFull => codes::SERVER_FULL,
            Kind::TooLarge => codes::TOO_LARGE,
            Kind::FileNotFound => codes::FILE_NOT_FOUND,
            Kind::PermissionDenied => codes::PERMISSION_DENIED,
            Kind::WrongFileKind => codes::WRONG_FILE_KIND,
            Kind::DirectoryNotEmpty => codes::DIRECTORY_NOT_EMPTY,
            Kind::PortUnreachable => codes::PORT_UNREACHABLE,
            Kind::RegistryDenied => codes::REGISTRY_DENIED,
            Kind::RegistryUnavailable => codes::REGISTRY_UNAVAILABLE,
            Kind::Internal => codes::INTERNAL,
        }
    }

    /// Whose fault an error of this kind is.
    pub fn fault(self) -> Fault {
        match self {
            Kind::PortUnreachable | Kind::RegistryUnavailable => Fault::Workload,
            Kind::Internal => Fault::Server,
            _ => Fault::Client,
        }
    }

    /// Whether the same request may succeed later unchanged: limits free up, capacity frees up, a
    /// server in the sandbox may start listening.
    pub fn retryable(self) -> bool {
        matches!(self, Kind::LimitReached | Kind::ServerFull | Kind::PortUnreachable | Kind::RegistryUnavailable)
    }
}

/// An error of the control layer: a kind and a message that says what to do.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    /// What kind of error.
    pub kind: Kind,
    /// What went wrong and what to do, for a person.
    pub message: String,
}

impl Error {
    /// An error of `kind`.
    pub fn new(kind: Kind, message: impl Into<String>) -> Self {
        Error { kind, message: message.into() }
    }

    /// The request is malformed or out of range.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(Kind::Invalid, message)
    }

    /// `what` does not exist for this caller (another tenant's things are not found, never forbidden).
    pub fn not_found(what: &str) -> Self {
        Self::new(Kind::NotFound, format!("{what} not found"))
    }

    /// The sandbox's state does not allow this.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(Kind::Conflict, message)
    }

    /// A limit is reached.
    pub fn limit(message: impl Into<String>) -> Self {
        Self::new(Kind::LimitReached, message)
    }

    /// A failure of this server.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(Kind::Internal, message)
    }

    /// The stable API code.
    pub fn code(&self) -> &'static str {
        self.kind.code()
    }

    /// Whether a retry may work.
    pub fn retryable(&self) -> bool {
        self.kind.retryable()
    }
}

/// Results of the control layer.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A host step that found the disk full: the server's state, not the caller's mistake nor a bug.
fn volume_full(e: &EngineError) -> Error {
    Error::new(
        Kind::ServerFull,
        format!(
            "server full: the host's disk for sandbox layers is full ({e}); retry when sandboxes have been deleted"
        ),
    )
}

impl From<EngineError> for Error {
    fn from(e: EngineError) -> Self {
        let kind = match &e {
            EngineError::NotRunning | EngineError::Gone(_) => {
                return Error::conflict(format!("{e}; its processes are gone. Delete it and create a new one"))
            }
            EngineError::Io(io) if matches!(io.raw_os_error(), Some(nix::libc::ENOSPC | nix::libc::EDQUOT)) => {
                return volume_full(&e)
            }
            EngineError::StartFailed(why) if why.contains("No space left on device") => return volume_full(&e),
            EngineError::UnknownImage(_) => Kind::Invalid,
            EngineError::OutputBudget(_) | EngineError::Busy(_) => Kind::LimitReached,
            EngineError::PortUnreachable(_) => Kind::PortUnreachable,
            EngineError::File { kind, .. } => match kind {
                FileErrorKind::NotFound => Kind::FileNotFound,
                FileErrorKind::PermissionDenied => Kind::PermissionDenied,
                FileErrorKind::WrongKind => Kind::WrongFileKind,
                FileErrorKind::AlreadyExists => Kind::AlreadyExists,
                FileErrorKind::NotEmpty => Kind::DirectoryNotEmpty,
                FileErrorKind::TooLarge => Kind::TooLarge,
                FileErrorKind::Invalid => Kind::Invalid,
                FileErrorKind::Busy => Kind::LimitReached,
                FileErrorKind::Other => Kind::Internal,
            },
            _ => Kind::Internal,
        };
        Error::new(kind, e.to_string())
    }
}

impl From<sandlot_store::StoreError> for Error {
    fn from(e: sandlot_store::StoreError) -> Self {
        Error::internal(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_distinct_code_a_fault_and_a_retry_hint() {
        let kinds = [
            Kind::Invalid,
            Kind::Unauthenticated,
            Kind::Forbidden,
            Kind::NotFound,
            Kind::Conflict,
            Kind::AlreadyExists,
            Kind::LimitReached,
            Kind::ServerFull,
            Kind::TooLarge,
            Kind::FileNotFound,
            Kind::PermissionDenied,
            Kind::WrongFileKind,
            Kind::DirectoryNotEmpty,
            Kind::PortUnreachable,
            Kind::Internal,
        ];
        let codes: std::collections::HashSet<_> = kinds.iter().map(|k| k.code()).collect();
        assert_eq!(codes.len(), kinds.len(), "two kinds share a code");
        assert_eq!(Kind::Internal.fault(), Fault::Server);
        assert_eq!(Kind::PortUnreachable.fault(), Fault::Workload);
        assert_eq!(Kind::Invalid.fault(), Fault::Client);
        assert!(Kind::ServerFull.retryable() && Kind::LimitReached.retryable());
        assert!(!Kind::Invalid.retryable() && !Kind::Internal.retryable());
    }

    #[test]
    fn engine_errors_keep_their_category() {
        let e: Error = EngineError::File { kind: FileErrorKind::NotFound, message: "/x: no such file".into() }.into();
        assert_eq!((e.kind, e.message.as_str()), (Kind::FileNotFound, "/x: no such file"));
        let e: Error = EngineError::Busy("16 file operations at once".into()).into();
        assert!(e.retryable());
        let e: Error = EngineError::Gone("sb_x".into()).into();
        assert_eq!(e.kind, Kind::Conflict);
    }
}
