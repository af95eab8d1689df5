//! The control plane's sandbox routes: create, list, info, kill, timeout and refreshes, pause,
//! connect (resume), snapshots, fork, network, metrics, logs.
//!
//! How E2B's lifecycle maps onto sandlot's (docs/API.md, "E2B compatibility: control plane"):
//! - every E2B sandbox is persistent when the server can keep files (it has the layers volume), since
//!   any E2B sandbox may be paused and connected to again; its `on_timeout` is `delete` (E2B's `kill`)
//!   unless it was created with `autoPause`;
//! - E2B's `paused` is sandlot's `paused` (pause with memory: the freezer) or `stopped` (pause without
//!   memory: files kept, processes gone); connect resumes either.

use std::collections::BTreeMap;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use sandlot_api::e2b::{
    e2b_sandbox_id, parse_rfc3339_ms, rfc3339_ms, sandlot_sandbox_id, ConnectRequest, E2bSandbox, E2bSnapshot,
    E2bState, ForkOutcome, ForkRequest, Lifecycle, NetworkConfig, NewSandbox, OnTimeout, PauseRequest, RefreshRequest,
    SandboxDetail, SandboxMetric, SandboxesWithMetrics, SnapshotRequest, TimeoutRequest,
};
use sandlot_api::{CreateSandbox, HostRule, Mode, NetworkSpec, SandboxInfo, SandboxState, TimeoutAction};
use sandlot_control::Caller;
use serde::Deserialize;

use super::auth::E2bAuth;
use super::error::E2bApiError;
use super::ENVD_VERSION;
use crate::server::app::AppState;
use crate::server::extract::ApiPath;

/// The template the SDKs create from when given none.
const BASE_TEMPLATE: &str = "base";
/// The header carrying the next page's token of a list (the SDKs' paginators read it).
const NEXT_TOKEN_HEADER: &str = "x-next-token";
/// Most entries of one list page, whatever `limit` asks.
const MAX_PAGE: usize = 1000;
/// Lifetime of a fork when the request names none: E2B's default.
const DEFAULT_FORK_TIMEOUT_S: u64 = 15;

/// The sandlot id an E2B path names; a malformed one is not found, as an unknown one is.
pub(super) fn sandbox_id(e2b_id: &str) -> Result<String, E2bApiError> {
    sandlot_sandbox_id(e2b_id).ok_or_else(|| E2bApiError::not_found(format!("sandbox {e2b_id} not found")))
}

/// What a create's template starts the sandbox from.
enum Origin {
    /// An image (`None`: the server's default).
    Image(Option<String>),
    /// A snapshot of the tenant's (E2B's `Sandbox.create(snapshot_id)`).
    Snapshot(String),
}

/// Resolves a template: `base` (or none) is the server's default image, a name of `--e2b-template`
/// its image, a snapshot id or name of the tenant's that snapshot, anything else an image the tenant
/// may use. An unknown one is not found, as E2B answers.
fn origin(app: &AppState, caller: &Caller, template: &str) -> Result<Origin, E2bApiError> {
    if template == BASE_TEMPLATE {
        return Ok(Origin::Image(None));
    }
    if let Some(image) = app.e2b.templates.get(template) {
        return Ok(Origin::Image(Some(image.clone())));
    }
    let snapshots = app.control.list_snapshots(caller)?.snapshots;
    if let Some(s) = snapshots.iter().find(|s| s.id == template || s.name.as_deref() == Some(template)) {
        return Ok(Origin::Snapshot(s.id.clone()));
    }
    match app.control.get_image(caller, template) {
        Ok(_) => Ok(Origin::Image(Some(template.to_string()))),
        Err(e) if e.kind == sandlot_control::Kind::NotFound => Err(E2bApiError::not_found(format!(
            "template {template:?} not found: it is neither `base`, an --e2b-template name ({}), a snapshot \
             of yours, nor an image you can use (`sandlot image ls`; build one with `sandlot image build`)",
            app.e2b.templates.keys().map(String::as_str).collect::<Vec<_>>().join(", ")
        ))),
        Err(e) => Err(e.into()),
    }
}

/// The template name E2B reports for a sandbox: `base` for the default image, the `--e2b-template`
/// name of a mapped image, else the image's own name.
fn template_of(app: &AppState, info: &SandboxInfo) -> String {
    if info.image == app.control.config().default_image {
        return BASE_TEMPLATE.into();
    }
    app.e2b
        .templates
        .iter()
        .find(|(_, image)| **image == info.image)
        .map_or_else(|| info.image.clone(), |(name, _)| name.clone())
}

/// A field sandlot cannot honour, set in a request: refused, so nobody believes it is in force.
fn unsupported(other: &BTreeMap<String, serde_json::Value>, fields: &[(&str, &str)]) -> Result<(), E2bApiError> {
    for (field, why) in fields {
        match other.get(*field) {
            None | Some(serde_json::Value::Null) => {}
            Some(serde_json::Value::Array(a)) if a.is_empty() => {}
            Some(_) => {
                return Err(E2bApiError::new(
                    StatusCode::BAD_REQUEST,
                    format!("`{field}` is not supported by sandlot's E2B API: {why}; leave it out"),
                ))
            }
        }
    }
    Ok(())
}

/// sandlot's egress policy for E2B's `allow_internet_access` and `network`. The internet is closed
/// unless the request opens it (`allow_internet_access: true`): sandlot denies by default on every
/// surface. The E2B SDKs send `true` unless told otherwise, so their users get the internet as on
/// E2B's cloud; a bare request does not. `allowOut` names the only destinations while the internet is closed (or `denyOut`
/// closes it with `0.0.0.0/0`), as E2B's allow-over-deny rule has it; sandlot's always-deny list holds
/// either way; per-host header transforms go to the credential broker.
pub(super) fn network_spec(
    allow_internet: Option<bool>,
    net: Option<&NetworkConfig>,
) -> Result<NetworkSpec, E2bApiError> {
    let default = NetworkConfig::default();
    let net = net.unwrap_or(&default);
    unsupported(
        &net.other,
        &[
            ("egressProxy", "egress goes through sandlot's own proxy"),
            ("dnsServers", "sandboxes resolve through sandlot's proxy, which applies the policy"),
            ("maskRequestHost", "sandlot does not rewrite Host"),
            ("httpsPorts", "sandbox ports are proxied as plain HTTP"),
        ],
    )?;
    let everything = |c: &String| c == "0.0.0.0/0" || c == "::/0";
    let allow = net.allow_out.clone().unwrap_or_default();
    let deny_all = net.deny_out.as_ref().is_some_and(|d| d.iter().any(everything));
    let deny: Vec<String> = net.deny_out.iter().flatten().filter(|c| !everything(c)).cloned().collect();
    let mut rules = BTreeMap::new();
    for (host, host_rules) in net.rules.iter().flatten() {
        let mut headers = BTreeMap::new();
        for rule in host_rules {
            for (name, value) in rule.transform.iter().flat_map(|t| &t.headers) {
                headers.insert(name.clone(), value.clone());
            }
        }
        rules.insert(host.clone(), HostRule { headers });
    }
    let closed = allow_internet != Some(true) || deny_all;
    let mode = match (closed, allow.is_empty()) {
        (true, true) => Mode::Deny,
        (true, false) => Mode::Allowlist,
        // Open, with allowOut: E2B's allowOut only punches holes in denyOut, so it restricts nothing.
        (false, _) => Mode::AllowAll,
    };
    let allow = if mode == Mode::Allowlist { allow } else { Vec::new() };
    // Public ports only when asked for: E2B's default is public, sandlot's is a token on every port.
    Ok(NetworkSpec { mode, allow, deny, rules, public_ports: net.allow_public_traffic })
}

/// The answer to a create, connect or fork.
fn answer(app: &AppState, caller: &Caller, info: &SandboxInfo) -> Result<E2bSandbox, E2bApiError> {
    Ok(E2bSandbox {
        template_id: template_of(app, info),
        sandbox_id: e2b_sandbox_id(&info.id).to_string(),
        alias: None,
        client_id: "sandlot".into(),
        envd_version: ENVD_VERSION.into(),
        envd_access_token: app.control.access_token(caller, &info.id)?,
        // Always: every sandbox port needs a token here (no public traffic).
        traffic_access_token: Some(app.control.traffic_token(caller, &info.id)?),
        domain: app.e2b.reported_domain.clone(),
    })
}

/// E2B's view of a sandlot state (`None`: not a sandbox E2B shows — failed or deleted).
fn e2b_state(state: SandboxState) -> Option<E2bState> {
    match state {
        SandboxState::Creating | SandboxState::Running => Some(E2bState::Running),
        SandboxState::Paused | SandboxState::Stopped => Some(E2bState::Paused),
        SandboxState::Failed | SandboxState::Deleted => None,
    }
}

/// A sandbox as E2B lists it; `with_detail` adds what only info carries (token, lifecycle, network).
fn detail(
    app: &AppState,
    caller: &Caller,
    info: &SandboxInfo,
    with_detail: bool,
) -> Result<SandboxDetail, E2bApiError> {
    let state = e2b_state(info.state).ok_or_else(|| {
        E2bApiError::not_found(format!(
            "sandbox {} not found: it is {}{}",
            e2b_sandbox_id(&info.id),
            info.state.as_str(),
            info.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default()
        ))
    })?;
    Ok(SandboxDetail {
        template_id: template_of(app, info),
        sandbox_id: e2b_sandbox_id(&info.id).to_string(),
        alias: None,
        client_id: "sandlot".into(),
        started_at: rfc3339_ms(info.created_at_ms),
        end_at: rfc3339_ms(info.expires_at_ms),
        envd_version: ENVD_VERSION.into(),
        cpu_count: info.limits.cpu.ceil().max(1.0) as u64,
        memory_mb: info.limits.memory_mb,
        disk_size_mb: info.limits.disk_mb.unwrap_or(0),
        state,
        metadata: info.metadata.clone(),
        envd_access_token: with_detail.then(|| app.control.access_token(caller, &info.id)).transpose()?,
        allow_internet_access: with_detail.then_some(info.network.mode != Mode::Deny),
        domain: if with_detail { app.e2b.reported_domain.clone() } else { None },
        lifecycle: with_detail.then_some(Lifecycle {
            auto_resume: info.auto_resume,
            on_timeout: match info.on_timeout {
                TimeoutAction::Delete => OnTimeout::Kill,
                TimeoutAction::Stop | TimeoutAction::Pause => OnTimeout::Pause,
            },
        }),
    })
}

pub async fn create(
    State(app): State<AppState>,
    E2bAuth(caller): E2bAuth,
    Json(req): Json<NewSandbox>,
) -> Result<impl IntoResponse, E2bApiError> {
    if req.other.get("mcp").is_some_and(|m| !m.is_null()) {
        // E2B's words first (the SDKs' tests match them): the gateway cannot start here, and no
        // sandbox is left behind since none was made.
        return Err(E2bApiError::new(
            StatusCode::BAD_REQUEST,
            "Failed to start MCP gateway: `mcp` is not supported by sandlot's E2B API (sandlot runs no MCP \
             gateway in sandboxes: start MCP servers with sandbox.commands.run, or use sandlot's own MCP \
             surface); leave it out",
        ));
    }
    unsupported(
        &req.other,
        &[
            ("volumeMounts", "mount nothing; copy files in with sandbox.files.write"),
            ("iam", "sandlot issues no workload identity tokens; broker credentials with network.rules"),
        ],
    )?;
    let template = req.template_id.clone().unwrap_or_else(|| BASE_TEMPLATE.into());
    let (image, snapshot) = match origin(&app, &caller, &template)? {
        Origin::Image(image) => (image, None),
        Origin::Snapshot(s) => (None, Some(s)),
    };
    let auto_pause = req.auto_pause.unwrap_or(false);
    let on_timeout = match (auto_pause, req.auto_pause_memory) {
        (false, _) => TimeoutAction::Delete,
        (true, Some(false)) => TimeoutAction::Stop,
        (true, _) => TimeoutAction::Pause,
    };
    let create = CreateSandbox {
        image,
        snapshot,
        timeout_s: req.timeout,
        metadata: req.metadata.unwrap_or_default(),
        env: req.env_vars.unwrap_or_default(),
        persistent: Some(app.control.can_persist()),
        on_timeout: Some(on_timeout),
        auto_resume: Some(req.auto_resume.is_some_and(|a| a.enabled)),
        network: Some(network_spec(req.allow_internet_access, req.network.as_ref())?),
        ..CreateSandbox::default()
    };
    let created = app.control.create(&caller, create).await?;
    Ok((StatusCode::CREATED, Json(answer(&app, &caller, &created.info)?)))
}

pub async fn get(
    State(app): State<AppState>,
    E2bAuth(caller): E2bAuth,
    ApiPath(id): ApiPath<String>,
) -> Result<impl IntoResponse, E2bApiError> {
    let info = app.control.get(&caller, &sandbox_id(&id)?)?;
    Ok(Json(detail(&app, &caller, &info, true)?))
}

/// Query of `GET /v2/sandboxes` (and the old `GET /sandboxes`, which has `metadata` only).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListQuery {
    /// `k=v&k2=v2` form-encoded, of keys and values that were percent-encoded first (the SDKs
    /// quote each, then urlencode the pairs): two decodings past the query's own.
    metadata: Option<String>,
    /// `running,paused`.
    state: Option<String>,
    /// Template name.
    template: Option<String>,
    /// `asc` or `desc` by start time.
    order: Option<String>,
    /// RFC 3339: only sandboxes started at or after it.
    started_after: Option<String>,
    limit: Option<usize>,
    next_token: Option<String>,
}

/// Decodes `%XX` escapes (and `+` as space) of one form component.
fn percent_decode(s: &str) -> Result<String, E2bApiError> {
    let bad = || E2bApiError::new(StatusCode::BAD_REQUEST, "metadata: malformed percent-encoding");
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = s.get(i + 1..i + 3).ok_or_else(bad)?;
                out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| bad())
}

/// The metadata filter of a list: every pair must match. Each key and value is decoded twice: once
/// for the pairs' form encoding, once for the SDKs' quoting of each before it.
fn metadata_filter(raw: Option<&str>) -> Result<Vec<(String, String)>, E2bApiError> {
    let Some(raw) = raw.filter(|r| !r.is_empty()) else { return Ok(Vec::new()) };
    raw.split('&')
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((percent_decode(&percent_decode(k)?)?, percent_decode(&percent_decode(v)?)?))
        })
        .collect()
}

/// One page of `items` in the order of `key` (ascending or not), starting after the key `token`;
/// the token of the next page when there is one. A token is a position in that order, not an item,
/// so items deleted or added between pages shift nothing. Keys must sort as the order is meant
/// (zero-padded times first).
fn page<T>(
    mut items: Vec<T>,
    key: impl Fn(&T) -> String,
    ascending: bool,
    token: Option<&str>,
    limit: Option<usize>,
) -> (Vec<T>, Option<String>) {
    items.sort_by_cached_key(|i| key(i));
    if !ascending {
        items.reverse();
    }
    let after = |i: &T| token.is_none_or(|t| if ascending { key(i).as_str() > t } else { key(i).as_str() < t });
    let limit = limit.unwrap_or(MAX_PAGE).clamp(1, MAX_PAGE);
    let mut rest = items.into_iter().filter(|i| after(i)).peekable();
    let taken: Vec<T> = rest.by_ref().take(limit).collect();
    let next = rest.peek().is_some().then(|| taken.last().map(&key)).flatten();
    (taken, next)
}

/// The order key of a listed thing: its creation time (zero-padded), then its id.
fn order_key(created_at_ms: i64, id: &str) -> String {
    format!("{:015}-{id}", created_at_ms.max(0))
}

fn with_next_token(next: Option<String>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    if let Some(v) = next.and_then(|t| HeaderValue::from_str(&t).ok()) {
        headers.insert(NEXT_TOKEN_HEADER, v);
    }
    headers
}

pub async fn list(
    State(app): State<AppState>,
    E2bAuth(caller): E2bAuth,
    Query(q): Query<ListQuery>,
) -> Result<impl IntoResponse, E2bApiError> {
    let started_after = match q.started_after.as_deref() {
        None => None,
        Some(t) => Some(parse_rfc3339_ms(t).ok_or_else(|| {
            E2bApiError::new(
                StatusCode::BAD_REQUEST,
                format!("startedAfter {t:?}: expected an RFC 3339 time such as 2026-01-02T03:04:05Z"),
            )
        })?),
    };
    let wanted = metadata_filter(q.metadata.as_deref())?;
    let states: Vec<E2bState> = match q.state.as_deref().filter(|s| !s.is_empty()) {
        None => vec![E2bState::Running, E2bState::Paused],
        Some(s) => s
            .split(',')
            .map(|one| match one.trim() {
                "running" => Ok(E2bState::Running),
                "paused" => Ok(E2bState::Paused),
                other => Err(E2bApiError::new(
                    StatusCode::BAD_REQUEST,
                    format!("state {other:?}: expected running or paused (comma-separated)"),
                )),
            })
            .collect::<Result<_, _>>()?,
    };
    let ascending = match q.order.as_deref() {
        None | Some("desc") => false,
        Some("asc") => true,
        Some(o) => return Err(E2bApiError::new(StatusCode::BAD_REQUEST, format!("order {o:?}: expected asc or desc"))),
    };
    let mut listed = Vec::new();
    for info in app.control.list(&caller)?.sandboxes {
        let Some(state) = e2b_state(info.state) else { continue };
        let matches = states.contains(&state)
            && started_after.is_none_or(|after| info.created_at_ms >= after)
            && wanted.iter().all(|(k, v)| info.metadata.get(k) == Some(v))
            && q.template.as_ref().is_none_or(|t| *t == template_of(&app, &info) || *t == info.image);
        if matches {
            listed.push(info);
        }
    }
    let key = |i: &SandboxInfo| order_key(i.created_at_ms, e2b_sandbox_id(&i.id));
    let (taken, next) = page(listed, key, ascending, q.next_token.as_deref(), q.limit);
    let body = taken.iter().map(|i| detail(&app, &caller, i, false)).collect::<Result<Vec<_>, _>>()?;
    Ok((with_next_token(next), Json(body)))
}

pub async fn kill(
    State(app): State<AppState>,
    E2bAuth(caller): E2bAuth,
    ApiPath(id): ApiPath<String>,
) -> Result<impl IntoResponse, E2bApiError> {
    app.control.delete(&caller, &sandbox_id(&id)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn set_timeout(
    State(app): State<AppState>,
    E2bAuth(caller): E2bAuth,
    ApiPath(id): ApiPath<String>,
    Json(req): Json<TimeoutRequest>,
) -> Result<impl IntoResponse, E2bApiError> {
    // E2B takes 0 as "time out now" (the SDKs' way to force the timeout action); the reaper acts on
    // a sandbox whose end has passed within a second, so the shortest sandlot timeout is the same.
    app.control.set_timeout(&caller, &sandbox_id(&id)?, req.timeout.max(1))?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn refresh(
    State(app): State<AppState>,
    E2bAuth(caller): E2bAuth,
    ApiPath(id): ApiPath<String>,
    Json(req): Json<RefreshRequest>,
) -> Result<impl IntoResponse, E2bApiError> {
    let id = sandbox_id(&id)?;
    let duration = req.duration.unwrap_or(app.control.config().defaults.timeout_s);
    // A refresh only ever extends: a sandbox whose end is later already keeps it.
    app.control.extend_timeout(&caller, &id, duration).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn pause(
    State(app): State<AppState>,
    E2bAuth(caller): E2bAuth,
    ApiPath(id): ApiPath<String>,
    body: Option<Json<PauseRequest>>,
) -> Result<impl IntoResponse, E2bApiError> {
    let id = sandbox_id(&id)?;
    let req = body.map(|Json(b)| b).unwrap_or_default();
    // `memory: false` keeps only the files (a stop); either way a second pause is E2B's 409.
    match app.control.pause_unless_paused(&caller, &id, req.memory != Some(false)).await? {
        Some(_) => Ok(StatusCode::NO_CONTENT),
        None => {
            Err(E2bApiError::new(StatusCode::CONFLICT, format!("sandbox {} is already paused", e2b_sandbox_id(&id))))
        }
    }
}

/// Connect (v1 and v2) and the old resume: a paused or stopped sandbox is resumed (201), a running
/// one is left as it is (200); the timeout, when given, is set from now for a resumed sandbox and
/// extends (never shortens) a running one's.
pub async fn connect(
    State(app): State<AppState>,
    E2bAuth(caller): E2bAuth,
    ApiPath(id): ApiPath<String>,
    body: Option<Json<ConnectRequest>>,
) -> Result<impl IntoResponse, E2bApiError> {
    let id = sandbox_id(&id)?;
    let req = body.map(|Json(b)| b).unwrap_or_default();
    let info = app.control.get(&caller, &id)?;
    e2b_state(info.state).ok_or_else(|| {
        E2bApiError::not_found(format!("sandbox {} not found: it is {}", e2b_sandbox_id(&id), info.state.as_str()))
    })?;
    // `memory: false` on a paused sandbox is `on_resume="reboot"`: cold boot from the files, as E2B does.
    let (info, resumed) = app.control.connect(&caller, &id, req.memory == Some(false), req.timeout).await?;
    let status = if resumed { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(answer(&app, &caller, &info)?)))
}

pub async fn create_snapshot(
    State(app): State<AppState>,
    E2bAuth(caller): E2bAuth,
    ApiPath(id): ApiPath<String>,
    body: Option<Json<SnapshotRequest>>,
) -> Result<impl IntoResponse, E2bApiError> {
    let id = sandbox_id(&id)?;
    let req = body.map(|Json(b)| b).unwrap_or_default();
    if req.memory == Some(true) {
        return Err(E2bApiError::new(
            StatusCode::BAD_REQUEST,
            "sandlot snapshots keep files, not memory: create it with mode=\"filesystem\" (or no mode)",
        ));
    }
    let snap = app.control.snapshot(&caller, &id, req.name).await?;
    let body = E2bSnapshot { snapshot_id: snap.id.clone(), names: snap.name.into_iter().collect() };
    Ok((StatusCode::CREATED, Json(body)))
}

/// Query of `GET /snapshots`.
#[derive(Debug, Default, Deserialize)]
pub struct SnapshotQuery {
    #[serde(rename = "sandboxID")]
    sandbox_id: Option<String>,
    name: Option<String>,
    limit: Option<usize>,
    #[serde(rename = "nextToken")]
    next_token: Option<String>,
}

pub async fn list_snapshots(
    State(app): State<AppState>,
    E2bAuth(caller): E2bAuth,
    Query(q): Query<SnapshotQuery>,
) -> Result<impl IntoResponse, E2bApiError> {
    let of = q.sandbox_id.as_deref().map(sandbox_id).transpose()?;
    let snaps: Vec<_> = app
        .control
        .list_snapshots(&caller)?
        .snapshots
        .into_iter()
        .filter(|s| of.as_ref().is_none_or(|id| s.sandbox_id == *id))
        .filter(|s| q.name.as_ref().is_none_or(|n| s.name.as_ref() == Some(n)))
        .collect();
    let key = |s: &sandlot_api::SnapshotInfo| order_key(s.created_at_ms, &s.id);
    let (taken, next) = page(snaps, key, false, q.next_token.as_deref(), q.limit);
    let body: Vec<E2bSnapshot> =
        taken.into_iter().map(|s| E2bSnapshot { snapshot_id: s.id, names: s.name.into_iter().collect() }).collect();
    Ok((with_next_token(next), Json(body)))
}

pub async fn fork(
    State(app): State<AppState>,
    E2bAuth(caller): E2bAuth,
    ApiPath(id): ApiPath<String>,
    body: Option<Json<ForkRequest>>,
) -> Result<impl IntoResponse, E2bApiError> {
    let id = sandbox_id(&id)?;
    let req = body.map(|Json(b)| b).unwrap_or_default();
    let timeout = req.timeout.unwrap_or(DEFAULT_FORK_TIMEOUT_S);
    let forks = app.control.fork(&caller, &id, req.count.unwrap_or(1)).await?;
    let mut outcomes = Vec::with_capacity(forks.len());
    for f in forks {
        let outcome = match app.control.set_timeout(&caller, &f.id, timeout) {
            Ok(info) => ForkOutcome { sandbox: Some(answer(&app, &caller, &info)?), error: None },
            Err(e) => {
                let e = E2bApiError::from(e);
                ForkOutcome {
                    sandbox: None,
                    error: Some(sandlot_api::e2b::E2bError { code: e.status.as_u16(), message: e.message }),
                }
            }
        };
        outcomes.push(outcome);
    }
    Ok((StatusCode::CREATED, Json(outcomes)))
}

pub async fn set_network(
    State(app): State<AppState>,
    E2bAuth(caller): E2bAuth,
    ApiPath(id): ApiPath<String>,
    Json(req): Json<NetworkConfig>,
) -> Result<impl IntoResponse, E2bApiError> {
    let id = sandbox_id(&id)?;
    // An update replaces the rules; one that leaves `allow_internet_access` out keeps the internet as
    // open as it is (E2B's default is open, sandlot's closed: an update never opens a closed or
    // allowlisted sandbox unless it says `allow_internet_access: true`).
    let open = match req.allow_internet_access {
        Some(open) => open,
        None => app.control.get(&caller, &id)?.network.mode == Mode::AllowAll,
    };
    let spec = network_spec(Some(open), Some(&req))?;
    app.control.set_network(&caller, &id, spec).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Most sandboxes one batch metrics request may name (each is measured for a quarter second, all at
/// once).
const MAX_METRICS_BATCH: usize = 100;

fn metric(m: &sandlot_api::SandboxMetrics) -> SandboxMetric {
    SandboxMetric {
        timestamp: rfc3339_ms(m.at_ms),
        timestamp_unix: m.at_ms / 1000,
        cpu_count: m.cpu_limit.ceil().max(1.0) as u64,
        cpu_used_pct: m.cpu_used_pct.unwrap_or(0.0),
        mem_used: m.memory_used_bytes,
        mem_total: m.memory_total_bytes,
        mem_cache: m.memory_cache_bytes,
        disk_used: m.disk_used_bytes.unwrap_or(0),
        disk_total: m.disk_total_bytes.unwrap_or(0),
    }
}

/// Query of `GET /sandboxes/{id}/metrics`: Unix seconds, both ends included.
#[derive(Debug, Default, Deserialize)]
pub struct MetricsQuery {
    start: Option<i64>,
    end: Option<i64>,
}

/// A sandbox's metrics: sandlot keeps no history, so the answer is at most one sample, taken now
/// (none for a sandbox that is not running), and only when now falls in `start..=end`. The second
/// that began after `end` still counts: the request that names `end` as "now" arrives in it.
pub async fn metrics(
    State(app): State<AppState>,
    E2bAuth(caller): E2bAuth,
    ApiPath(id): ApiPath<String>,
    Query(q): Query<MetricsQuery>,
) -> Result<impl IntoResponse, E2bApiError> {
    if let (Some(start), Some(end)) = (q.start, q.end) {
        if start > end {
            return Err(E2bApiError::new(
                StatusCode::BAD_REQUEST,
                format!("start {start} is after end {end}: both are Unix seconds, start first"),
            ));
        }
    }
    let m = app.control.metrics(&caller, &sandbox_id(&id)?).await?;
    let in_range = |s: &sandlot_api::SandboxMetrics| {
        let at = s.at_ms.div_euclid(1000);
        q.start.is_none_or(|start| at >= start) && q.end.is_none_or(|end| at <= end + 1)
    };
    Ok(Json(m.iter().filter(|s| in_range(s)).map(metric).collect::<Vec<_>>()))
}

/// Query of `GET /sandboxes/metrics`.
#[derive(Debug, Default, Deserialize)]
pub struct BatchQuery {
    /// Comma-separated sandbox ids.
    sandbox_ids: Option<String>,
}

/// The latest sample of each running sandbox named; unknown and not-running ones are left out.
pub async fn batch_metrics(
    State(app): State<AppState>,
    E2bAuth(caller): E2bAuth,
    Query(q): Query<BatchQuery>,
) -> Result<impl IntoResponse, E2bApiError> {
    let ids: Vec<&str> = q.sandbox_ids.as_deref().unwrap_or("").split(',').filter(|s| !s.is_empty()).collect();
    if ids.len() > MAX_METRICS_BATCH {
        return Err(E2bApiError::new(
            StatusCode::BAD_REQUEST,
            format!("sandbox_ids names {} sandboxes; ask for at most {MAX_METRICS_BATCH} at once", ids.len()),
        ));
    }
    let samples = futures_util::future::join_all(ids.iter().map(|e2b_id| {
        let (app, caller) = (&app, &caller);
        async move {
            let id = sandlot_sandbox_id(e2b_id)?;
            let m = app.control.metrics(caller, &id).await.ok().flatten()?;
            Some((e2b_id.to_string(), metric(&m)))
        }
    }))
    .await;
    Ok(Json(SandboxesWithMetrics { sandboxes: samples.into_iter().flatten().collect() }))
}

/// Logs: sandlot keeps no per-sandbox log stream to serve (a command's output goes to its caller), so
/// this says so rather than answering an empty list that looks like "nothing happened".
pub async fn logs(
    State(app): State<AppState>,
    E2bAuth(caller): E2bAuth,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, E2bApiError> {
    app.control.get(&caller, &sandbox_id(&id)?)?;
    Err(E2bApiError::new(
        StatusCode::NOT_IMPLEMENTED,
        "sandlot keeps no sandbox logs: read a command's output from its handle (commands.run / connect by pid), \
         and the sandbox's actions from the audit log (`sandlot audit`)",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(json: &str) -> NetworkConfig {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn e2b_network_maps_to_sandlot_policy() {
        // Closed unless asked for: sandlot denies by default on every surface.
        assert_eq!(network_spec(None, None).unwrap().mode, Mode::Deny);
        let open = network_spec(Some(true), None).unwrap();
        assert_eq!(open.mode, Mode::AllowAll);
        assert_eq!(network_spec(Some(false), None).unwrap().mode, Mode::Deny);
        let listed = network_spec(None, Some(&net(r#"{"allowOut":["api.example.com"]}"#))).unwrap();
        assert_eq!((listed.mode, listed.allow), (Mode::Allowlist, vec!["api.example.com".to_string()]));
        let only =
            network_spec(None, Some(&net(r#"{"allowOut":["api.example.com"],"denyOut":["0.0.0.0/0"]}"#))).unwrap();
        assert_eq!(
            (only.mode, only.allow.clone(), only.deny.clone()),
            (Mode::Allowlist, vec!["api.example.com".into()], vec![])
        );
        let closed = network_spec(Some(false), Some(&net(r#"{"allowOut":["1.2.3.0/24"]}"#))).unwrap();
        assert_eq!(closed.mode, Mode::Allowlist);
        let deny = network_spec(Some(true), Some(&net(r#"{"denyOut":["10.0.0.0/8"]}"#))).unwrap();
        assert_eq!((deny.mode, deny.deny), (Mode::AllowAll, vec!["10.0.0.0/8".to_string()]));
        let rules = network_spec(
            None,
            Some(&net(r#"{"rules":{"api.x.com":[{"transform":{"headers":{"Authorization":"Bearer k"}}},{}]}}"#)),
        )
        .unwrap();
        assert_eq!(rules.rules["api.x.com"].headers["Authorization"], "Bearer k");
        let err = network_spec(None, Some(&net(r#"{"dnsServers":["1.1.1.1"]}"#))).unwrap_err();
        assert_eq!(err.status, StatusCode::BAD_REQUEST);
        assert!(err.message.contains("dnsServers"), "{}", err.message);
    }

    #[test]
    fn metadata_filters_are_decoded_once_past_the_query() {
        // What the query layer leaves of the SDK's `urlencode({quote(k): quote(v)})`.
        let f = metadata_filter(Some("user%2520id=a%2526b&k=v")).unwrap();
        assert_eq!(f, vec![("user id".into(), "a&b".into()), ("k".into(), "v".into())]);
        assert!(metadata_filter(Some("k=%zz")).is_err());
        assert!(metadata_filter(None).unwrap().is_empty());
    }

    #[test]
    fn pages_follow_tokens_and_end() {
        let items: Vec<u32> = vec![3, 0, 4, 1, 2];
        let key = |i: &u32| i.to_string();
        let (p1, t1) = page(items.clone(), key, true, None, Some(2));
        assert_eq!((p1, t1.as_deref()), (vec![0, 1], Some("1")));
        // Item 1 is gone before the next page: the token still marks the place.
        let without_1: Vec<u32> = items.iter().copied().filter(|i| *i != 1).collect();
        let (p2, t2) = page(without_1, key, true, Some("1"), Some(2));
        assert_eq!((p2, t2.as_deref()), (vec![2, 3], Some("3")));
        let (p3, t3) = page(items.clone(), key, true, Some("3"), Some(2));
        assert_eq!((p3, t3), (vec![4], None));
        let (d1, dt) = page(items, key, false, None, Some(4));
        assert_eq!((d1, dt.as_deref()), (vec![4, 3, 2, 1], Some("1")));
    }
}
