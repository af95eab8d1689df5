//! Lifecycle events (`GET /v1/events`) and the webhooks that receive them (`/v1/webhooks`).

use serde::{Deserialize, Serialize};

/// What happened to a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    /// Created and running (`POST /v1/sandboxes`, a fork, a restore).
    Created,
    /// A stopped sandbox runs again on a fresh supervisor (resume, auto-resume).
    Started,
    /// Every process frozen (by its owner, or by expiry with `on_timeout: pause`).
    Paused,
    /// A paused sandbox thawed.
    Resumed,
    /// Processes ended, files kept (by its owner, expiry, or the server's shutdown).
    Stopped,
    /// Removed (by its owner, expiry, or the server's shutdown).
    Deleted,
    /// Its lifetime or idle timeout ended; the `stopped`, `paused` or `deleted` event of what
    /// `on_timeout` did comes just before it.
    Expired,
    /// The kernel killed a process of the sandbox for want of memory.
    Oom,
    /// Its creation failed, or its supervisor died unexpectedly.
    Failed,
}

impl EventKind {
    /// Every kind, in the order above.
    pub const ALL: [EventKind; 9] = [
        EventKind::Created,
        EventKind::Started,
        EventKind::Paused,
        EventKind::Resumed,
        EventKind::Stopped,
        EventKind::Deleted,
        EventKind::Expired,
        EventKind::Oom,
        EventKind::Failed,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Created => "created",
            EventKind::Started => "started",
            EventKind::Paused => "paused",
            EventKind::Resumed => "resumed",
            EventKind::Stopped => "stopped",
            EventKind::Deleted => "deleted",
            EventKind::Expired => "expired",
            EventKind::Oom => "oom",
            EventKind::Failed => "failed",
        }
    }

    /// The kind named `s`, if any.
    pub fn parse(s: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One lifecycle event. This is also the body a webhook receives.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct Event {
    /// Its id: increases with every event of the server, so it is the cursor of `GET /v1/events?since=`.
    pub id: i64,
    /// When it happened (Unix ms).
    pub at_ms: i64,
    /// The sandbox's tenant.
    pub tenant: String,
    /// The sandbox.
    pub sandbox_id: String,
    /// What happened.
    pub kind: EventKind,
    /// A few facts of it (a reason, what expiry did, an OOM count); never command output or files.
    pub detail: serde_json::Value,
}

/// Body of `GET /v1/events`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct EventList {
    /// Events with an id above `since`, oldest first.
    pub events: Vec<Event>,
    /// The cursor to pass as `since` next time: the last id answered; when none, the server's newest
    /// event id (what lies between belongs to other tenants, sandboxes or kinds).
    pub next: i64,
}

/// Body of `POST /v1/webhooks`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateWebhook {
    /// Where events are POSTed: `http://` or `https://`, at most 2048 bytes, no user info. Private,
    /// loopback and link-local targets are refused unless the server allows them.
    pub url: String,
    /// Kinds to deliver; empty or absent: every kind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<EventKind>,
    /// The HMAC key of `Sandlot-Signature` (16–256 bytes). Absent: the server makes one and answers
    /// it, once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// A webhook.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct Webhook {
    /// Id (`wh_` and 16 hex digits).
    pub id: String,
    /// The tenant whose events it receives.
    pub tenant: String,
    /// Where events are POSTed.
    pub url: String,
    /// Kinds delivered; empty: every kind.
    pub events: Vec<EventKind>,
    /// Creation time (Unix ms).
    pub created_at_ms: i64,
    /// The id of the last event delivered or given up on: the events after it are pending.
    pub cursor: i64,
    /// The secret the server made, in the answer of the create that made it only; never otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// Body of `GET /v1/webhooks`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct WebhookList {
    /// Webhooks, oldest first.
    pub webhooks: Vec<Webhook>,
}

/// One attempt to deliver an event to a webhook.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct Delivery {
    /// The event delivered.
    pub event_id: i64,
    /// Its kind.
    pub kind: EventKind,
    /// 1 for the first attempt, then 2, 3…
    pub attempt: u32,
    /// When the attempt started (Unix ms).
    pub at_ms: i64,
    /// The receiver's HTTP status, if it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Why it did not answer (connection refused, timeout, a refused private address…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How long the attempt took, milliseconds.
    pub duration_ms: u64,
    /// Whether the event counts as delivered (a 2xx answer).
    pub ok: bool,
    /// Whether another attempt follows.
    pub will_retry: bool,
}

/// Body of `GET /v1/webhooks/{id}/deliveries`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct DeliveryList {
    /// Attempts, newest first.
    pub deliveries: Vec<Delivery>,
}

/// Header of a webhook request: the event's id (a receiver drops one it has seen: delivery is at
/// least once).
pub const HEADER_EVENT_ID: &str = "Sandlot-Event-Id";
/// Header of a webhook request: Unix seconds when the request was signed.
pub const HEADER_TIMESTAMP: &str = "Sandlot-Timestamp";
/// Header of a webhook request: `v1=` and the hex HMAC-SHA256, keyed by the secret, of
/// `"<timestamp>.<body>"`.
pub const HEADER_SIGNATURE: &str = "Sandlot-Signature";
