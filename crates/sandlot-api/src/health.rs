//! `GET /healthz`: the server answers, and what of the host it runs without.

use serde::{Deserialize, Serialize};

/// Body of `GET /healthz` (no key needed).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct Health {
    /// `ok` whenever the server answers.
    pub status: String,
    /// Names of the host features `sandlot doctor`'s checks found degraded when the server started
    /// (`landlock`, `pid-max`, `memory`, …; see docs/API.md); empty when none. Only the names: this
    /// route needs no key, and the details (paths, pids, values) are in the server's log and in
    /// `sandlot doctor`'s output.
    #[serde(default)]
    pub degraded: Vec<String>,
}
