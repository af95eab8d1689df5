//! The audit log as `GET /v1/audit` returns it.

use serde::{Deserialize, Serialize};

/// One audit record.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct AuditEntry {
    /// Sequence number.
    pub seq: i64,
    /// Unix milliseconds.
    pub at_ms: i64,
    /// Tenant that acted.
    pub tenant: String,
    /// Sandbox concerned, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_id: Option<String>,
    /// What happened, e.g. `sandbox.create`, `exec`, `file.write`.
    pub action: String,
    /// Details (argv, path, status, duration…).
    pub detail: serde_json::Value,
}

/// Body of `GET /v1/audit`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct AuditList {
    /// Records, newest first.
    pub entries: Vec<AuditEntry>,
}
