//! Inbound HTTP to a server inside a sandbox, proxied through the sandbox's supervisor to
//! `127.0.0.1:port` in the sandbox. Allowed with the owner's API key, or with the per-port token of a
//! preview URL (which is then kept as a cookie).
//!
//! Two ways in:
//! - **host-routed** (`--preview-domain D`, `localhost` by default on a loopback listener): the
//!   request's `Host` is `{port}-{id}.D`. Each sandbox port is then an origin of its own, so a page
//!   from one sandbox cannot read another's preview nor the API, and its cookies are its own (a
//!   `Domain` attribute, which would reach every sibling, is removed). Preview tokens work only here
//!   when a domain is set.
//! - **path-routed** (`/v1/sandboxes/{id}/ports/{port}/…`): one origin shared with the API and every
//!   other preview. With the owner's key (programs) that is harmless. With a token (browsers), only
//!   when no domain is available, and then every response is sandboxed by CSP (an opaque origin: it
//!   can read nothing of the API's origin) and its `Set-Cookie` is dropped.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use hyper_util::rt::TokioIo;
use sandlot_api::{ExposePort, PortInfo};

use std::time::Duration;

use sandlot_control::{Error, Kind, Ports};

use super::app::AppState;
use super::error::ApiError;
use super::extract::{bearer_key, ApiJson, ApiPath, Auth};

const TOKEN_PARAM: &str = "sandlot_token";

pub async fn expose(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(id): ApiPath<String>,
    headers: axum::http::HeaderMap,
    ApiJson(req): ApiJson<ExposePort>,
) -> Result<impl IntoResponse, ApiError> {
    let token = app.control.expose(&caller, &id, req.port).await?.token;
    Ok((StatusCode::CREATED, Json(port_info(&app, &headers, &id, req.port, token))))
}

/// Port `port` of sandbox `id` as the client that sent `headers` reaches it (its `Host` gives the
/// server's address and port): the preview URL with its token, and the path form for a key holder.
pub(super) fn port_info(
    app: &AppState,
    headers: &axum::http::HeaderMap,
    id: &str,
    port: u16,
    token: String,
) -> PortInfo {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_string)
        .unwrap_or_else(|| app.listen.to_string());
    let url = preview_url(app, &host, id, port, &token);
    let api_url = format!("http://{host}/v1/sandboxes/{id}/ports/{port}/");
    PortInfo { port, url, token, api_url }
}

/// The preview URL of `port` of sandbox `id` with its token, for a client that reached this server as
/// `host`.
fn preview_url(app: &AppState, host: &str, id: &str, port: u16, token: &str) -> String {
    match app.preview_domain() {
        Some(domain) => {
            // The port the client reached this server on, kept in the preview URL.
            let api_port =
                host.rsplit_once(':').map(|(_, p)| p.to_string()).unwrap_or_else(|| app.listen.port().to_string());
            format!("http://{port}-{id}.{domain}:{api_port}/?{TOKEN_PARAM}={token}")
        }
        None => format!("http://{host}/v1/sandboxes/{id}/ports/{port}/?{TOKEN_PARAM}={token}"),
    }
}

fn token_from(req: &Request) -> (Option<String>, bool) {
    let from_query = req
        .uri()
        .query()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix(&format!("{TOKEN_PARAM}=")).map(str::to_string)));
    if from_query.is_some() {
        return (from_query, true);
    }
    let from_cookie = req.headers().get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).find_map(|c| {
        c.split(';').find_map(|kv| kv.trim().strip_prefix(&format!("{TOKEN_PARAM}=")).map(str::to_string))
    });
    (from_cookie, false)
}

/// The request's path below the port prefix, and its query without our token.
fn inner_uri(uri: &Uri, prefix: &str) -> String {
    let path = uri.path().strip_prefix(prefix).unwrap_or("");
    let path = if path.starts_with('/') { path.to_string() } else { format!("/{path}") };
    let query: Vec<&str> =
        uri.query().map(|q| q.split('&').filter(|kv| !kv.starts_with(TOKEN_PARAM)).collect()).unwrap_or_default();
    if query.is_empty() {
        path
    } else {
        format!("{path}?{}", query.join("&"))
    }
}

/// How a preview request reached us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// `Host: {port}-{id}.{domain}`: an origin of its own; the path is the sandbox server's.
    Host,
    /// `/v1/sandboxes/{id}/ports/{port}/…`: the API's origin; the prefix is removed.
    Path,
}

/// Sends a request whose `Host` names a preview origin (`{port}-{id}.{domain}`) to that sandbox port;
/// every other request goes on to the API's routes.
pub async fn by_host(State(app): State<AppState>, req: Request, next: axum::middleware::Next) -> Response {
    let target = app.preview_domain().and_then(|domain| {
        let host = req.headers().get(header::HOST)?.to_str().ok()?;
        preview_target(host, domain)
    });
    match target {
        Some((id, port)) => {
            proxy_inner(&app, id, port, req, Route::Host).await.unwrap_or_else(IntoResponse::into_response)
        }
        None => next.run(req).await,
    }
}

/// A `Host` header's name, without the `:port` it may end with.
pub(super) fn without_port(host: &str) -> &str {
    match host.rsplit_once(':') {
        Some((name, p)) if p.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// `(id, port)` of a preview host `{port}-{id}.{domain}[:port]`.
fn preview_target(host: &str, domain: &str) -> Option<(String, u16)> {
    let name = without_port(host).trim_end_matches('.').to_ascii_lowercase();
    let label = name.strip_suffix(domain)?.strip_suffix('.')?;
    let (port, id) = label.split_once('-')?;
    let port = port.parse::<u16>().ok().filter(|p| *p != 0)?;
    (id.starts_with("sb_") && id.len() > 3 && id[3..].bytes().all(|b| b.is_ascii_alphanumeric()))
        .then(|| (id.to_string(), port))
}

pub async fn proxy_root(
    State(app): State<AppState>,
    ApiPath((id, port)): ApiPath<(String, u16)>,
    req: Request,
) -> Response {
    proxy_inner(&app, id, port, req, Route::Path).await.unwrap_or_else(IntoResponse::into_response)
}

pub async fn proxy(
    State(app): State<AppState>,
    ApiPath((id, port, _rest)): ApiPath<(String, u16, String)>,
    req: Request,
) -> Response {
    proxy_inner(&app, id, port, req, Route::Path).await.unwrap_or_else(IntoResponse::into_response)
}

/// The `Cookie` header without our token cookie: the sandbox's server has no use for it.
fn cookies_without_token(headers: &axum::http::HeaderMap) -> Option<HeaderValue> {
    let kept: Vec<&str> = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|c| c.split(';'))
        .map(str::trim)
        .filter(|kv| !kv.is_empty() && !kv.starts_with(&format!("{TOKEN_PARAM}=")))
        .collect();
    (!kept.is_empty()).then(|| HeaderValue::from_str(&kept.join("; ")).ok()).flatten()
}

/// A `Set-Cookie` value with any `Domain` attribute removed: the cookie stays with the preview's own
/// host instead of reaching every sibling under the preview domain.
fn host_only_cookie(v: &HeaderValue) -> Option<HeaderValue> {
    let s = v.to_str().ok()?;
    let kept: Vec<&str> = s.split(';').filter(|a| !a.trim().to_ascii_lowercase().starts_with("domain=")).collect();
    HeaderValue::from_str(&kept.join(";")).ok()
}

/// What a path-routed response to a browser may do: run its scripts and forms, but as an opaque
/// origin that can read nothing of the API's origin or another preview's.
const PATH_PREVIEW_CSP: &str = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads";

/// How often a port with nothing listening yet is tried again while a caller's patience lasts.
const RETRY_EVERY: Duration = Duration::from_millis(100);

/// Sends `req` (its URI and headers already as the server inside should see them) to `port` of the
/// sandbox behind `ports`, and answers the response as that server sent it. A protocol upgrade
/// (WebSocket) is spliced byte for byte once the server answers 101. A port with nothing listening
/// is tried again until `patience` has passed (zero: once), for callers that know a server is still
/// starting; the request itself is sent once, after a connection is made.
pub(super) async fn forward(
    ports: &Ports,
    port: u16,
    mut req: Request,
    patience: Duration,
) -> Result<hyper::Response<hyper::body::Incoming>, ApiError> {
    let client_upgrade = req.headers().contains_key(header::UPGRADE).then(|| hyper::upgrade::on(&mut req));
    let deadline = tokio::time::Instant::now() + patience;
    let stream = loop {
        match ports.connect(port).await {
            Ok(s) => break s,
            Err(e) if e.kind == Kind::PortUnreachable && tokio::time::Instant::now() + RETRY_EVERY <= deadline => {
                tokio::time::sleep(RETRY_EVERY).await;
            }
            Err(e) => return Err(e.into()),
        }
    };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| Error::internal(format!("talking to port {port}: {e}")))?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    let mut resp =
        sender.send_request(req).await.map_err(|e| Error::new(Kind::PortUnreachable, format!("port {port}: {e}")))?;
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        if let Some(client_upgrade) = client_upgrade {
            let server_upgrade = hyper::upgrade::on(&mut resp);
            tokio::spawn(async move {
                if let (Ok(c), Ok(s)) = (client_upgrade.await, server_upgrade.await) {
                    let _ = tokio::io::copy_bidirectional(&mut TokioIo::new(c), &mut TokioIo::new(s)).await;
                }
            });
        }
    }
    Ok(resp)
}

async fn proxy_inner(app: &AppState, id: String, port: u16, req: Request, route: Route) -> Result<Response, ApiError> {
    // Who may pass: the owner's API key, or this port's token.
    // A malformed Authorization header is no key: the port token may still admit the request.
    let key = bearer_key(req.headers()).flatten();
    let by_key = key.is_some();
    let caller = match key {
        Some(key) => app.control.authenticate(key)?,
        None if route == Route::Path && app.preview_domain().is_some() => {
            // Browsers use the preview's own origin; the shared one takes the key only.
            return Err(ApiError::not_found(&format!("sandbox {id}")));
        }
        None => {
            let (token, _) = token_from(&req);
            match token {
                Some(t) => app.control.preview_caller(&id, port, &t)?,
                // No token: only a sandbox made with public ports lets the request through.
                None => app.control.public_port_caller(&id)?,
            }
        }
    };
    let ports = app.control.ports(&caller, &id).await?;
    let (token, from_query) = token_from(&req);
    let prefix = match route {
        Route::Host => String::new(),
        Route::Path => format!("/v1/sandboxes/{id}/ports/{port}"),
    };
    let (mut parts, body) = req.into_parts();
    parts.uri = inner_uri(&parts.uri, &prefix).parse().map_err(|_| ApiError::invalid("bad path"))?;
    // The sandbox's server sees its own request, not our key nor our token.
    parts.headers.remove(header::AUTHORIZATION);
    match cookies_without_token(&parts.headers) {
        Some(c) => {
            parts.headers.insert(header::COOKIE, c);
        }
        None => {
            parts.headers.remove(header::COOKIE);
        }
    }
    let resp = forward(&ports, port, Request::from_parts(parts, body), Duration::ZERO).await?;
    let (mut rparts, rbody) = resp.into_parts();
    let theirs: Vec<HeaderValue> = rparts.headers.get_all(header::SET_COOKIE).iter().cloned().collect();
    rparts.headers.remove(header::SET_COOKIE);
    match route {
        Route::Host => {
            for v in theirs.iter().filter_map(host_only_cookie) {
                rparts.headers.append(header::SET_COOKIE, v);
            }
        }
        // On the shared origin a sandbox's cookie would reach the API and every other preview.
        // Appended, not replacing the server's own policy: every policy given must hold.
        Route::Path if !by_key => {
            rparts.headers.append(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(PATH_PREVIEW_CSP));
        }
        // A program with the owner's key gets the response as the server sent it.
        Route::Path => {
            for v in theirs {
                rparts.headers.append(header::SET_COOKIE, v);
            }
        }
    }
    if let (true, Some(t)) = (from_query, token) {
        let cookie = format!("{TOKEN_PARAM}={t}; Path={prefix}/; HttpOnly; SameSite=Lax");
        if let Ok(v) = HeaderValue::from_str(&cookie) {
            rparts.headers.append(header::SET_COOKIE, v);
        }
    }
    Ok(Response::from_parts(rparts, Body::new(rbody)))
}
