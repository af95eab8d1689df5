//! API keys (admin routes): creating, listing and what a listing shows of a key.

use serde::{Deserialize, Serialize};

/// Body of `POST /v1/keys` (admin only).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateKey {
    /// Tenant the key acts for; created if new.
    pub tenant: String,
    /// The key stops working this many seconds from now (at most ten years). At most one of this and
    /// `expires_at_ms`; neither: it never expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in_s: Option<u64>,
    /// The key stops working at this Unix time (ms), which must be in the future.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
}

/// A freshly created API key. The secret is shown once and stored only as a hash.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct KeyCreated {
    /// Tenant of the key.
    pub tenant: String,
    /// The bearer token.
    pub key: String,
    /// The key's id (for `GET /v1/keys` and `DELETE /v1/keys/{id}`); not a secret.
    #[serde(default)]
    pub id: String,
    /// When the key stops working (Unix ms), if ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
}

/// One API key as `GET /v1/keys` shows it: never the secret or its hash.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct KeyInfo {
    /// Id (`key_` and 16 hex digits), for `DELETE /v1/keys/{id}`.
    pub id: String,
    /// The secret's first 8 characters, to tell keys apart.
    pub prefix: String,
    /// Tenant the key acts for.
    pub tenant: String,
    /// The bootstrap admin key.
    pub admin: bool,
    /// Creation time (Unix ms).
    pub created_at_ms: i64,
    /// When it stops working (Unix ms), if ever.
    pub expires_at_ms: Option<i64>,
    /// Last successful use (Unix ms, to the minute), if any.
    pub last_used_at_ms: Option<i64>,
    /// When it was revoked (Unix ms), if it was.
    pub revoked_at_ms: Option<i64>,
}

/// `GET /v1/keys`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct KeyList {
    /// Keys, oldest first.
    pub keys: Vec<KeyInfo>,
}
