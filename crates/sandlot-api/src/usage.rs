//! What a tenant holds on the server: `GET /v1/usage` and, for an admin, `GET /v1/tenants/{t}/usage`.

use serde::{Deserialize, Serialize};

/// A tenant's sandboxes, snapshots and images, and the bytes each is charged.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct TenantUsage {
    /// The tenant.
    pub tenant: String,
    /// Sandboxes not deleted (running, paused, stopped, …).
    pub sandboxes: u64,
    /// Snapshots kept.
    pub snapshots: u64,
    /// Bytes the snapshots are charged (against `--snapshot-quota-mb`).
    pub snapshot_bytes: u64,
    /// Images the tenant owns (public ones are the admin's).
    pub images: u64,
    /// Bytes those images are charged: their blobs as stored plus the files their layers unpacked to
    /// (what one image shares with another counts for each).
    pub image_bytes: u64,
}
