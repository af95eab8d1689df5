//! Webhooks: registered per tenant, each receiving its tenant's events of the kinds it names. This
//! module is what the API does with them; `delivery` sends the events.
//!
//! A webhook's target is an outbound connection from the daemon: its URL is checked here (scheme, no
//! user info, and a literal loopback/private/link-local address is refused unless the admin allows
//! private targets), and again where it is dialled (the address a name resolves to).

use std::net::IpAddr;

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

/// Whether webhooks may call `ip`: a public address (unless `allow_private`), and none of the host's
/// own (`host_net`: its addresses, on-link networks and default gateways, the egress proxy's
/// always-denied list) unless `allow_private`. An IPv4-mapped IPv6 address is judged as its IPv4.
pub(crate) fn may_call(ip: IpAddr, allow_private: bool, host_net: &dyn Fn(IpAddr) -> Option<String>) -> bool {
    let ip = ip.to_canonical();
    allow_private || (sandlot_oci::registry::is_public(ip) && host_net(ip).is_none())
}

/// Checks a webhook URL as registered: what is refused here is refused for every caller, whatever
/// the name resolves to later (that is checked at each delivery).
pub(crate) fn check_url(url: &str, allow_private: bool, host_net: &dyn Fn(IpAddr) -> Option<String>) -> Result<Target> {
    if url.len() > MAX_URL_BYTES {
        return Err(Error::invalid(format!("the webhook URL is {} bytes; at most {MAX_URL_BYTES}", url.len())));
    }
    let target = Target::parse(url).map_err(Error::invalid)?;
    if !allow_private {
        if let Some(ip) = target.literal_ip() {
            if !sandlot_oci::registry::is_public(ip.to_canonical()) {
                return Err(Error::invalid(format!(
                    "webhook URL {url:?} targets {ip}, a loopback, private, link-local or otherwise non-public \
                     address, which this server does not call; give a public address or name (an admin can allow \
                     private targets with `sandlot serve --webhook-allow-private`)"
                )));
            }
            if !may_call(ip, false, host_net) {
                return Err(Error::invalid(format!(
                    "webhook URL {url:?} targets {ip}, an address of this server's host or of a network it is on \
                     (its own addresses, on-link networks and gateways), which webhooks do not call; give a \
                     receiver outside them (an admin can allow such targets with `sandlot serve \
                     --webhook-allow-private`)"
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

/// What the audit log keeps of a webhook URL: `scheme://host:port` and a SHA-256 of the path and
/// query, where receivers (Slack, Discord, Zapier) put their credential.
pub(crate) fn audit_target(target: &Target) -> serde_json::Value {
    let digest = ring::digest::digest(&ring::digest::SHA256, target.path().as_bytes());
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    let scheme = if target.tls { "https" } else { "http" };
    let host = if target.host.contains(':') { format!("[{}]", target.host) } else { target.host.clone() };
    json!({"target": format!("{scheme}://{host}:{}", target.port), "path_sha256": hex})
}

impl Control {
    /// Registers a webhook for the caller's tenant; the answer holds the secret only when the server
    /// made it.
    pub fn create_webhook(&self, caller: &Caller, req: CreateWebhook) -> Result<Webhook> {
        let target = check_url(&req.url, self.cfg.events.webhook_allow_private, &|ip| self.engine.host_network_of(ip))?;
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
            &json!({"id": row.id, "url": audit_target(&target), "events": row.kinds, "secret_generated": made}),
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
        // A stored URL that no longer parses is audited as nothing rather than in full.
        let url = Target::parse(&row.url).map_or(serde_json::Value::Null, |t| audit_target(&t));
        let detail = json!({"id": id, "url": url, "by_admin": caller.admin && caller.tenant != row.tenant});
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
            let e = check_url(url, false, &|_| None).unwrap_err();
            assert_eq!(e.kind, Kind::Invalid, "{url}");
            assert!(e.message.contains("--webhook-allow-private"), "{url}: {}", e.message);
            check_url(url, true, &|_| None).unwrap();
        }
        check_url("https://hooks.example.com/sandlot", false, &|_| None).unwrap();
        check_url("http://93.184.216.34:8443/x?y=1", false, &|_| None).unwrap();
    }

    #[test]
    fn malformed_urls_say_what_is_wrong() {
        for (url, says) in [
            ("ftp://example.com/", "http"),
            ("https://user:pw@example.com/", "user"),
            ("example.com/hook", "http"),
            ("https:///nohost", "host"),
        ] {
            let e = check_url(url, true, &|_| None).unwrap_err();
            assert!(e.message.contains(says), "{url}: {}", e.message);
        }
        let long = format!("https://example.com/{}", "a".repeat(MAX_URL_BYTES));
        assert!(check_url(&long, true, &|_| None).unwrap_err().message.contains("at most"));
    }

    #[test]
    fn the_hosts_own_networks_are_refused_unless_private_targets_are_allowed() {
        let host: &dyn Fn(IpAddr) -> Option<String> = &|ip| match ip {
            IpAddr::V4(v4) if v4.octets()[..3] == [93, 184, 216] => Some("93.184.216.0/24".into()),
            IpAddr::V6(v6) if v6.segments()[0] == 0x2a00 => Some("2a00::/16".into()),
            _ => None,
        };
        for url in ["http://93.184.216.34:7423/metrics", "https://[2a00::5]/", "http://[::ffff:93.184.216.7]/"] {
            let e = check_url(url, false, host).unwrap_err();
            assert!(e.message.contains("network it is on") || e.message.contains("non-public"), "{url}: {}", e.message);
            check_url(url, true, host).unwrap();
        }
        check_url("http://93.184.217.1/", false, host).unwrap();
        // At delivery, the resolved addresses pass the same test.
        assert!(!may_call("93.184.216.1".parse().unwrap(), false, host));
        assert!(!may_call("::ffff:93.184.216.1".parse().unwrap(), false, host));
        assert!(may_call("93.184.216.1".parse().unwrap(), true, host));
        assert!(may_call("93.184.217.1".parse().unwrap(), false, host));
        assert!(!may_call("127.0.0.1".parse().unwrap(), false, host));
    }

    #[test]
    fn the_audit_keeps_where_a_url_points_but_not_its_path() {
        let t = Target::parse("https://hooks.slack.com/services/T000/B000/XXXXsecret?token=abc").unwrap();
        let a = audit_target(&t);
        assert_eq!(a["target"], "https://hooks.slack.com:443");
        assert_eq!(a["path_sha256"].as_str().unwrap().len(), 64);
        assert!(!a.to_string().contains("XXXXsecret") && !a.to_string().contains("abc"), "{a}");
        let v6 = audit_target(&Target::parse("http://[2001:db8::1]:8080/x").unwrap());
        assert_eq!(v6["target"], "http://[2001:db8::1]:8080");
    }
}
