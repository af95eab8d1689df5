//! API keys: who a key stands for, and the admin's key management (create, optionally expiring;
//! list; revoke).

use sandlot_api::{CreateKey, KeyCreated, KeyList};
use sandlot_store::{now_ms, Auth};
use serde_json::json;

use crate::{Caller, Control, Error, Kind, Result};

/// Longest key lifetime that may be asked for: ten years (a bound, so the arithmetic cannot overflow).
const MAX_KEY_LIFETIME_S: u64 = 10 * 365 * 86_400;

fn unauthenticated(message: &str) -> Error {
    Error::new(Kind::Unauthenticated, message)
}

fn admin_only(caller: &Caller, what: &str) -> Result<()> {
    if caller.admin {
        return Ok(());
    }
    Err(Error::new(Kind::Forbidden, format!("only an admin key may {what} (see <state-dir>/admin.key)")))
}

/// When a key asked for with `req` stops working.
fn expiry(req: &CreateKey) -> Result<Option<i64>> {
    let now = now_ms();
    match (req.expires_in_s, req.expires_at_ms) {
        (Some(_), Some(_)) => Err(Error::invalid("give either expires_in_s or expires_at_ms, not both")),
        (Some(s), None) if s == 0 || s > MAX_KEY_LIFETIME_S => {
            Err(Error::invalid(format!("expires_in_s must be between 1 and {MAX_KEY_LIFETIME_S} (ten years), got {s}")))
        }
        (Some(s), None) => Ok(Some(now + s as i64 * 1000)),
        (None, Some(at)) if at <= now || at > now + MAX_KEY_LIFETIME_S as i64 * 1000 => Err(Error::invalid(format!(
            "expires_at_ms must be in the future and within ten years (it is now {now}), got {at}"
        ))),
        (None, at) => Ok(at),
    }
}

impl Control {
    /// The caller an API key stands for; an unknown, expired or revoked key is refused with a message
    /// that says which.
    pub fn authenticate(&self, key: &str) -> Result<Caller> {
        match self.store.authenticate(key)? {
            Auth::Valid(p) => Ok(Caller { tenant: p.tenant, admin: p.admin }),
            Auth::Unknown => Err(unauthenticated("unknown API key")),
            Auth::Expired(at) => Err(unauthenticated(&format!(
                "this API key expired at {at} (Unix ms); ask the admin for a new one (`sandlot keys create`)"
            ))),
            Auth::Revoked(at) => Err(unauthenticated(&format!(
                "this API key was revoked at {at} (Unix ms); ask the admin for a new one (`sandlot keys create`)"
            ))),
        }
    }

    /// Creates a key for tenant `req.tenant` (admin only).
    pub fn create_key(&self, caller: &Caller, req: &CreateKey) -> Result<KeyCreated> {
        admin_only(caller, "create keys")?;
        let t = &req.tenant;
        if t == "admin" {
            return Err(Error::invalid("the tenant name `admin` is reserved for the bootstrap admin key"));
        }
        if t.is_empty() || t.len() > 64 || !t.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
            return Err(Error::invalid("tenant must be 1-64 characters of A-Z a-z 0-9 - _ ."));
        }
        let expires_at_ms = expiry(req)?;
        let (key, id) = self.store.create_key_expiring(t, false, expires_at_ms)?;
        self.audit(
            &caller.tenant,
            None,
            "key.create",
            &json!({"tenant": t, "id": id, "expires_at_ms": expires_at_ms}),
        )?;
        Ok(KeyCreated { tenant: t.clone(), key, id, expires_at_ms })
    }

    /// The keys (of one tenant, or all), without their secrets (admin only).
    pub fn list_keys(&self, caller: &Caller, tenant: Option<&str>) -> Result<KeyList> {
        admin_only(caller, "list keys")?;
        Ok(KeyList { keys: self.store.list_keys(tenant)? })
    }

    /// Revokes key `id` (admin only); the bootstrap admin key cannot be revoked.
    pub fn revoke_key(&self, caller: &Caller, id: &str) -> Result<()> {
        admin_only(caller, "revoke keys")?;
        let Some(key) = self.store.list_keys(None)?.into_iter().find(|k| k.id == id) else {
            return Err(Error::not_found(&format!("key {id} (see GET /v1/keys for the ids)")));
        };
        if key.admin {
            return Err(Error::conflict(format!(
                "key {id} is the bootstrap admin key: it cannot be revoked, or no admin could act; keep \
                 <state-dir>/admin.key secret instead"
            )));
        }
        self.store.revoke_key(id)?;
        self.key_revocations.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.audit(&caller.tenant, None, "key.revoke", &json!({"id": id, "tenant": key.tenant}))?;
        Ok(())
    }
}
