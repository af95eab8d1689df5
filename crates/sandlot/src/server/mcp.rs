//! `/mcp`: the MCP tools (`crate::mcp`) over MCP's streamable HTTP transport, on the API listener.
//!
//! Every request is authorised by its own `Authorization: Bearer` key, before any MCP work: no key or
//! a bad one is the API's 401. A session belongs to the tenant whose key opened it; a request of
//! another tenant naming it is answered 404, as another tenant's sandbox is (and a tool call that got
//! past that would be refused by the session itself). Tools act through the control layer as the
//! request's caller, so tenancy, quotas and audit are the control layer's.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::RoleServer;
use sandlot_api::{
    codes, CreateSandbox, ExecRequest, ExecResult, FileStat, NetworkSpec, PortInfo, SandboxInfo, SnapshotInfo, User,
    WriteResult,
};
use sandlot_control::{Caller, SandboxPath, Started, Upload};
use tokio_util::sync::CancellationToken;

use super::app::AppState;
use super::error::ApiError;
use super::extract::bearer_key;
use super::stream::leased;
use crate::mcp::{
    parse_interpreter_lines, Connector, FileHead, SandboxBackend, SandlotMcp, ToolError, ToolResult, INTERPRETER_PORT,
    MAX_INTERPRETER_ANSWER, START_TAG,
};

const SESSION_HEADER: &str = "mcp-session-id";
/// Open sessions a tenant may hold, and the server in all. A session is a task and its queues held
/// until it is closed or idle for rmcp's keep-alive (5 minutes); without a cap one key could open
/// them faster than they expire.
const MAX_SESSIONS_PER_TENANT: usize = 16;
const MAX_SESSIONS: usize = 256;

/// The tools' backend on the server: the control layer, as one request's caller.
#[derive(Clone)]
pub struct ControlBackend {
    app: AppState,
    caller: Caller,
    /// The request's headers (its `Host` makes preview URLs).
    headers: axum::http::HeaderMap,
}

fn tool_error(e: sandlot_control::Error) -> ToolError {
    ToolError { code: e.code().to_string(), retryable: e.retryable(), message: e.message }
}

impl SandboxBackend for ControlBackend {
    fn owner(&self) -> &str {
        &self.caller.tenant
    }

    async fn create(&self, req: CreateSandbox) -> ToolResult<SandboxInfo> {
        Ok(self.app.control.create(&self.caller, req).await.map_err(tool_error)?.info)
    }

    async fn list(&self) -> ToolResult<Vec<SandboxInfo>> {
        Ok(self.app.control.list(&self.caller).map_err(tool_error)?.sandboxes)
    }

    async fn delete(&self, id: String) -> ToolResult<()> {
        self.app.control.delete(&self.caller, &id).await.map_err(tool_error)
    }

    async fn info(&self, id: String) -> ToolResult<SandboxInfo> {
        self.app.control.get(&self.caller, &id).map_err(tool_error)
    }

    async fn exec(&self, id: String, req: ExecRequest) -> ToolResult<ExecResult> {
        match self.app.control.exec(&self.caller, &id, req, false).await.map_err(tool_error)? {
            Started::Finished(r) => Ok(r),
            // Neither streaming nor background was asked for.
            Started::Streaming(p) => Ok(p.wait().await),
            Started::Background { pid, .. } => {
                Err(ToolError::new("internal", format!("started in the background as {pid}")))
            }
        }
    }

    async fn read_file(&self, id: String, path: String, limit: usize) -> ToolResult<FileHead> {
        let mut stream = self.app.control.read_file(&self.caller, &id, &path, User::User).await.map_err(tool_error)?;
        let mut f = FileHead::default();
        while let Some(chunk) = stream.next().await.map_err(|e| ToolError::new("internal", e.to_string()))? {
            let room = limit.saturating_sub(f.head.len());
            f.head.extend_from_slice(&chunk[..room.min(chunk.len())]);
            f.total += chunk.len() as u64;
        }
        Ok(f)
    }

    async fn write_file(&self, id: String, path: String, contents: Vec<u8>) -> ToolResult<WriteResult> {
        let to = SandboxPath { path: &path, user: User::User };
        let len = contents.len() as u64;
        let kind = Upload::File { mode: None, opts: Default::default() };
        self.app.control.upload(&self.caller, &id, to, kind, Some(len), &mut &contents[..]).await.map_err(tool_error)
    }

    async fn list_files(&self, id: String, path: String, depth: u32) -> ToolResult<Vec<FileStat>> {
        let list = self.app.control.list_files(&self.caller, &id, &path, User::User, Some(depth)).await;
        Ok(list.map_err(tool_error)?.entries)
    }

    async fn set_network(&self, id: String, spec: NetworkSpec) -> ToolResult<SandboxInfo> {
        self.app.control.set_network(&self.caller, &id, spec).await.map_err(tool_error)
    }

    async fn snapshot(&self, id: String, name: Option<String>) -> ToolResult<SnapshotInfo> {
        self.app.control.snapshot(&self.caller, &id, name).await.map_err(tool_error)
    }

    async fn expose_port(&self, id: String, port: u16) -> ToolResult<PortInfo> {
        let token = self.app.control.expose(&self.caller, &id, port).await.map_err(tool_error)?.token;
        Ok(super::ports::port_info(&self.app, &self.headers, &id, port, token))
    }

    async fn interpreter_execute(
        &self,
        id: String,
        body: serde_json::Value,
    ) -> ToolResult<Option<Vec<serde_json::Value>>> {
        let ports = self.app.control.ports(&self.caller, &id).await.map_err(tool_error)?;
        let req = Request::builder()
            .method(Method::POST)
            .uri("/execute")
            .header(header::HOST, format!("127.0.0.1:{INTERPRETER_PORT}"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(axum::body::Body::from(body.to_string()))
            .map_err(|e| ToolError::new("internal", e.to_string()))?;
        let resp = match super::ports::forward(&ports, INTERPRETER_PORT, req, Duration::ZERO).await {
            Ok(r) => r,
            Err(e) if e.code == codes::PORT_UNREACHABLE => return Ok(None),
            Err(e) => return Err(ToolError { code: e.code.to_string(), message: e.message, retryable: e.retryable }),
        };
        let status = resp.status();
        let bytes = axum::body::to_bytes(axum::body::Body::new(resp.into_body()), MAX_INTERPRETER_ANSWER)
            .await
            .map_err(|e| ToolError::new("internal", format!("reading the code interpreter's answer: {e}")))?;
        if !status.is_success() {
            let text = String::from_utf8_lossy(&bytes);
            return Err(ToolError::new("invalid_request", format!("the code interpreter answered {status}: {text}")));
        }
        parse_interpreter_lines(&bytes).map(Some)
    }

    async fn start_command_running(&self, id: String) -> ToolResult<bool> {
        let list = self.app.control.processes(&self.caller, &id, true).await.map_err(tool_error)?;
        Ok(list.processes.iter().any(|p| p.running && p.tag.as_deref() == Some(START_TAG)))
    }
}

/// Each tool call authenticates its own request's key.
pub struct ControlConnector {
    app: AppState,
}

impl Connector for ControlConnector {
    type Backend = ControlBackend;

    fn connect(&self, ctx: &RequestContext<RoleServer>) -> ToolResult<ControlBackend> {
        let unauthenticated = || ToolError::new(codes::UNAUTHENTICATED, "send `Authorization: Bearer <API key>`");
        let parts = ctx.extensions.get::<Parts>().ok_or_else(unauthenticated)?;
        let Some(Some(key)) = bearer_key(&parts.headers) else { return Err(unauthenticated()) };
        let caller = self.app.control.authenticate(key).map_err(tool_error)?;
        Ok(ControlBackend { app: Arc::clone(&self.app), caller, headers: parts.headers.clone() })
    }
}

/// The tenant of each open session, so a request of another tenant never reaches it.
struct Owners {
    sessions: Arc<LocalSessionManager>,
    owners: Mutex<HashMap<String, String>>,
    app: AppState,
}

/// The `/mcp` route: authorisation, then rmcp's streamable HTTP transport. `cancel` ends every
/// session (and its open event streams) when the server stops.
pub fn routes(app: &AppState, cancel: CancellationToken) -> axum::Router<AppState> {
    let sessions = Arc::new(LocalSessionManager::default());
    let connector = Arc::new(ControlConnector { app: Arc::clone(app) });
    let config = StreamableHttpServerConfig::default()
        // Every request carries the API key, which a page a browser loads from elsewhere (DNS
        // rebinding) does not have: the Host check is not needed, and would refuse every name but
        // loopback's.
        .disable_allowed_hosts()
        // As much as the API's JSON bodies (write_file content).
        .with_max_request_body_bytes(16 << 20)
        .with_sse_keep_alive(Some(Duration::from_secs(15)))
        .with_cancellation_token(cancel);
    let mcp =
        StreamableHttpService::new(move || Ok(SandlotMcp::new(Arc::clone(&connector))), Arc::clone(&sessions), config);
    let owners = Arc::new(Owners { sessions, owners: Mutex::default(), app: Arc::clone(app) });
    let guarded = tower::Layer::layer(&axum::middleware::from_fn_with_state(owners, guard), mcp);
    axum::Router::new().route_service("/mcp", guarded)
}

fn lock(owners: &Owners) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
    owners.owners.lock().unwrap_or_else(|p| p.into_inner())
}

/// Authorises a request by its key, and keeps each session to its tenant.
async fn guard(State(o): State<Arc<Owners>>, req: Request, next: Next) -> Response {
    let (caller, lease) = match bearer_key(req.headers()) {
        None => return unauthenticated("missing Authorization header; send `Authorization: Bearer <API key>`"),
        Some(None) => return unauthenticated("malformed Authorization header; expected `Bearer <API key>`"),
        Some(Some(key)) => match o.app.control.authenticate_lease(key) {
            Ok(c) => c,
            Err(e) => return ApiError::from(e).into_response(),
        },
    };
    let session = req.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string);
    let mut reserved = None;
    if let Some(id) = &session {
        if lock(&o).get(id).is_some_and(|tenant| *tenant != caller.tenant) {
            return ApiError::not_found("MCP session").into_response();
        }
    } else {
        // A request without a session opens one (initialize): count the live ones first.
        let live = live_sessions(&o).await;
        let mut owners = lock(&o);
        // Places reserved by `initialize`s still in flight are kept: they count as sessions.
        owners.retain(|id, _| live.contains(id) || id.starts_with(RESERVED));
        let mine = owners.values().filter(|t| **t == caller.tenant).count();
        if mine >= MAX_SESSIONS_PER_TENANT || owners.len() >= MAX_SESSIONS {
            let (held, max) = if mine >= MAX_SESSIONS_PER_TENANT {
                (format!("this tenant holds {mine}"), MAX_SESSIONS_PER_TENANT)
            } else {
                (format!("the server holds {}", owners.len()), MAX_SESSIONS)
            };
            let message = format!(
                "too many open MCP sessions: {held} of {max}; close one (HTTP DELETE /mcp with its \
                 Mcp-Session-Id) or wait for an idle one to expire (5 minutes)"
            );
            return ApiError::new(StatusCode::TOO_MANY_REQUESTS, codes::LIMIT_REACHED, &message).into_response();
        }
        // Reserved under the lock, before rmcp runs: concurrent `initialize`s cannot all pass the count.
        let place = Reservation::new(Arc::clone(&o));
        owners.insert(place.key.clone(), caller.tenant.clone());
        reserved = Some(place);
    }
    let closing = req.method() == Method::DELETE;
    let mut resp = next.run(req).await;
    // rmcp answers a session's DELETE 202, which the official clients take for a failure ("Session
    // termination failed: 202"): the session is gone at once, so 204.
    if closing && resp.status() == StatusCode::ACCEPTED {
        *resp.status_mut() = StatusCode::NO_CONTENT;
    }
    match &session {
        None => {
            if let Some(new) = resp.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()) {
                // Sessions that ended without a DELETE (idle expiry) were dropped when this one was counted.
                lock(&o).insert(new.to_string(), caller.tenant);
            }
        }
        Some(id) if closing && resp.status().is_success() => {
            lock(&o).remove(id);
        }
        Some(_) => {}
    }
    // After the session it opened was recorded, so the count never dips in between.
    drop(reserved);
    // An event stream (a GET's, or a POST answered as SSE) lasts no longer than the key that opened
    // it: revoking the key ends it within the lease's recheck, as for every other stream.
    let sse = resp.headers().get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if sse {
        return leased(&o.app, lease, resp);
    }
    resp
}

/// Prefix of the keys of places reserved for sessions being opened (no session id has it).
const RESERVED: &str = "\0reserved-";

/// A place among the sessions, held by an `initialize` in flight; given back when dropped (the
/// request finished, or was cancelled), when the session it opened takes its place.
struct Reservation {
    owners: Arc<Owners>,
    key: String,
}

impl Reservation {
    fn new(owners: Arc<Owners>) -> Reservation {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Reservation { owners, key: format!("{RESERVED}{n}") }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        lock(&self.owners).remove(&self.key);
    }
}

/// The ids of the sessions rmcp holds now (those that ended, by DELETE or idle expiry, are gone).
async fn live_sessions(o: &Owners) -> HashSet<String> {
    o.sessions.sessions.read().await.keys().map(|k| k.to_string()).collect()
}

fn unauthenticated(message: &str) -> Response {
    let mut r = ApiError::new(StatusCode::UNAUTHORIZED, codes::UNAUTHENTICATED, message).into_response();
    r.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
    r
}
