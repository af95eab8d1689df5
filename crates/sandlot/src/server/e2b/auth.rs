//! Who an E2B request acts for: an E2B-format API key (`X-API-Key`) for the control plane; for a
//! sandbox's envd and ports, its access token (`X-Access-Token`) or that key.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::HeaderMap;
use sandlot_control::{Caller, Error, Kind};

use super::error::E2bApiError;
use crate::server::app::AppState;

const API_KEY_HEADER: &str = "x-api-key";
const ACCESS_TOKEN_HEADER: &str = "x-access-token";
const TRAFFIC_TOKEN_HEADER: &str = "e2b-traffic-access-token";

/// The headers that carry E2B credentials and routing: the sandbox's own servers never see them.
pub const E2B_REQUEST_HEADERS: &[&str] =
    &[API_KEY_HEADER, ACCESS_TOKEN_HEADER, TRAFFIC_TOKEN_HEADER, super::SANDBOX_ID_HEADER, super::SANDBOX_PORT_HEADER];

/// The caller of an E2B API key: `e2b_` + the hex of a sandlot key, or (for tools that send it as it
/// is) a sandlot key itself.
fn key_caller(app: &AppState, key: &str) -> sandlot_control::Result<Caller> {
    let key = key.trim();
    match sandlot_api::e2b::sandlot_key_of(key) {
        Some(sandlot_key) => app.control.authenticate(&sandlot_key),
        None if key.starts_with(sandlot_api::e2b::E2B_KEY_PREFIX) => Err(Error::new(
            Kind::Unauthenticated,
            "malformed E2B API key: expected e2b_ and the hex digits `sandlot e2b env` prints",
        )),
        None => app.control.authenticate(key),
    }
}

/// Whether `headers` carry this server's own key as a bearer token (some clients send the API key
/// that way): such a header must never reach a sandbox's server.
pub fn bearer_is_a_server_key(app: &AppState, headers: &HeaderMap) -> bool {
    super::super::extract::bearer_key(headers).flatten().is_some_and(|k| key_caller(app, k).is_ok())
}

/// The caller of a control-plane request.
pub struct E2bAuth(pub Caller);

impl FromRequestParts<AppState> for E2bAuth {
    type Rejection = E2bApiError;

    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, E2bApiError> {
        let key = parts.headers.get(API_KEY_HEADER).and_then(|v| v.to_str().ok()).or_else(|| {
            // Some clients send the key as a bearer token.
            super::super::extract::bearer_key(&parts.headers).flatten()
        });
        match key {
            Some(key) => Ok(E2bAuth(key_caller(app, key)?)),
            None => Err(Error::new(
                Kind::Unauthenticated,
                "missing API key: send it in X-API-Key (E2B_API_KEY; `sandlot e2b env` prints one)",
            )
            .into()),
        }
    }
}

/// The caller of a request to sandbox `id`'s envd or ports: its access token, else an API key of its
/// owner. Another tenant's sandbox, a wrong token and an unknown sandbox are all `not_found`.
pub fn sandbox_caller(app: &AppState, id: &str, headers: &HeaderMap) -> Result<Caller, super::envd::ConnectError> {
    if let Some(token) = headers.get(ACCESS_TOKEN_HEADER).and_then(|v| v.to_str().ok()) {
        return Ok(app.control.access_caller(id, token.trim())?);
    }
    if let Some(key) = headers.get(API_KEY_HEADER).and_then(|v| v.to_str().ok()) {
        let caller = key_caller(app, key)?;
        app.control.get(&caller, id)?;
        return Ok(caller);
    }
    Err(Error::new(
        Kind::Unauthenticated,
        "missing X-Access-Token: send the sandbox's envdAccessToken (the SDKs do), its trafficAccessToken \
         (E2B-Traffic-Access-Token, for ports) or X-API-Key",
    )
    .into())
}

/// The caller of a request to one of sandbox `id`'s ports (not envd): its traffic token
/// (`E2B-Traffic-Access-Token`), else what [`sandbox_caller`] takes (access token, API key).
/// A request with none of them reaches a sandbox made with `allowPublicTraffic: true`, as E2B's does.
pub fn port_caller(app: &AppState, id: &str, headers: &HeaderMap) -> Result<Caller, super::envd::ConnectError> {
    if let Some(token) = headers.get(TRAFFIC_TOKEN_HEADER).and_then(|v| v.to_str().ok()) {
        return Ok(app.control.traffic_caller(id, token.trim())?);
    }
    let credentials = [ACCESS_TOKEN_HEADER, API_KEY_HEADER].iter().any(|h| headers.contains_key(*h));
    if !credentials {
        if let Ok(caller) = app.control.public_port_caller(id) {
            return Ok(caller);
        }
    }
    sandbox_caller(app, id, headers)
}
