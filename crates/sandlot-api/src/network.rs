//! Egress policy of a sandbox and the per-tenant exemptions from the always-deny list.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Network egress mode of a sandbox.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Nothing leaves (the default).
    #[default]
    Deny,
    /// Everything except the always-deny list and `deny` CIDRs.
    AllowAll,
    /// Only `allow` names and CIDRs.
    Allowlist,
}

/// Per-host transforms (credential brokering).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct HostRule {
    /// Headers added or replaced on every request to the host. Write-only through the API.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// The `network` object of `POST /v1/sandboxes` and `PATCH /v1/sandboxes/{id}/network`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct NetworkSpec {
    /// Mode.
    #[serde(default)]
    pub mode: Mode,
    /// Allowed names (`api.example.com`, `*.pypi.org`) and CIDRs.
    #[serde(default)]
    pub allow: Vec<String>,
    /// CIDRs always refused, even when allowed otherwise.
    #[serde(default)]
    pub deny: Vec<String>,
    /// Host → transforms.
    #[serde(default)]
    pub rules: BTreeMap<String, HostRule>,
    /// Let anyone with a port's URL reach the sandbox's servers without the port's token or a key
    /// (default `false`: every request to a port needs one). Inbound only; egress is the rest of this
    /// object. Omitted in a `PATCH`: left as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_ports: Option<bool>,
}

/// The network as `GET` reports it: header values of rules are never returned.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct NetworkInfo {
    /// Mode.
    pub mode: Mode,
    /// Allowed names and CIDRs.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Denied CIDRs.
    #[serde(default)]
    pub deny: Vec<String>,
    /// Host → names of the headers injected for it (values are write-only).
    #[serde(default)]
    pub rules: BTreeMap<String, Vec<String>>,
    /// Ports answer requests without a token or key.
    #[serde(default)]
    pub public_ports: bool,
    /// Bytes sent by the sandbox through the proxy.
    #[serde(default)]
    pub bytes_out: u64,
    /// Bytes received by the sandbox through the proxy.
    #[serde(default)]
    pub bytes_in: u64,
}

impl NetworkSpec {
    /// The redacted view.
    pub fn info(&self, bytes_out: u64, bytes_in: u64) -> NetworkInfo {
        NetworkInfo {
            mode: self.mode,
            allow: self.allow.clone(),
            deny: self.deny.clone(),
            rules: self.rules.iter().map(|(h, r)| (h.clone(), r.headers.keys().cloned().collect())).collect(),
            public_ports: self.public_ports.unwrap_or(false),
            bytes_out,
            bytes_in,
        }
    }
}

/// `GET`/`PUT /v1/tenants/{tenant}/network` (admin only): what of the always-deny list a tenant's
/// sandboxes may reach. An exemption only lifts the always-deny list; each sandbox's own policy must
/// still allow the destination (an `allow` CIDR or `allow-all`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct TenantNetwork {
    /// CIDRs (private ranges, metadata, the host's own addresses …) the tenant is opted into.
    #[serde(default)]
    pub exempt: Vec<String>,
}
