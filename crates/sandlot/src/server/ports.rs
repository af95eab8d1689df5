//! Inbound HTTP to a server inside a sandbox: `/v1/sandboxes/{id}/ports/{port}/…` is proxied through the
//! sandbox's supervisor to `127.0.0.1:port` in the sandbox. Allowed with the owner's API key, or with the
//! per-port token of a preview URL (which is then kept as a cookie scoped to that port's path).

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use hyper_util::rt::TokioIo;
use sandlot_api::{ExposePort, PortInfo};
use serde_json::json;

use super::extract::{bearer_key, record, running, ApiJson, ApiPath, Caller};
use super::{ApiError, AppState};

const TOKEN_PARAM: &str = "sandlot_token";

pub async fn expose(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    headers: axum::http::HeaderMap,
    ApiJson(req): ApiJson<ExposePort>,
) -> Result<impl IntoResponse, ApiError> {
    let (rec, _) = running(&app, &caller, &id).await?;
    if req.port == 0 {
        return Err(ApiError::invalid("port must be 1-65535"));
    }
    let token = {
        let mut tokens = app.port_tokens.lock().unwrap_or_else(|p| p.into_inner());
        tokens.entry((id.clone(), req.port)).or_insert_with(|| super::sandboxes::random_id("pt_")).clone()
    };
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_string)
        .unwrap_or_else(|| app.cfg.listen.to_string());
    let url = format!("http://{host}/v1/sandboxes/{id}/ports/{}/?{TOKEN_PARAM}={token}", req.port);
    app.store.audit(&rec.tenant, Some(&id), "port.expose", &json!({"port": req.port}))?;
    Ok((StatusCode::CREATED, Json(PortInfo { port: req.port, url, token })))
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

pub async fn proxy_root(state: State<AppState>, ApiPath((id, port)): ApiPath<(String, u16)>, req: Request) -> Response {
    proxy_inner(state, id, port, req).await.unwrap_or_else(IntoResponse::into_response)
}

pub async fn proxy(
    state: State<AppState>,
    ApiPath((id, port, _rest)): ApiPath<(String, u16, String)>,
    req: Request,
) -> Response {
    proxy_inner(state, id, port, req).await.unwrap_or_else(IntoResponse::into_response)
}

async fn proxy_inner(State(app): State<AppState>, id: String, port: u16, req: Request) -> Result<Response, ApiError> {
    // Who may pass: the owner's API key, or this port's token.
    // A malformed Authorization header is no key: the port token may still admit the request.
    let caller = match bearer_key(req.headers()).flatten() {
        Some(key) => Caller::with_key(&app, key)?,
        None => {
            let (token, _) = token_from(&req);
            let expected = app.port_tokens.lock().unwrap_or_else(|p| p.into_inner()).get(&(id.clone(), port)).cloned();
            match (token, expected) {
                (Some(t), Some(e)) if t == e => {
                    let tenant = app.store.tenant_of(&id)?.unwrap_or_default();
                    Caller { tenant, admin: false }
                }
                _ => return Err(ApiError::not_found(&format!("sandbox {id}"))),
            }
        }
    };
    let _ = record(&app, &caller, &id)?;
    let (_, sb) = running(&app, &caller, &id).await?;
    let (token, from_query) = token_from(&req);
    let prefix = format!("/v1/sandboxes/{id}/ports/{port}");
    let mut req = req;
    // A protocol upgrade (WebSocket) is spliced byte for byte once the server inside answers 101.
    let wants_upgrade = req.headers().contains_key(header::UPGRADE);
    let client_upgrade = wants_upgrade.then(|| hyper::upgrade::on(&mut req));
    let (mut parts, body) = req.into_parts();
    parts.uri = inner_uri(&parts.uri, &prefix).parse().map_err(|_| ApiError::invalid("bad path"))?;
    // The sandbox's server sees its own request, not our key.
    parts.headers.remove(header::AUTHORIZATION);
    let stream = sb.connect(port).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| ApiError::internal(format!("talking to port {port}: {e}")))?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    let mut resp = sender
        .send_request(hyper::Request::from_parts(parts, body))
        .await
        .map_err(|e| ApiError::new(StatusCode::BAD_GATEWAY, "port_unreachable", format!("port {port}: {e}")))?;
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
    let (mut rparts, rbody) = resp.into_parts();
    if let (true, Some(t)) = (from_query, token) {
        let cookie = format!("{TOKEN_PARAM}={t}; Path={prefix}/; HttpOnly; SameSite=Lax");
        if let Ok(v) = HeaderValue::from_str(&cookie) {
            rparts.headers.append(header::SET_COOKIE, v);
        }
    }
    Ok(Response::from_parts(rparts, Body::new(rbody)))
}
