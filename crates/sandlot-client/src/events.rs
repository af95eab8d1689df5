//! Lifecycle events (`GET /v1/events`) and webhooks (`/v1/webhooks`).

use sandlot_api::{CreateWebhook, Delivery, EventKind, EventList, Webhook, WebhookList};

use crate::client::{drain, json, Client};
use crate::{url, Result};

/// Which events [`Client::events`] reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventsQuery {
    /// Events with an id above this (the `next` of the previous read; 0: from the oldest kept).
    pub since: i64,
    /// At most this many (the server's default when `None`).
    pub limit: Option<u32>,
    /// One sandbox's.
    pub sandbox_id: Option<String>,
    /// These kinds only (empty: every kind).
    pub kinds: Vec<EventKind>,
    /// The admin key: one tenant's.
    pub tenant: Option<String>,
    /// When none is there yet, wait up to this many seconds (at most 60) for one.
    pub wait_s: Option<u64>,
}

impl Client {
    /// Lifecycle events after `q.since`, oldest first, with the cursor of the next read.
    pub fn events(&self, q: &EventsQuery) -> Result<EventList> {
        let since = q.since.to_string();
        let limit = q.limit.map(|n| n.to_string());
        let kinds = q.kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(",");
        let wait = q.wait_s.map(|n| n.to_string());
        let mut pairs = vec![("since", since.as_str())];
        if let Some(l) = &limit {
            pairs.push(("limit", l));
        }
        if let Some(id) = &q.sandbox_id {
            pairs.push(("sandbox_id", id));
        }
        if !kinds.is_empty() {
            pairs.push(("kind", &kinds));
        }
        if let Some(t) = &q.tenant {
            pairs.push(("tenant", t));
        }
        if let Some(w) = &wait {
            pairs.push(("wait_s", w));
        }
        json(self.send(self.request("GET", &format!("/v1/events{}", url::query(&pairs))))?, "the events")
    }

    /// Registers a webhook for the key's tenant. The answer holds `secret` only when the server made it.
    pub fn create_webhook(&self, request: &CreateWebhook) -> Result<Webhook> {
        json(self.send_json(self.request("POST", "/v1/webhooks"), request)?, "the created webhook")
    }

    /// The key's webhooks (the admin key: every tenant's), without secrets.
    pub fn webhooks(&self) -> Result<Vec<Webhook>> {
        let list: WebhookList = json(self.send(self.request("GET", "/v1/webhooks"))?, "the webhooks")?;
        Ok(list.webhooks)
    }

    /// Webhook `id`.
    pub fn webhook(&self, id: &str) -> Result<Webhook> {
        json(self.send(self.request("GET", &format!("/v1/webhooks/{}", url::segment(id))))?, "the webhook")
    }

    /// Deletes webhook `id` and its delivery log.
    pub fn delete_webhook(&self, id: &str) -> Result<()> {
        drain(self.send(self.request("DELETE", &format!("/v1/webhooks/{}", url::segment(id))))?);
        Ok(())
    }

    /// The newest delivery attempts of webhook `id`, newest first.
    pub fn webhook_deliveries(&self, id: &str, limit: Option<u32>) -> Result<Vec<Delivery>> {
        let limit = limit.map(|n| n.to_string());
        let pairs: Vec<(&str, &str)> = limit.as_deref().map(|l| ("limit", l)).into_iter().collect();
        let path = format!("/v1/webhooks/{}/deliveries{}", url::segment(id), url::query(&pairs));
        let list: sandlot_api::DeliveryList = json(self.send(self.request("GET", &path))?, "the delivery log")?;
        Ok(list.deliveries)
    }
}
