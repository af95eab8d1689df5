//! Webhooks: registered per tenant, each receiving its tenant's events of the kinds it names. This
//! module is what the API does with them; `delivery` sends the events.
//!
//! A webhook's target is an outbound connection from the daemon: its URL is checked here (scheme, no
//! user info, and a literal loopback/private/link-local address is refused unless the admin allows
//! private targets), and again where it is dialled (the address a name resolves to).

use rand::RngCore;
use sandlot_api::{CreateWebhook, DeliveryList, Webhook, WebhookList};
use sandlot_store::{now_ms, WebhookRow};
use serde_json::json;

use crate::delivery::Target;
use crate::{Caller, Control, Error, Kind, Result};

/// Longest webhook URL.
const MAX_URL_BYTES: usize = 2048;
/// Bounds of a secret given by the caller, bytes.
const SECRET_BYTES: std::ops::RangeInclusive<usize> = 16..=256;

fn view(row: WebhookRow, secret: Option<String>) -> Webhook {
    Webhook {
        id: row.id,
        tenant: row.tenant,
        url: row.url,
        events: row.kinds,
        created_at_ms: row.created_ms,
        cursor: row.cursor,
        secret,
    }
}

/// Checks a webhook URL as registered: what is refused here is refused for every caller, whatever
/// the name resolves to later (that is checked at each delivery).
pub(crate) fn check_url(url: &str, allow_private: bool) -> Result<Target> {
    if url.len() > MAX_URL_BYTES {
        return Err(Error::invalid(format!("the webhook URL is {} bytes; at most {MAX_URL_BYTES}", url.len())));
    }
    let target = Target::parse(url).map_err(Error::invalid)?;
    if !allow_private {
        if let Some(ip) = target.literal_ip() {
            if !sandlot_oci::registry::is_public(ip) {
                return Err(Error::invalid(format!(
                    "webhook URL {url:?} targets {ip}, a loopback, private, link-local or otherwise non-public \
                     address, which this server does not call; give a public address or name (an admin can allow \
                     private targets with `sandlot serve --webhook-allow-private`)"
                )));
            }
        } else if target.host == "localhost" || target.host.ends_with(".localhost") {
            return Err(Error::invalid(format!(
                "webhook URL {url:?} names localhost, which this server does not call; give a public name \
                 (an admin can allow private targets with `sandlot serve --webhook-allow-private`)"
            )));
        }
    }
    Ok(target)
}

impl Control {
    /// Registers a webhook for the caller's tenant; the answer holds the secret only when the server
    /// made it.
    pub fn create_webhook(&self, caller: &Caller, req: CreateWebhook) -> Result<Webhook> {
        check_url(&req.url, self.cfg.events.webhook_allow_private)?;
        let made = req.secret.is_none();
        let secret = match req.secret {
            Some(s) if SECRET_BYTES.contains(&s.len()) => s,
            Some(s) => {
                return Err(Error::invalid(format!(
                    "the secret is {} bytes; give {} to {} bytes, or none and the server makes one",
                    s.len(),
                    SECRET_BYTES.start(),
                    SECRET_BYTES.end()
                )))
            }
            None => {
                let mut b = [0u8; 32];
                rand::rngs::OsRng.fill_bytes(&mut b);
                format!("whsec_{}", b.iter().map(|x| format!("{x:02x}")).collect::<String>())
            }
        };
        let mut kinds = req.events;
        kinds.sort();
        kinds.dedup();
        let mut idb = [0u8; 8];
        rand::rngs::OsRng.fill_bytes(&mut idb);
        let row = WebhookRow {
            id: format!("wh_{}", idb.iter().map(|x| format!("{x:02x}")).collect::<String>()),
            tenant: caller.tenant.clone(),
            url: req.url,
            kinds,
            secret: secret.clone(),
            created_ms: now_ms(),
            cursor: self.store.last_event_id()?,
        };
        let max = self.cfg.events.max_webhooks_per_tenant;
        if !self.store.insert_webhook(&row, max)? {
            return Err(Error::new(
                Kind::LimitReached,
                format!("tenant {} has {max} webhooks, the most this server allows; delete one first", caller.tenant),
            ));
        }
        self.audit(
            &caller.tenant,
            None,
            "webhook.create",
            &json!({"id": row.id, "url": row.url, "events": row.kinds, "secret_generated": made}),
        )?;
        self.events.hooks_changed.notify_one();
        Ok(view(row, made.then_some(secret)))
    }

    /// The caller's webhooks (the admin's key: every tenant's).
    pub fn list_webhooks(&self, caller: &Caller) -> Result<WebhookList> {
        let tenant = (!caller.admin).then_some(caller.tenant.as_str());
        let webhooks = self.store.list_webhooks(tenant)?.into_iter().map(|r| view(r, None)).collect();
        Ok(WebhookList { webhooks })
    }

    fn webhook_row(&self, caller: &Caller, id: &str) -> Result<WebhookRow> {
        let tenant = (!caller.admin).then_some(caller.tenant.as_str());
        self.store.get_webhook(tenant, id)?.ok_or_else(|| Error::not_found(&format!("webhook {id}")))
    }

    /// The caller's webhook `id`; another tenant's is not found.
    pub fn get_webhook(&self, caller: &Caller, id: &str) -> Result<Webhook> {
        Ok(view(self.webhook_row(caller, id)?, None))
    }

    /// Deletes the caller's webhook `id` and its delivery log; a delivery in flight is its last.
    pub fn delete_webhook(&self, caller: &Caller, id: &str) -> Result<()> {
        let row = self.webhook_row(caller, id)?;
        if !self.store.delete_webhook(Some(&row.tenant), id)? {
            return Err(Error::not_found(&format!("webhook {id}")));
        }
        let detail = json!({"id": id, "url": row.url, "by_admin": caller.admin && caller.tenant != row.tenant});
        self.audit(&row.tenant, None, "webhook.delete", &detail)?;
        self.events.hooks_changed.notify_one();
        Ok(())
    }

    /// The newest `limit` delivery attempts of the caller's webhook `id` (default 100, at most 1000).
    pub fn webhook_deliveries(&self, caller: &Caller, id: &str, limit: Option<u32>) -> Result<DeliveryList> {
        let row = self.webhook_row(caller, id)?;
        let limit = limit.unwrap_or(100).clamp(1, 1_000);
        Ok(DeliveryList { deliveries: self.store.list_deliveries(&row.id, limit)? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_private_targets_and_localhost_are_refused_unless_allowed() {
        for url in [
            "http://127.0.0.1:8080/hook",
            "http://10.0.0.1/",
            "https://169.254.169.254/latest/meta-data",
            "http://[::1]:9000/",
            "http://[fd00::1]/",
            "http://100.64.1.1/",
            "http://localhost:8080/",
            "http://api.localhost/",
        ] {
            let e = check_url(url, false).unwrap_err();
            assert_eq!(e.kind, Kind::Invalid, "{url}");
            assert!(e.message.contains("--webhook-allow-private"), "{url}: {}", e.message);
            check_url(url, true).unwrap();
        }
        check_url("https://hooks.example.com/sandlot", false).unwrap();
        check_url("http://93.184.216.34:8443/x?y=1", false).unwrap();
    }

    #[test]
    fn malformed_urls_say_what_is_wrong() {
        for (url, says) in [
            ("ftp://example.com/", "http"),
            ("https://user:pw@example.com/", "user"),
            ("example.com/hook", "http"),
            ("https:///nohost", "host"),
        ] {
            let e = check_url(url, true).unwrap_err();
            assert!(e.message.contains(says), "{url}: {}", e.message);
        }
        let long = format!("https://example.com/{}", "a".repeat(MAX_URL_BYTES));
        assert!(check_url(&long, true).unwrap_err().message.contains("at most"));
    }
}
