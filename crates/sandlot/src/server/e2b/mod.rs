//! The E2B-compatible surface: E2B's REST control plane and its in-sandbox daemon (envd), spoken by
//! sandlot itself, so the official `e2b` and `e2b-code-interpreter` SDKs work against `sandlot serve`
//! with nothing changed but environment variables (`sandlot e2b env` prints them).
//!
//! Like every surface it turns its protocol into `Control` calls and back, nothing else.
//!
//! How requests reach it, on the API's own listener:
//! - the control plane under `/e2b` (`E2B_API_URL=http://HOST:PORT/e2b`), authorised by an E2B-format
//!   API key in `X-API-Key` (`e2b_` + the hex of a sandlot key: the same tenant);
//! - a sandbox's envd and ports: a request carrying `E2b-Sandbox-Id` (and `E2b-Sandbox-Port`, 49983 =
//!   envd when absent), which is what the SDKs send when `E2B_SANDBOX_URL` points here. Port 49983 is
//!   answered by sandlot ([`envd`]); every other port is that port inside the sandbox. Authorised by
//!   the sandbox's access token (`X-Access-Token`, given out at create and connect) or the API key,
//!   never by the id alone.

mod auth;
mod envd;
mod error;
mod sandboxes;
mod templates;

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;

use super::app::AppState;
pub use error::E2bApiError;

/// The envd protocol version sandlot speaks. The SDKs turn features on by it (`ENVD_*` in
/// `e2b/envd/versions.py`); each one this version implies is implemented.
pub const ENVD_VERSION: &str = "0.6.4";
/// envd's port, where the SDKs send process and filesystem calls.
pub const ENVD_PORT: u16 = 49983;
/// The request header naming the sandbox.
pub const SANDBOX_ID_HEADER: &str = "e2b-sandbox-id";
/// The request header naming the port in the sandbox.
pub const SANDBOX_PORT_HEADER: &str = "e2b-sandbox-port";

/// The template the code-interpreter SDKs create from, and the image it maps to by default.
pub const DEFAULT_TEMPLATE_MAP: (&str, &str) = ("code-interpreter-v1", "code-interpreter");

/// How this server's E2B surface is set up (`sandlot serve --e2b-*`).
#[derive(Debug, Clone, Default)]
pub struct E2bSettings {
    /// Template name → image (`--e2b-template NAME=IMAGE`), beside `base` (the default image).
    pub templates: BTreeMap<String, String>,
    /// Domain of `{port}-{id}.{domain}` host names: requests to such hosts are routed like requests
    /// naming the sandbox by header. `--e2b-domain`, else the preview domain ([`Self::use_preview_domain`]).
    pub domain: Option<String>,
    /// The domain as the SDKs must use it (answers' `domain`, which `get_host` builds on): with the
    /// TLS listener on a port other than 443, `{domain}:{port}`, since the SDKs form
    /// `https://{port}-{id}.{domain}`.
    pub reported_domain: Option<String>,
    /// Whether the SDKs may send envd traffic by the domain (E2B_DOMAIN instead of E2B_SANDBOX_URL):
    /// an `--e2b-domain`, which is HTTPS. Not the preview domain, which is plain HTTP.
    pub domain_for_envd: bool,
    /// The server's CA, PEM, when it issued the TLS listener's certificate (`GET /e2b/ca.pem`).
    pub ca_pem: Option<String>,
}

impl E2bSettings {
    /// Settings from `--e2b-template NAME=IMAGE` flags (the default mapping of
    /// `code-interpreter-v1` stays unless a flag names it) and `--e2b-domain`.
    pub fn new(templates: &[String], domain: Option<&str>) -> Result<Self, String> {
        let mut map = BTreeMap::from([(DEFAULT_TEMPLATE_MAP.0.to_string(), DEFAULT_TEMPLATE_MAP.1.to_string())]);
        for t in templates {
            let (name, image) = t.split_once('=').filter(|(n, i)| !n.is_empty() && !i.is_empty()).ok_or_else(|| {
                format!("--e2b-template {t:?}: expected NAME=IMAGE, e.g. code-interpreter-v1=my-image")
            })?;
            if name == "base" {
                return Err("--e2b-template base=...: `base` is always the default image (set --default-image)".into());
            }
            map.insert(name.to_string(), image.to_string());
        }
        let domain = domain.map(|d| d.trim_matches('.').to_ascii_lowercase()).filter(|d| !d.is_empty());
        if let Some(d) = &domain {
            let label_ok =
                |l: &str| !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
            if d.len() > 200 || !d.split('.').all(label_ok) {
                return Err(format!("--e2b-domain {d:?}: expected a DNS name such as e2b.example.com"));
            }
        }
        Ok(E2bSettings {
            templates: map,
            reported_domain: domain.clone(),
            domain_for_envd: domain.is_some(),
            domain,
            ca_pem: None,
        })
    }

    /// Without `--e2b-domain`, sandbox hosts are preview origins: `{port}-{id}.{preview}:{listen
    /// port}` on the API's own listener. Answers name that domain, so `Sandbox.get_host(port)` gives a
    /// host that browsers and curl reach (over plain HTTP) instead of E2B's cloud (`*.e2b.app`, the
    /// SDKs' default, which would carry the sandbox's traffic token there). envd stays on header
    /// routing (E2B_SANDBOX_URL): the SDKs speak HTTPS to a domain. E2B ids have no `_`, so these
    /// hosts never shadow the native previews' `{port}-sb_{id}` ones.
    pub fn use_preview_domain(&mut self, preview: &str, listen_port: u16) {
        if self.domain.is_none() {
            self.domain = Some(preview.to_string());
            self.reported_domain = Some(format!("{preview}:{listen_port}"));
            self.domain_for_envd = false;
        }
    }

    /// Whether `host` is `api.{domain}[:port]`, where E2B serves its control plane at the root (the
    /// SDKs' default API URL when E2B_API_URL is unset: `https://api.{E2B_DOMAIN}`).
    fn is_api_host(&self, host: &str) -> bool {
        let Some(domain) = self.domain.as_deref().filter(|_| self.domain_for_envd) else { return false };
        let host = super::ports::without_port(host);
        host.trim_end_matches('.').to_ascii_lowercase().strip_prefix("api.") == Some(domain)
    }

    /// The sandbox and port a `Host` of `{port}-{id}.{domain}[:listener port]` names.
    fn host_target(&self, host: &str) -> Option<(String, u16)> {
        let domain = self.domain.as_deref()?;
        let label =
            super::ports::without_port(host).to_ascii_lowercase().strip_suffix(domain)?.strip_suffix('.')?.to_string();
        let (port, id) = label.split_once('-')?;
        let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
        // One label only: `a.{port}-{id}.{domain}` is nobody's.
        (!id.contains('.')).then_some(())?;
        Some((sandlot_api::e2b::sandlot_sandbox_id(id)?, port))
    }
}

/// The control plane's routes, nested at `/e2b`.
pub fn control_plane() -> Router<AppState> {
    Router::new()
        // Public: what a client needs to reach the sandboxes (no secret in either).
        .route("/ca.pem", get(ca_pem))
        .route("/connection", get(connection))
        .route("/sandboxes", post(sandboxes::create).get(sandboxes::list))
        .route("/v2/sandboxes", post(sandboxes::create).get(sandboxes::list))
        .route("/sandboxes/{id}", get(sandboxes::get).delete(sandboxes::kill))
        .route("/sandboxes/{id}/timeout", post(sandboxes::set_timeout))
        .route("/sandboxes/{id}/refreshes", post(sandboxes::refresh))
        .route("/sandboxes/{id}/pause", post(sandboxes::pause))
        .route("/sandboxes/{id}/resume", post(sandboxes::connect))
        .route("/sandboxes/{id}/connect", post(sandboxes::connect))
        .route("/v2/sandboxes/{id}/connect", post(sandboxes::connect))
        .route("/sandboxes/{id}/snapshots", post(sandboxes::create_snapshot))
        .route("/sandboxes/{id}/fork", post(sandboxes::fork))
        .route("/sandboxes/{id}/network", put(sandboxes::set_network))
        .route("/sandboxes/metrics", get(sandboxes::batch_metrics))
        .route("/sandboxes/{id}/metrics", get(sandboxes::metrics))
        .route("/sandboxes/{id}/logs", get(sandboxes::logs))
        .route("/v2/sandboxes/{id}/logs", get(sandboxes::logs))
        .route("/snapshots", get(sandboxes::list_snapshots))
        .route("/templates", get(templates::list).post(templates::build))
        .route("/v2/templates", get(templates::list).post(templates::build))
        .route("/v3/templates", post(templates::build))
        .route("/templates/aliases/{alias}", get(templates::alias))
        .route(
            "/templates/{id}",
            get(templates::get).delete(templates::delete).post(templates::build).patch(templates::build),
        )
        .route("/v2/templates/{id}", axum::routing::patch(templates::build))
        .route("/templates/{id}/builds/{build}", post(templates::build))
        .route("/v2/templates/{id}/builds/{build}", post(templates::build))
        .fallback(|| async { E2bApiError::not_found("no such route in sandlot's E2B-compatible API") })
}

/// Sends a request that names a sandbox (`E2b-Sandbox-Id`) to its envd or port; every other request
/// goes on to the API's routes.
pub async fn by_sandbox(
    State(Routers { app, envd, control_plane }): State<Routers>,
    req: Request,
    next: axum::middleware::Next,
) -> Response {
    let Some(id) = req.headers().get(SANDBOX_ID_HEADER) else {
        let host = req.headers().get(axum::http::header::HOST).and_then(|h| h.to_str().ok());
        // `api.{domain}` is E2B's control plane at its root, and nothing else of sandlot's API.
        if host.is_some_and(|h| app.e2b.is_api_host(h)) {
            return answer_with(control_plane, req).await;
        }
        return match host.and_then(|h| app.e2b.host_target(h)) {
            Some((id, port)) if port == ENVD_PORT => to_envd(&app, envd, id, req).await,
            Some((id, port)) => sandbox_port(&app, id, port, req).await,
            None => next.run(req).await,
        };
    };
    let id = id.to_str().ok().and_then(sandlot_api::e2b::sandlot_sandbox_id);
    let Some(id) = id else {
        return envd::ConnectError::not_found("no such sandbox: the E2b-Sandbox-Id header is not a sandbox id")
            .into_response();
    };
    let port = match req.headers().get(SANDBOX_PORT_HEADER).map(|p| p.to_str().ok().and_then(|p| p.parse::<u16>().ok()))
    {
        None => ENVD_PORT,
        Some(Some(p)) if p != 0 => p,
        Some(_) => {
            return envd::ConnectError::invalid("the E2b-Sandbox-Port header must be a port number, 1-65535")
                .into_response()
        }
    };
    if port != ENVD_PORT {
        return sandbox_port(&app, id, port, req).await;
    }
    to_envd(&app, envd, id, req).await
}

/// A request for sandbox `id`'s envd, authorised, handed to the envd routes.
async fn to_envd(app: &AppState, envd: Router, id: String, req: Request) -> Response {
    // A signed envd file URL carries its own proof of the access token (envd::signed_caller).
    let (caller, signed) = match envd::signed_caller(app, &id, &req) {
        // /files is envd's REST part: its errors take the REST shape (`{"code": 401, …}`).
        Some(Ok((caller, file))) => (caller, Some(file)),
        // A signature that proves nothing is refused as such (not_found), not taken for a gone sandbox.
        Some(Err(e)) => return e.into_response(),
        None => match auth::sandbox_caller(app, &id, req.headers()) {
            Ok(caller) => (caller, None),
            // A sandbox that is gone (or a token of none): E2B's proxy answers 502 there.
            Err(e) if e.status == axum::http::StatusCode::NOT_FOUND => return envd::not_running(&id, "deleted"),
            Err(e) => return e.into_response(),
        },
    };
    let mut req = req;
    req.extensions_mut().insert(envd::Target { id, caller, signed });
    answer_with(envd, req).await
}

/// `router`'s answer to `req` (a router's service never fails).
async fn answer_with(router: Router, req: Request) -> Response {
    use tower::ServiceExt;
    match router.oneshot(req).await {
        Ok(r) => r,
        Err(never) => match never {},
    }
}

/// `GET /e2b/ca.pem`: the CA that issued the TLS listener's certificate, for clients to trust.
async fn ca_pem(State(app): State<AppState>) -> Response {
    match &app.e2b.ca_pem {
        Some(pem) => ([(axum::http::header::CONTENT_TYPE, "application/x-pem-file")], pem.clone()).into_response(),
        None => E2bApiError::not_found(
            "this server issued no TLS certificate: it has no --e2b-tls-listen, or serves the admin's --e2b-tls-cert",
        )
        .into_response(),
    }
}

/// `GET /e2b/connection`: how clients reach this server's sandboxes (what `sandlot e2b env` prints).
async fn connection(State(app): State<AppState>) -> axum::Json<sandlot_api::e2b::E2bConnection> {
    axum::Json(sandlot_api::e2b::E2bConnection {
        domain: app.e2b.reported_domain.clone().filter(|_| app.e2b.domain_for_envd),
        ca_issued: app.e2b.ca_pem.is_some(),
    })
}

/// How long a request to a sandbox port waits for a server to listen there: the code interpreter
/// (and many users' servers) starts after the sandbox does, and the SDKs call it right away.
const PORT_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// A request to `port` (not envd) of sandbox `id`, proxied to that port inside it, E2B's credential
/// and routing headers removed.
async fn sandbox_port(app: &AppState, id: String, port: u16, req: Request) -> Response {
    let caller = match auth::port_caller(app, &id, req.headers()) {
        Ok(c) => c,
        // A gone sandbox is E2B's 502 to any caller, as its proxy answers before any credential.
        Err(_) if app.control.sandbox_gone(&id).unwrap_or(false) => return envd::not_running(&id, "deleted"),
        // E2B's proxy answers a port request without its traffic token 403, which is what clients
        // of a non-public sandbox test for; every sandlot sandbox's ports are non-public.
        Err(e) if e.status == axum::http::StatusCode::UNAUTHORIZED => {
            return envd::ConnectError::new("permission_denied", axum::http::StatusCode::FORBIDDEN, e.message)
                .into_response()
        }
        Err(e) => return e.into_response(),
    };
    let ports = match app.control.ports(&caller, &id).await {
        Ok(p) => p,
        Err(e) => return envd::ConnectError::from(e).into_response(),
    };
    let mut req = req;
    for h in auth::E2B_REQUEST_HEADERS {
        req.headers_mut().remove(*h);
    }
    // A key of ours sent as a bearer token is ours, not the sandbox server's (the app's own
    // Authorization, anything else, goes through as it came).
    if auth::bearer_is_a_server_key(app, req.headers()) {
        req.headers_mut().remove(axum::http::header::AUTHORIZATION);
    }
    match super::ports::forward(&ports, port, req, PORT_PATIENCE).await {
        Ok(resp) => resp.map(axum::body::Body::new),
        Err(e) => e.into_response(),
    }
}

/// What [`by_sandbox`] hands requests to: envd's routes, and the control plane's for `api.{domain}`,
/// each with the app's state applied (the middleware calls them directly).
#[derive(Clone)]
pub struct Routers {
    app: AppState,
    envd: Router,
    control_plane: Router,
}

impl Routers {
    pub fn new(app: &AppState) -> Self {
        Routers {
            app: Arc::clone(app),
            envd: envd::routes().with_state(Arc::clone(app)),
            // The same body bound as under `/e2b` on the main router.
            control_plane: control_plane()
                .layer(axum::extract::DefaultBodyLimit::max(super::MAX_JSON_BODY))
                .with_state(Arc::clone(app)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_under_the_domain_name_a_port_and_a_sandbox() {
        let s = E2bSettings::new(&[], Some("E2B.example.test.")).unwrap();
        assert_eq!(s.domain.as_deref(), Some("e2b.example.test"));
        assert_eq!(s.host_target("49983-abc123.e2b.example.test"), Some(("sb_abc123".into(), 49983)));
        assert_eq!(s.host_target("8000-ABC123.E2B.example.test:8443"), Some(("sb_abc123".into(), 8000)));
        for other in [
            "abc123.e2b.example.test",
            "0-abc123.e2b.example.test",
            "x.8000-abc123.e2b.example.test",
            "8000-abc123.example.test",
            "8000-abc123.xe2b.example.test",
            "8000-a_b.e2b.example.test",
            "api.e2b.example.test",
        ] {
            assert_eq!(s.host_target(other), None, "{other}");
        }
        assert_eq!(E2bSettings::new(&[], None).unwrap().host_target("1-a.x"), None);
    }

    #[test]
    fn templates_map_with_the_code_interpreter_default_and_refuse_base() {
        let s = E2bSettings::new(&["mine=img:1".into()], None).unwrap();
        assert_eq!(s.templates["code-interpreter-v1"], "code-interpreter");
        assert_eq!(s.templates["mine"], "img:1");
        let s = E2bSettings::new(&["code-interpreter-v1=ci2".into()], None).unwrap();
        assert_eq!(s.templates["code-interpreter-v1"], "ci2");
        for bad in ["base=x", "noequals", "=x", "x="] {
            assert!(E2bSettings::new(&[bad.into()], None).is_err(), "{bad}");
        }
        assert!(E2bSettings::new(&[], Some("bad_domain!")).is_err());
    }

    #[test]
    fn the_api_host_is_the_e2b_domain_s_own() {
        let s = E2bSettings::new(&[], Some("e2b.example.test")).unwrap();
        assert!(s.is_api_host("api.e2b.example.test"));
        assert!(s.is_api_host("API.e2b.example.test:8443"));
        for other in ["api.example.test", "xapi.e2b.example.test", "api.e2b.example.test.evil", "e2b.example.test"] {
            assert!(!s.is_api_host(other), "{other}");
        }
        let mut s = E2bSettings::new(&[], None).unwrap();
        s.use_preview_domain("localhost", 8080);
        assert!(!s.is_api_host("api.localhost:8080"));
    }

    #[test]
    fn without_an_e2b_domain_sandbox_hosts_are_preview_origins() {
        let mut s = E2bSettings::new(&[], None).unwrap();
        s.use_preview_domain("localhost", 8080);
        assert_eq!(s.reported_domain.as_deref(), Some("localhost:8080"));
        assert!(!s.domain_for_envd);
        assert_eq!(s.host_target("8000-abc123.localhost:8080"), Some(("sb_abc123".into(), 8000)));
        // The native previews' hosts stay theirs.
        assert_eq!(s.host_target("8000-sb_abc123.localhost:8080"), None);
        // An E2B domain wins over the preview domain.
        let mut s = E2bSettings::new(&[], Some("e2b.example.test")).unwrap();
        s.use_preview_domain("localhost", 8080);
        assert_eq!(s.domain.as_deref(), Some("e2b.example.test"));
        assert!(s.domain_for_envd);
    }
}
