//! Exposed ports and their preview URLs.

use serde::{Deserialize, Serialize};

/// Body of `POST /v1/sandboxes/{id}/ports`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ExposePort {
    /// Port a server listens on inside the sandbox (on its loopback or any address).
    pub port: u16,
}

/// An exposed port: its preview URL works without an API key (the token is in it).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct PortInfo {
    /// The port.
    pub port: u16,
    /// Preview URL (HTTP/1.1 and WebSocket upgrades are proxied; the token becomes a cookie).
    pub url: String,
    /// The per-port token (a bearer for this port of this sandbox only).
    pub token: String,
    /// The same port on the API's own address (`…/v1/sandboxes/{id}/ports/{port}/`), for programs
    /// that send the owner's API key: HTTP libraries that do not resolve `*.localhost` (Python's
    /// `requests`, Node's `fetch`) reach it there. No token in it; a browser uses `url`.
    #[serde(default)]
    pub api_url: String,
}
