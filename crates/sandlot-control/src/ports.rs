//! Inbound connections to servers inside a sandbox, and the per-port tokens of preview URLs that let
//! a browser in without an API key.

use serde_json::json;

use crate::plan::random_id;
use crate::{Caller, Control, Error, Result};

/// A port opened for previews.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preview {
    /// The sandbox port.
    pub port: u16,
    /// The token that admits requests to it without an API key.
    pub token: String,
}

impl Control {
    /// Opens `port` of the caller's sandbox `id` for previews; the same token every time.
    pub async fn expose(&self, caller: &Caller, id: &str, port: u16) -> Result<Preview> {
        let (rec, _) = self.ensure_running(caller, id).await?;
        if port == 0 {
            return Err(Error::invalid("port must be 1-65535"));
        }
        let token = self.entries.port_token(id, port, || random_id("pt_"));
        self.audit(&rec.tenant, Some(id), "port.expose", &json!({"port": port}))?;
        Ok(Preview { port, token })
    }

    /// The caller a preview `token` for `port` of sandbox `id` stands for: the sandbox's owner, for
    /// this port only. Anything else is not found, as an unknown sandbox is.
    pub fn preview_caller(&self, id: &str, port: u16, token: &str) -> Result<Caller> {
        if !self.entries.port_token_matches(id, port, token) {
            return Err(Error::not_found(&format!("sandbox {id}")));
        }
        let tenant = self.store.tenant_of(id)?.unwrap_or_default();
        Ok(Caller { tenant, admin: false })
    }

    /// A connection to a server listening on `port` of the caller's sandbox `id` (on its loopback),
    /// carried through its supervisor.
    pub async fn connect(&self, caller: &Caller, id: &str, port: u16) -> Result<tokio::io::DuplexStream> {
        self.record(caller, id)?;
        let (_, sb) = self.ensure_running(caller, id).await?;
        Ok(sb.connect(port).await?)
    }
}
