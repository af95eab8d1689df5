//! envd, the daemon E2B runs in each sandbox, answered by sandlot from outside it: the Connect-RPC
//! services `process.Process` ([`process`]) and `filesystem.Filesystem` ([`filesystem`]), the file
//! transfer route `/files` ([`files`]) and `/health`. Each call becomes `Control` calls for the
//! sandbox the dispatching middleware checked ([`Target`]), so it is authorised, bounded and audited
//! like the native API's.

mod connect;
mod files;
mod frame;
pub use files::signed_caller;
mod filesystem;
mod gzip;
mod multipart;
mod process;
mod proto;
mod watch;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use base64::Engine;
use sandlot_api::User;
use sandlot_control::{Caller, Error, Kind};

use crate::server::app::AppState;

/// The sandbox a request is for and who asks, as the dispatching middleware checked them.
#[derive(Clone)]
pub struct Target {
    pub id: String,
    pub caller: Caller,
    /// What a signed `/files` URL allows, when the request was authorised by one (and not by a token
    /// or key): that one file, nothing else.
    pub signed: Option<files::SignedFile>,
}

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/health", get(health))
        .route("/files", get(files::download).post(files::upload))
        .route("/process.Process/Start", post(process::start))
        .route("/process.Process/Connect", post(process::connect))
        .route("/process.Process/List", post(process::list))
        .route("/process.Process/SendInput", post(process::send_input))
        .route("/process.Process/StreamInput", post(process::stream_input))
        .route("/process.Process/CloseStdin", post(process::close_stdin))
        .route("/process.Process/SendSignal", post(process::send_signal))
        .route("/process.Process/Update", post(process::update))
        .route("/filesystem.Filesystem/Stat", post(filesystem::stat))
        .route("/filesystem.Filesystem/MakeDir", post(filesystem::make_dir))
        .route("/filesystem.Filesystem/Move", post(filesystem::move_entry))
        .route("/filesystem.Filesystem/ListDir", post(filesystem::list_dir))
        .route("/filesystem.Filesystem/Remove", post(filesystem::remove))
        .route("/filesystem.Filesystem/WatchDir", post(watch::watch_dir))
        .route("/filesystem.Filesystem/CreateWatcher", post(watch::create_watcher))
        .route("/filesystem.Filesystem/GetWatcherEvents", post(watch::get_watcher_events))
        .route("/filesystem.Filesystem/RemoveWatcher", post(watch::remove_watcher))
        .layer(axum::middleware::from_fn(deadline))
        .fallback(|| async { ConnectError::new("unimplemented", StatusCode::NOT_FOUND, "no such envd route") })
}

/// `GET /health`: 204 while the sandbox runs; 502 once it is paused or stopped, as E2B's proxy
/// answers for a sandbox whose envd is not up (the SDKs' `is_running()` reads 502 as "not running").
async fn health(State(app): State<AppState>, Extension(t): Extension<Target>) -> Response {
    match app.control.get(&t.caller, &t.id) {
        Ok(_) if app.control.being_removed(&t.id) => not_running(&t.id, "deleted"),
        Ok(info) if info.state == sandlot_api::SandboxState::Running => StatusCode::NO_CONTENT.into_response(),
        Ok(info) => not_running(&t.id, info.state.as_str()),
        Err(e) => ConnectError::from(e).into_response(),
    }
}

/// What E2B's proxy answers for a sandbox that is not running (gone, killed, paused): 502, with a
/// body saying which, so the SDKs raise their "sandbox was not found / timed out" errors.
pub fn not_running(id: &str, state: &str) -> Response {
    let e2b_id = id.strip_prefix("sb_").unwrap_or(id);
    let message = match state {
        "paused" | "stopped" => {
            format!("The sandbox {e2b_id} is {state}: resume it with Sandbox.connect() (or create it with auto-resume)")
        }
        // E2B's words exactly: clients compare them.
        _ => "The sandbox was not found".to_string(),
    };
    (StatusCode::BAD_GATEWAY, Json(serde_json::json!({"code": 502, "message": message, "sandboxId": e2b_id})))
        .into_response()
}

/// Bounds a call by the client's `Connect-Timeout-Ms`: a unary call past it is answered
/// `deadline_exceeded` (and its work dropped); a streaming call's handler answers at once and bounds
/// its stream itself.
async fn deadline(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let limit = match connect::timeout(req.headers()) {
        Ok(l) => l,
        Err(e) => return e.into_response(),
    };
    match limit {
        None => next.run(req).await,
        Some(d) => match tokio::time::timeout(d, next.run(req)).await {
            Ok(r) => r,
            Err(_) => ConnectError::deadline_exceeded().into_response(),
        },
    }
}

/// A Connect-protocol error: `{"code": "not_found", "message": ...}` with the HTTP status the
/// protocol gives that code.
#[derive(Debug)]
pub struct ConnectError {
    pub code: &'static str,
    pub status: StatusCode,
    pub message: String,
}

impl ConnectError {
    pub fn new(code: &'static str, status: StatusCode, message: impl Into<String>) -> Self {
        ConnectError { code, status, message: message.into() }
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        ConnectError::new("not_found", StatusCode::NOT_FOUND, message)
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        ConnectError::new("invalid_argument", StatusCode::BAD_REQUEST, message)
    }

    pub fn deadline_exceeded() -> Self {
        ConnectError::new(
            "deadline_exceeded",
            StatusCode::GATEWAY_TIMEOUT,
            "the call's deadline (Connect-Timeout-Ms, the SDK's `timeout`/`request_timeout`) passed",
        )
    }
}

/// The sandbox user a call acts as: the username of the `Authorization: Basic` header the SDKs send
/// (`user` or `root`), else `user` (envd's default user, and sandlot's).
pub fn basic_user(headers: &HeaderMap) -> Result<User, ConnectError> {
    let Some(v) = headers.get(axum::http::header::AUTHORIZATION) else { return Ok(User::User) };
    let v = v.to_str().ok().and_then(|v| v.strip_prefix("Basic ").or_else(|| v.strip_prefix("basic ")));
    let decoded = v
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b.trim()).ok())
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| {
            ConnectError::invalid("Authorization must be Basic base64(\"USER:\") with USER `user` or `root`")
        })?;
    named_user(decoded.split(':').next().unwrap_or(""))
}

/// `user` or `root` by name; the empty name is the default user.
pub fn named_user(name: &str) -> Result<User, ConnectError> {
    match name {
        "" | "user" => Ok(User::User),
        "root" => Ok(User::Root),
        other => Err(ConnectError::invalid(format!(
            "user {other:?} does not exist in sandlot sandboxes: use `user` (uid 1000) or `root`"
        ))),
    }
}

impl From<Error> for ConnectError {
    fn from(e: Error) -> Self {
        let (code, status) = match e.kind {
            Kind::Invalid | Kind::WrongFileKind => ("invalid_argument", StatusCode::BAD_REQUEST),
            Kind::Unauthenticated => ("unauthenticated", StatusCode::UNAUTHORIZED),
            Kind::Forbidden | Kind::PermissionDenied => ("permission_denied", StatusCode::FORBIDDEN),
            Kind::NotFound | Kind::FileNotFound => ("not_found", StatusCode::NOT_FOUND),
            Kind::AlreadyExists => ("already_exists", StatusCode::CONFLICT),
            Kind::Conflict | Kind::DirectoryNotEmpty => ("failed_precondition", StatusCode::BAD_REQUEST),
            Kind::LimitReached | Kind::ServerFull | Kind::TooLarge => {
                ("resource_exhausted", StatusCode::TOO_MANY_REQUESTS)
            }
            Kind::PortUnreachable => ("unavailable", StatusCode::SERVICE_UNAVAILABLE),
            _ => ("internal", StatusCode::INTERNAL_SERVER_ERROR),
        };
        ConnectError { code, status, message: e.message }
    }
}

impl IntoResponse for ConnectError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(code = self.code, "envd: {}", self.message);
        }
        (self.status, Json(serde_json::json!({"code": self.code, "message": self.message}))).into_response()
    }
}
