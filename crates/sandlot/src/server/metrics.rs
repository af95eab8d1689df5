//! Metrics routes: a sandbox's recent samples (`GET /v1/sandboxes/{id}/metrics`), the Prometheus
//! endpoint (`GET /metrics`), and the request-latency histogram the endpoint shows, filled by a
//! middleware around every request.
//!
//! Label cardinality is bounded: requests are labelled by the route template that matched (never the
//! raw path; `unmatched` for anything no template matched: 404s, E2B envd and host-routed preview
//! traffic), their method (six names and `other`) and their status class; sandboxes and tenants by the
//! control layer's caps (`sandlot_control::sampler::MAX_SANDBOX_SERIES`, `MAX_TENANT_SERIES`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sandlot_api::SandboxSamples;
use sandlot_control::MetricsReport;
use serde::Deserialize;

use super::app::AppState;
use super::error::ApiError;
use super::extract::{bearer_key, ApiPath, ApiQuery, Auth};
use super::prometheus::{Text, Type, CONTENT_TYPE};

/// Upper bounds of the latency histogram's buckets, seconds.
const BUCKETS: [f64; 12] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// Label of requests no route template matched.
const UNMATCHED: &str = "unmatched";

/// One histogram: cumulative counts per bucket come from these at render time.
#[derive(Default)]
struct Histogram {
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// (route template, method, status class).
type Key = (String, &'static str, &'static str);

/// The server's own health and request latencies.
pub struct HttpMetrics {
    started: Instant,
    started_unix: f64,
    latencies: Mutex<HashMap<Key, Histogram>>,
}

impl Default for HttpMetrics {
    fn default() -> Self {
        HttpMetrics {
            started: Instant::now(),
            started_unix: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64()),
            latencies: Mutex::default(),
        }
    }
}

impl HttpMetrics {
    fn observe(&self, route: String, method: &'static str, status: StatusCode, took: Duration) {
        let class = match status.as_u16() {
            100..=199 => "1xx",
            200..=299 => "2xx",
            300..=399 => "3xx",
            400..=499 => "4xx",
            _ => "5xx",
        };
        let secs = took.as_secs_f64();
        let mut map = self.latencies.lock().unwrap_or_else(|p| p.into_inner());
        let h = map.entry((route, method, class)).or_default();
        if let Some(i) = BUCKETS.iter().position(|b| secs <= *b) {
            h.buckets[i] += 1;
        }
        h.count += 1;
        h.sum += secs;
    }
}

/// Where the inner middleware leaves the matched route template for the outer one.
#[derive(Clone, Default)]
struct RouteSlot(Arc<OnceLock<String>>);

fn method_label(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        _ => "other",
    }
}

/// Outermost middleware: times every request to its response head (a streamed body's length is not
/// counted) and records it under the route template the inner middleware found.
pub async fn observe(State(metrics): State<Arc<HttpMetrics>>, mut req: Request, next: Next) -> Response {
    let slot = RouteSlot::default();
    req.extensions_mut().insert(slot.clone());
    let method = method_label(req.method());
    let t0 = Instant::now();
    let response = next.run(req).await;
    let route = slot.0.get().cloned().unwrap_or_else(|| UNMATCHED.to_string());
    metrics.observe(route, method, response.status(), t0.elapsed());
    response
}

/// Route middleware (runs only for a matched route): hands its template to [`observe`].
pub async fn matched_route(req: Request, next: Next) -> Response {
    if let (Some(path), Some(slot)) = (req.extensions().get::<MatchedPath>(), req.extensions().get::<RouteSlot>()) {
        let _ = slot.0.set(path.as_str().to_string());
    }
    next.run(req).await
}

/// Query of `GET /v1/sandboxes/{id}/metrics`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamplesQuery {
    /// Only samples taken after this, Unix milliseconds.
    since: Option<i64>,
}

/// A sandbox's samples after `since` (Unix ms), with its limits.
pub async fn samples(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<SamplesQuery>,
) -> Result<Json<SandboxSamples>, ApiError> {
    Ok(Json(app.control.sandbox_samples(&caller, &id, q.since)?))
}

/// `GET /metrics`, for the admin key or the scrape token.
pub async fn prometheus(State(app): State<AppState>, headers: axum::http::HeaderMap) -> Result<Response, ApiError> {
    let key = match bearer_key(&headers) {
        Some(Some(k)) => k,
        Some(None) => {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                sandlot_api::codes::UNAUTHENTICATED,
                "malformed Authorization header; expected `Bearer <admin key or scrape token>`",
            ))
        }
        None => {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                sandlot_api::codes::UNAUTHENTICATED,
                "missing Authorization header; /metrics takes `Authorization: Bearer <admin key or the contents \
                 of --metrics-token-file>`",
            ))
        }
    };
    app.control.authorize_scrape(key)?;
    let report = app.control.metrics_report()?;
    let body = render(&app.http_metrics, &report);
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], body).into_response())
}

fn opt(v: Option<u64>) -> Option<f64> {
    v.map(|v| v as f64)
}

/// The whole exposition.
fn render(http: &HttpMetrics, r: &MetricsReport) -> String {
    let mut t = Text::default();
    t.single("sandlot_up", Type::Gauge, "1 while the server answers.", &[], 1.0);
    t.single(
        "sandlot_build_info",
        Type::Gauge,
        "Always 1; the version is the label.",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1.0,
    );
    t.single(
        "sandlot_start_time_seconds",
        Type::Gauge,
        "When the server started, Unix seconds.",
        &[],
        http.started_unix,
    );
    t.single(
        "sandlot_uptime_seconds",
        Type::Gauge,
        "Seconds since the server started.",
        &[],
        http.started.elapsed().as_secs_f64(),
    );
    latencies(&mut t, http);

    t.family("sandlot_sandboxes", Type::Gauge, "Sandboxes that are not deleted, by state.");
    for (state, n) in &r.sandboxes_by_state {
        t.sample("sandlot_sandboxes", &[("state", state)], *n as f64);
    }
    let p = &r.last_pass;
    t.single(
        "sandlot_metrics_interval_seconds",
        Type::Gauge,
        "Time between two metrics sampler passes (--metrics-interval-s).",
        &[],
        r.interval.as_secs_f64(),
    );
    t.single(
        "sandlot_metrics_last_pass_duration_seconds",
        Type::Gauge,
        "How long the sampler's last pass over the running sandboxes took.",
        &[],
        p.duration.as_secs_f64(),
    );
    t.single(
        "sandlot_metrics_last_pass_timestamp_seconds",
        Type::Gauge,
        "When the sampler's last pass ended, Unix seconds (0: none yet).",
        &[],
        p.at_ms as f64 / 1000.0,
    );
    t.single(
        "sandlot_metrics_sandboxes_left_out",
        Type::Gauge,
        "Running sandboxes without per-sandbox series: over the cap of 256, in id order (their tenants' totals include them).",
        &[],
        r.sandboxes_left_out as f64,
    );
    t.single(
        "sandlot_metrics_tenants_left_out",
        Type::Gauge,
        "Tenants without series of their own: over the cap of 1024, in name order.",
        &[],
        r.tenants_left_out as f64,
    );
    tenants(&mut t, r);
    sandboxes(&mut t, r);
    t.finish()
}

fn latencies(t: &mut Text, http: &HttpMetrics) {
    const NAME: &str = "sandlot_http_request_duration_seconds";
    t.family(
        NAME,
        Type::Histogram,
        "API request latency to the response head, by route template, method and status class.",
    );
    let map = http.latencies.lock().unwrap_or_else(|p| p.into_inner());
    let mut keys: Vec<&Key> = map.keys().collect();
    keys.sort();
    for key in keys {
        let h = &map[key];
        let (route, method, status) = (key.0.as_str(), key.1, key.2);
        let mut cumulative = 0;
        for (i, bound) in BUCKETS.iter().enumerate() {
            cumulative += h.buckets[i];
            let le = super::prometheus::number(*bound);
            let labels = [("route", route), ("method", method), ("status", status), ("le", le.as_str())];
            t.sample(&format!("{NAME}_bucket"), &labels, cumulative as f64);
        }
        let labels = [("route", route), ("method", method), ("status", status)];
        t.sample(
            &format!("{NAME}_bucket"),
            &[("route", route), ("method", method), ("status", status), ("le", "+Inf")],
            h.count as f64,
        );
        t.sample(&format!("{NAME}_sum"), &labels, h.sum);
        t.sample(&format!("{NAME}_count"), &labels, h.count as f64);
    }
}

fn tenants(t: &mut Text, r: &MetricsReport) {
    t.family("sandlot_tenant_sandboxes", Type::Gauge, "A tenant's sandboxes that are not deleted, by state.");
    for (tenant, totals) in &r.tenants {
        for (state, n) in &totals.sandboxes {
            t.sample("sandlot_tenant_sandboxes", &[("tenant", tenant), ("state", state)], *n as f64);
        }
    }
    type Figure = fn(&sandlot_control::sampler::TenantTotals) -> f64;
    let figures: [(&str, &str, Figure); 6] = [
        ("sandlot_tenant_cpu_usage_seconds", "CPU time of a tenant's running sandboxes since each started.", |x| {
            x.cpu_usec as f64 / 1e6
        }),
        ("sandlot_tenant_memory_bytes", "Memory a tenant's running sandboxes hold now.", |x| x.memory_bytes as f64),
        ("sandlot_tenant_pids", "Processes and threads of a tenant's running sandboxes.", |x| x.pids as f64),
        (
            "sandlot_tenant_disk_used_bytes",
            "Bytes the writable layers of a tenant's running sandboxes reference.",
            |x| x.disk_bytes as f64,
        ),
        (
            "sandlot_tenant_network_transmit_bytes",
            "Bytes a tenant's running sandboxes sent out since each started.",
            |x| x.net_bytes_out as f64,
        ),
        (
            "sandlot_tenant_network_receive_bytes",
            "Bytes a tenant's running sandboxes received since each started.",
            |x| x.net_bytes_in as f64,
        ),
    ];
    for (name, help, f) in figures {
        t.family(name, Type::Gauge, help);
        for (tenant, totals) in &r.tenants {
            t.sample(name, &[("tenant", tenant)], f(totals));
        }
    }
}

fn sandboxes(t: &mut Text, r: &MetricsReport) {
    type Figure = fn(&sandlot_control::sampler::SandboxGauges) -> Option<f64>;
    let figures: [(&str, Type, &str, Figure); 16] = [
        (
            "sandlot_sandbox_cpu_usage_seconds_total",
            Type::Counter,
            "CPU time a running sandbox used since it started.",
            |g| g.last.cpu_usage_usec.map(|u| u as f64 / 1e6),
        ),
        ("sandlot_sandbox_cpu_limit_cores", Type::Gauge, "A sandbox's CPU limit, cores.", |g| Some(g.limits.cpu)),
        (
            "sandlot_sandbox_cpu_periods_total",
            Type::Counter,
            "CPU quota periods (100 ms) in which the sandbox ran.",
            |g| opt(g.last.cpu_periods_total),
        ),
        (
            "sandlot_sandbox_cpu_throttled_periods_total",
            Type::Counter,
            "CPU quota periods in which the sandbox used up its quota.",
            |g| opt(g.last.cpu_throttled_periods_total),
        ),
        (
            "sandlot_sandbox_cpu_throttled_seconds_total",
            Type::Counter,
            "Time the sandbox's processes spent throttled.",
            |g| g.last.cpu_throttled_usec.map(|u| u as f64 / 1e6),
        ),
        ("sandlot_sandbox_memory_bytes", Type::Gauge, "Memory the sandbox holds now, page cache included.", |g| {
            opt(g.last.memory_bytes)
        }),
        ("sandlot_sandbox_memory_cache_bytes", Type::Gauge, "Of the sandbox's memory, page cache.", |g| {
            Some(g.last.memory_cache_bytes as f64)
        }),
        (
            "sandlot_sandbox_memory_peak_bytes",
            Type::Gauge,
            "Most memory the sandbox held at once since it started.",
            |g| opt(g.last.memory_peak_bytes),
        ),
        ("sandlot_sandbox_memory_limit_bytes", Type::Gauge, "The sandbox's memory limit.", |g| {
            Some(g.limits.memory_bytes as f64)
        }),
        ("sandlot_sandbox_oom_kills_total", Type::Counter, "Processes the OOM killer killed in the sandbox.", |g| {
            opt(g.last.oom_kills_total)
        }),
        ("sandlot_sandbox_pids", Type::Gauge, "Processes and threads in the sandbox now.", |g| opt(g.last.pids)),
        ("sandlot_sandbox_pids_limit", Type::Gauge, "The sandbox's process limit.", |g| Some(g.limits.pids as f64)),
        ("sandlot_sandbox_disk_used_bytes", Type::Gauge, "Bytes the sandbox's writable layer references.", |g| {
            opt(g.last.disk_used_bytes)
        }),
        ("sandlot_sandbox_disk_limit_bytes", Type::Gauge, "The sandbox's writable-layer cap.", |g| {
            opt(g.limits.disk_bytes)
        }),
        (
            "sandlot_sandbox_network_transmit_bytes_total",
            Type::Counter,
            "Bytes the sandbox sent through the egress proxy.",
            |g| Some(g.last.net_bytes_out_total as f64),
        ),
        (
            "sandlot_sandbox_network_receive_bytes_total",
            Type::Counter,
            "Bytes the sandbox received through the egress proxy.",
            |g| Some(g.last.net_bytes_in_total as f64),
        ),
    ];
    for (name, kind, help, f) in figures {
        t.family(name, kind, help);
        for g in &r.sandboxes {
            if let Some(v) = f(g) {
                t.sample(name, &[("sandbox", &g.id), ("tenant", &g.tenant)], v);
            }
        }
    }
    t.family(
        "sandlot_sandbox_network_connections",
        Type::Gauge,
        "TCP connections open through the sandbox's egress proxy.",
    );
    for g in &r.sandboxes {
        let labels = [("sandbox", g.id.as_str()), ("tenant", g.tenant.as_str())];
        t.sample("sandlot_sandbox_network_connections", &labels, g.last.net_connections as f64);
    }
    t.family(
        "sandlot_sandbox_network_connections_opened_total",
        Type::Counter,
        "TCP connections the sandbox opened through the egress proxy (allowed or refused).",
    );
    for g in &r.sandboxes {
        let labels = [("sandbox", g.id.as_str()), ("tenant", g.tenant.as_str())];
        t.sample("sandlot_sandbox_network_connections_opened_total", &labels, g.last.net_connections_total as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_are_cumulative_buckets_by_route_template() {
        let m = HttpMetrics::default();
        m.observe("/v1/sandboxes/{id}".into(), "GET", StatusCode::OK, Duration::from_millis(3));
        m.observe("/v1/sandboxes/{id}".into(), "GET", StatusCode::OK, Duration::from_millis(30));
        m.observe("/v1/sandboxes/{id}".into(), "GET", StatusCode::NOT_FOUND, Duration::from_secs(20));
        let text = render(&m, &MetricsReport::default());
        let line = |s: &str| assert!(text.lines().any(|l| l == s), "no line {s:?} in\n{text}");
        let b = "sandlot_http_request_duration_seconds_bucket{route=\"/v1/sandboxes/{id}\",method=\"GET\"";
        line(&format!("{b},status=\"2xx\",le=\"0.001\"}} 0"));
        line(&format!("{b},status=\"2xx\",le=\"0.005\"}} 1"));
        line(&format!("{b},status=\"2xx\",le=\"0.05\"}} 2"));
        line(&format!("{b},status=\"2xx\",le=\"+Inf\"}} 2"));
        line(&format!("{b},status=\"4xx\",le=\"10\"}} 0"));
        line(&format!("{b},status=\"4xx\",le=\"+Inf\"}} 1"));
        line(
            "sandlot_http_request_duration_seconds_count{route=\"/v1/sandboxes/{id}\",method=\"GET\",status=\"4xx\"} 1",
        );
        line("sandlot_up 1");
    }
}
