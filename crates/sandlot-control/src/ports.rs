//! Inbound connections to servers inside a sandbox, and the per-port tokens of preview URLs that let
//! a browser in without an API key.

use std::sync::Arc;

use sandlot_engine::Sandbox;
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
        // A token stands for its owner's keys: once the tenant has none that works (revoked, expired),
        // its previews close too. One indexed EXISTS per request, however many keys the tenant has.
        if !self.store.tenant_has_live_key(&tenant)? {
            return Err(Error::not_found(&format!("sandbox {id}")));
        }
        Ok(Caller { tenant, admin: false })
    }

    /// The ports of the caller's sandbox `id`, which must be running (or is resumed, with
    /// `auto_resume`): checked before a surface reads the rest of a request it will forward.
    pub async fn ports(&self, caller: &Caller, id: &str) -> Result<Ports> {
        self.record(caller, id)?;
        let (_, sb) = self.ensure_running(caller, id).await?;
        Ok(Ports(sb))
    }
}

/// A running sandbox's ports, as [`Control::ports`] opened them for one caller.
pub struct Ports(Arc<Sandbox>);

impl Ports {
    /// A connection to a server listening on `port` of the sandbox's loopback, carried through its
    /// supervisor.
    pub async fn connect(&self, port: u16) -> Result<tokio::io::DuplexStream> {
        Ok(self.0.connect(port).await?)
    }
}
