//! Wire types of the E2B-compatible surface (`/e2b/...`, envd), the subset of E2B's REST API
//! (`spec/openapi.yml` of e2b-dev/E2B) that sandlot serves, written from the spec.
//!
//! Unlike sandlot's own types these do **not** reject unknown fields: the E2B SDKs add optional fields
//! release after release, and an SDK newer than this server must keep working (a field sandlot does not
//! know is one it does not act on). Names follow E2B's JSON (`sandboxID`, `envdVersion`, camelCase).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What an E2B API key starts with (E2B's format: `e2b_` and hex digits).
pub const E2B_KEY_PREFIX: &str = "e2b_";

/// The E2B-format API key for a sandlot API key: `e2b_` + the key's bytes in hex. It stands for the
/// same tenant and is revoked with it; nothing about it is stored.
pub fn e2b_api_key(sandlot_key: &str) -> String {
    let hex: String = sandlot_key.bytes().map(|b| format!("{b:02x}")).collect();
    format!("{E2B_KEY_PREFIX}{hex}")
}

/// The sandlot API key inside an E2B-format key, if it is one.
pub fn sandlot_key_of(e2b_key: &str) -> Option<String> {
    let hex = e2b_key.strip_prefix(E2B_KEY_PREFIX)?;
    if hex.is_empty() || hex.len() % 2 != 0 || hex.len() > 512 {
        return None;
    }
    let bytes: Option<Vec<u8>> =
        (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok()).collect();
    String::from_utf8(bytes?).ok()
}

/// The E2B sandbox id of a sandlot sandbox id: `sb_` dropped, so the id is a DNS label (E2B's ids are
/// lowercase letters and digits, and `{port}-{id}.{domain}` host names carry them).
pub fn e2b_sandbox_id(sandlot_id: &str) -> &str {
    sandlot_id.strip_prefix("sb_").unwrap_or(sandlot_id)
}

/// The sandlot sandbox id an E2B sandbox id names (`None` when it cannot be one).
pub fn sandlot_sandbox_id(e2b_id: &str) -> Option<String> {
    // The SDKs' `sandbox_id` may carry a client suffix (`{id}-{clientID}`) in older releases.
    let id = e2b_id.split_once('-').map_or(e2b_id, |(id, _)| id);
    (!id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()))
        .then(|| format!("sb_{id}"))
}

/// Body of an error answer: `{"code": <HTTP status>, "message": ...}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct E2bError {
    /// The HTTP status, repeated.
    pub code: u16,
    /// What went wrong and what to do.
    pub message: String,
}

/// Body of `POST /sandboxes` (E2B's `NewSandbox`), the fields sandlot acts on.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NewSandbox {
    /// Template (sandlot: image) to boot; `base` and absent mean the server's default image.
    #[serde(rename = "templateID", default, skip_serializing_if = "Option::is_none")]
    pub template_id: Option<String>,
    /// Lifetime in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    /// Free-form labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, String>>,
    /// Environment of every command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_vars: Option<BTreeMap<String, String>>,
    /// Pause instead of kill when the timeout passes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_pause: Option<bool>,
    /// With `autoPause`: `false` keeps only the files (stop rather than freeze).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_pause_memory: Option<bool>,
    /// Resume a paused sandbox when it is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_resume: Option<AutoResume>,
    /// Egress open (`true`) or closed (`false`); absent: open unless `network` says otherwise.
    #[serde(rename = "allow_internet_access", default, skip_serializing_if = "Option::is_none")]
    pub allow_internet_access: Option<bool>,
    /// Egress policy and per-host rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkConfig>,
    /// Any other field E2B defines, kept so a surface can refuse what it cannot honour.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// Answer to a create or a connect (E2B's `Sandbox`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct E2bSandbox {
    /// Template it was created from.
    #[serde(rename = "templateID")]
    pub template_id: String,
    /// Sandbox id (sandlot's without `sb_`).
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    /// Template alias.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    /// Deprecated by E2B; always `sandlot`.
    #[serde(rename = "clientID")]
    pub client_id: String,
    /// The envd protocol version sandlot speaks (the SDKs switch features on it).
    #[serde(rename = "envdVersion")]
    pub envd_version: String,
    /// The sandbox's access token for envd (`X-Access-Token`).
    #[serde(rename = "envdAccessToken")]
    pub envd_access_token: String,
    /// Token for the sandbox's ports (`E2B-Traffic-Access-Token`).
    #[serde(rename = "trafficAccessToken")]
    pub traffic_access_token: Option<String>,
    /// Domain of `{port}-{id}.{domain}` host names, when the server has one.
    pub domain: Option<String>,
}

/// A Unix time in milliseconds as RFC 3339 UTC (`2026-01-02T03:04:05.678Z`), the form E2B's times
/// take on the wire.
pub fn rfc3339_ms(unix_ms: i64) -> String {
    let secs = unix_ms.div_euclid(1000);
    let ms = unix_ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let day_s = secs.rem_euclid(86_400);
    let (year, month, day) = crate::civil_from_days(days);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{ms:03}Z", day_s / 3600, day_s / 60 % 60, day_s % 60)
}

/// Parses an RFC 3339 time (`2026-01-02T03:04:05Z`, `…05.678+01:00`, as the SDKs' `isoformat()` and
/// `toISOString()` write it) into Unix milliseconds; `None` when it is not one. Digits past the
/// millisecond are dropped.
pub fn parse_rfc3339_ms(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = b.get(r)?;
        part.iter().all(u8::is_ascii_digit).then(|| part.iter().fold(0i64, |n, d| n * 10 + i64::from(d - b'0')))
    };
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut i = 19;
    let mut ms = 0;
    if b[i] == b'.' {
        let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return None;
        }
        let kept = digits.min(3);
        ms = num(i + 1..i + 1 + kept)? * 10i64.pow(3 - kept as u32);
        i += 1 + digits;
    }
    let offset_s = match b.get(i..)? {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (h, m) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
            if h > 23 || m > 59 {
                return None;
            }
            let off = h * 3600 + m * 60;
            if *sign == b'+' {
                off
            } else {
                -off
            }
        }
        _ => return None,
    };
    let secs = crate::days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second - offset_s;
    Some(secs * 1000 + ms)
}

/// E2B's two sandbox states: a sandlot sandbox that is stopped is `paused` too (its files are kept and
/// connect resumes it).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum E2bState {
    /// Running (or still being created).
    Running,
    /// Paused or stopped: connect resumes it.
    Paused,
}

/// What happens when the timeout passes (E2B's `SandboxOnTimeout`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum OnTimeout {
    /// The sandbox is removed.
    Kill,
    /// The sandbox is paused.
    Pause,
}

/// The lifecycle policy reported by sandbox info.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Lifecycle {
    /// Resumed by traffic (commands, file operations) when paused.
    pub auto_resume: bool,
    /// What the timeout does.
    pub on_timeout: OnTimeout,
}

/// `autoResume` of a create.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct AutoResume {
    /// Resume a paused sandbox when it is used.
    #[serde(default)]
    pub enabled: bool,
}

/// A per-host egress rule (E2B's `SandboxNetworkRule`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct NetworkRule {
    /// What the proxy does to matching requests.
    #[serde(default)]
    pub transform: Option<NetworkTransform>,
}

/// Transforms applied by the egress proxy (E2B's `SandboxNetworkTransform`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct NetworkTransform {
    /// Headers set (added or replaced) on every matching request.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// The `network` object of a create or of `PUT /sandboxes/{id}/network` (E2B's `SandboxNetworkConfig`
/// and `SandboxNetworkUpdateConfig`), the fields sandlot acts on.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NetworkConfig {
    /// Ports reachable without a token (`true`); sandlot's default, unlike E2B's, is `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_public_traffic: Option<bool>,
    /// Allowed destinations: host names (`*.example.com`) and CIDRs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_out: Option<Vec<String>>,
    /// Refused CIDRs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deny_out: Option<Vec<String>>,
    /// Host → rules (header transforms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<BTreeMap<String, Vec<NetworkRule>>>,
    /// `allow_internet_access` of an update (the create has it beside `network`).
    #[serde(rename = "allow_internet_access", default, skip_serializing_if = "Option::is_none")]
    pub allow_internet_access: Option<bool>,
    /// Any other field: refused when set, since sandlot cannot honour it.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// Sandbox info (E2B's `SandboxDetail`) and a list entry (`ListedSandbox`, the same minus the
/// token, network and lifecycle, which are then absent).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SandboxDetail {
    /// Template it was created from.
    #[serde(rename = "templateID")]
    pub template_id: String,
    /// Sandbox id.
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    /// Template alias.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    /// Always `sandlot`.
    #[serde(rename = "clientID")]
    pub client_id: String,
    /// Creation time, RFC 3339.
    pub started_at: String,
    /// When the timeout ends it, RFC 3339.
    pub end_at: String,
    /// envd protocol version.
    pub envd_version: String,
    /// CPU cores (the limit, rounded up).
    pub cpu_count: u64,
    /// Memory limit, MiB.
    #[serde(rename = "memoryMB")]
    pub memory_mb: u64,
    /// Writable-layer cap, MiB (0 when the server has none).
    #[serde(rename = "diskSizeMB")]
    pub disk_size_mb: u64,
    /// `running` or `paused`.
    pub state: E2bState,
    /// Labels.
    pub metadata: BTreeMap<String, String>,
    /// The envd access token (info only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envd_access_token: Option<String>,
    /// Whether egress is open (info only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_internet_access: Option<bool>,
    /// Domain of host-routed URLs (info only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// Lifecycle policy (info only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Lifecycle>,
}

/// Body of `POST /sandboxes/{id}/timeout`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct TimeoutRequest {
    /// Seconds from now.
    pub timeout: u64,
}

/// Body of `POST /sandboxes/{id}/refreshes`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct RefreshRequest {
    /// Seconds to keep it alive from now.
    #[serde(default)]
    pub duration: Option<u64>,
}

/// Body of connect (`/sandboxes/{id}/connect`, `/v2/...`) and of the old resume.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ConnectRequest {
    /// Seconds from now.
    #[serde(default)]
    pub timeout: Option<u64>,
    /// `false`: reboot from the files rather than restore memory.
    #[serde(default)]
    pub memory: Option<bool>,
}

/// Body of `POST /sandboxes/{id}/pause`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PauseRequest {
    /// `true`/absent: keep memory (freezer); `false`: files only (stop).
    #[serde(default)]
    pub memory: Option<bool>,
    /// Refuse when the guest does not answer.
    #[serde(default)]
    pub require_healthy_guest: Option<bool>,
}

/// Body of `POST /sandboxes/{id}/snapshots`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SnapshotRequest {
    /// Name of the snapshot.
    #[serde(default)]
    pub name: Option<String>,
    /// Memory snapshots are not taken; `true` is refused.
    #[serde(default)]
    pub memory: Option<bool>,
}

/// A snapshot (E2B's `SnapshotInfo`): its id is what `Sandbox.create(template=...)` takes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct E2bSnapshot {
    /// The sandlot snapshot id.
    #[serde(rename = "snapshotID")]
    pub snapshot_id: String,
    /// Its name, when it has one.
    pub names: Vec<String>,
}

/// Body of `POST /sandboxes/{id}/fork`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ForkRequest {
    /// Lifetime of each fork, seconds (E2B's default: 15).
    #[serde(default)]
    pub timeout: Option<u64>,
    /// How many forks.
    #[serde(default)]
    pub count: Option<u32>,
}

/// One fork's outcome.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ForkOutcome {
    /// The fork, when it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<E2bSandbox>,
    /// Why it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<E2bError>,
}

/// One metrics sample (E2B's `SandboxMetric`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SandboxMetric {
    /// When it was taken, RFC 3339.
    pub timestamp: String,
    /// The same, Unix seconds.
    pub timestamp_unix: i64,
    /// CPU cores of the limit.
    pub cpu_count: u64,
    /// CPU used since the previous sample, percent of the limit.
    pub cpu_used_pct: f64,
    /// Memory in use, bytes.
    pub mem_used: u64,
    /// Memory limit, bytes.
    pub mem_total: u64,
    /// Page cache, bytes.
    pub mem_cache: u64,
    /// Writable layer in use, bytes.
    pub disk_used: u64,
    /// Writable-layer cap, bytes.
    pub disk_total: u64,
}

/// Answer of `GET /sandboxes/metrics`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SandboxesWithMetrics {
    /// Sandbox id → its latest sample.
    pub sandboxes: BTreeMap<String, SandboxMetric>,
}

/// A template (E2B's `Template`): a sandlot image.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct E2bTemplate {
    /// The image name.
    #[serde(rename = "templateID")]
    pub template_id: String,
    /// The image digest (or name when it has none).
    #[serde(rename = "buildID")]
    pub build_id: String,
    /// Default CPU cores of a sandbox.
    pub cpu_count: u64,
    /// Default memory, MiB.
    #[serde(rename = "memoryMB")]
    pub memory_mb: u64,
    /// Default disk, MiB.
    #[serde(rename = "diskSizeMB")]
    pub disk_size_mb: u64,
    /// Whether every tenant may use it.
    pub public: bool,
    /// Names it answers to.
    pub aliases: Vec<String>,
    /// The same.
    pub names: Vec<String>,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub updated_at: String,
    /// Unknown: null.
    pub created_by: Option<serde_json::Value>,
    /// Unknown: null.
    pub last_spawned_at: Option<String>,
    /// Not counted: 0.
    pub spawn_count: u64,
    /// Always 1 (images are built once).
    pub build_count: u64,
    /// envd protocol version.
    pub envd_version: String,
    /// Always `ready`.
    pub build_status: String,
}

/// Answer of `GET /templates/aliases/{alias}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TemplateAlias {
    /// The template.
    #[serde(rename = "templateID")]
    pub template_id: String,
    /// Whether every tenant may use it.
    pub public: bool,
}

/// Answer of `GET /e2b/connection` (sandlot's own, public): how clients reach the sandboxes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct E2bConnection {
    /// E2B_DOMAIN for host routing (`{domain}` or `{domain}:{tls port}`), when the server has one.
    pub domain: Option<String>,
    /// Whether the TLS certificate is the server's CA's (`GET /e2b/ca.pem` then answers it).
    pub ca_issued: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_e2b_key_round_trips_and_looks_like_e2bs() {
        let k = e2b_api_key("sl_AbC09");
        assert!(k.starts_with("e2b_") && k[4..].bytes().all(|b| b.is_ascii_hexdigit()), "{k}");
        assert_eq!(sandlot_key_of(&k).as_deref(), Some("sl_AbC09"));
        for bad in ["e2b_", "e2b_0", "e2b_zz", "sl_x", "e2b_ff"] {
            assert_eq!(sandlot_key_of(bad), None, "{bad}");
        }
    }

    #[test]
    fn rfc3339_parses_what_rfc3339_ms_writes_and_the_sdks_send() {
        for ms in [0, 1_765_000_000_123, 951_782_400_000, -86_400_000] {
            assert_eq!(parse_rfc3339_ms(&rfc3339_ms(ms)), Some(ms), "{}", rfc3339_ms(ms));
        }
        // Python's isoformat() of an aware datetime: microseconds and an offset.
        assert_eq!(parse_rfc3339_ms("2026-12-07T03:40:28.564123+00:00"), parse_rfc3339_ms("2026-12-07T03:40:28.564Z"));
        assert_eq!(parse_rfc3339_ms("2026-12-07T04:40:28+01:00"), parse_rfc3339_ms("2026-12-07T03:40:28Z"));
        assert_eq!(parse_rfc3339_ms("2026-12-06T23:10:28-04:30"), parse_rfc3339_ms("2026-12-07T03:40:28Z"));
        for bad in [
            "",
            "2026-12-07",
            "2026-12-07T03:40:28",
            "2026-13-07T03:40:28Z",
            "2026-12-07T03:40:28.Z",
            "2026-12-07T03:40:28+0100",
            "2026-12-07T03:40:28Zjunk",
            "2026-1a-07T03:40:28Z",
        ] {
            assert_eq!(parse_rfc3339_ms(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn sandbox_ids_map_both_ways() {
        assert_eq!(e2b_sandbox_id("sb_abc123"), "abc123");
        assert_eq!(sandlot_sandbox_id("abc123").as_deref(), Some("sb_abc123"));
        assert_eq!(sandlot_sandbox_id("abc123-client").as_deref(), Some("sb_abc123"));
        for bad in ["", "ABC", "a_b", "a.b", "-x"] {
            assert_eq!(sandlot_sandbox_id(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn times_are_rfc_3339_utc() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339_ms(1_798_761_599_999), "2026-12-31T23:59:59.999Z");
    }

    #[test]
    fn unknown_create_fields_are_kept_not_refused() {
        let n: NewSandbox = serde_json::from_str(r#"{"templateID":"base","timeout":30,"secure":true}"#).unwrap();
        assert_eq!(n.template_id.as_deref(), Some("base"));
        assert_eq!(n.other.get("secure"), Some(&serde_json::json!(true)));
    }
}
